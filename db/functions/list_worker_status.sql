-- list_worker_status: the workers as the console shows them, the live ones first, then the gone ones
-- most recently seen first; at most p_limit. alive is the database's verdict: the worker's heartbeat keeps
-- expires_at ahead of the server's clock (register_worker) and it has not said it stopped.
-- No state change. Raises nothing of its own.
create or replace function list_worker_status(p_limit integer default 200)
returns table (id text, hostname text, pid integer, queues text[], task_types text[], concurrency integer,
               started_at timestamptz, last_seen_at timestamptz, expires_at timestamptz,
               stopped_at timestamptz, alive boolean)
language sql stable
set search_path from current
as $$
    select w.id::text, w.hostname, w.pid, w.queues, w.task_types, w.concurrency, w.started_at,
           w.last_seen_at, w.expires_at, w.stopped_at, (w.expires_at > now() and w.stopped_at is null) as alive
      from workers w
     order by alive desc, w.last_seen_at desc, w.id
     limit p_limit;
$$;
