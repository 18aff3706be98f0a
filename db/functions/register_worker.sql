-- register_worker: a worker says it is alive, with its queues (null: all) and task types; made at
-- start and refreshed at every heartbeat (alive until now() + p_ttl_ms). A stopped row comes back to
-- life. p_waits_for_jobs: this worker says when it waits for jobs (wait_for_jobs), as every worker of this
-- release does; false (the default, what a worker of an earlier release calls): it may wait at any time
-- without saying so, so producers notify every queue until its row runs out (a queue_waiters row '*' until
-- expires_at, renewed with each registration). Returns the worker's row. Raises QV400 (a bad argument).
create or replace function register_worker(
    p_worker_id    text,
    p_task_types   text[],
    p_queues       text[] default null,
    p_concurrency  integer default null,
    p_hostname     text default null,
    p_pid          integer default null,
    p_ttl_ms       integer default 30000,
    p_waits_for_jobs boolean default false
) returns setof workers
language plpgsql
security definer
set search_path from current
as $$
begin
    if p_worker_id is null or p_worker_id !~ '\S' or length(p_worker_id) > 200 then
        raise exception using errcode = 'QV400',
            message = 'worker id must be a non-empty text of at most 200 characters',
            column = 'worker_id';
    end if;
    if p_task_types is null or array_position(p_task_types, null) is not null then
        raise exception using errcode = 'QV400', message = 'task types must be an array of names without nulls',
            column = 'task_types';
    end if;
    if p_ttl_ms is null or p_ttl_ms < 1 or p_ttl_ms > 86400000 then
        raise exception using errcode = 'QV400',
            message = format('ttl must be between 1 ms and one day, got %s', coalesce(p_ttl_ms::text, 'null')),
            column = 'ttl_ms';
    end if;
    if p_concurrency is not null and p_concurrency < 1 then
        raise exception using errcode = 'QV400', message = 'concurrency must be 1 or more',
            column = 'concurrency';
    end if;
    if not coalesce(p_waits_for_jobs, false) then
        insert into queue_waiters as q (queue, worker_id, until)
        values ('*', p_worker_id, now() + make_interval(secs => p_ttl_ms / 1000.0))
        on conflict (queue, worker_id) do update set until = excluded.until;
    end if;
    return query
    insert into workers as w (id, hostname, pid, queues, task_types, concurrency, started_at, last_seen_at,
                              expires_at, stopped_at)
    values (p_worker_id, p_hostname, p_pid, p_queues, p_task_types, p_concurrency, now(), now(),
            now() + make_interval(secs => p_ttl_ms / 1000.0), null)
    on conflict on constraint workers_pkey do update
       set hostname = coalesce(excluded.hostname, w.hostname), pid = coalesce(excluded.pid, w.pid),
           queues = excluded.queues, task_types = excluded.task_types,
           concurrency = coalesce(excluded.concurrency, w.concurrency),
           started_at = case when w.stopped_at is not null then now() else w.started_at end,
           last_seen_at = now(), expires_at = excluded.expires_at, stopped_at = null
    returning w.*;
end;
$$;
