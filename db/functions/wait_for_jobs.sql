-- wait_for_jobs: worker p_worker_id found nothing to claim in p_queues (null: every queue) and waits for a
-- notification: until now() + p_for_ms, enqueue_job(s) and the functions that put a job back to wait notify
-- the queues named (has_waiters). Replaces the worker's earlier rows (another set of queues), and deletes
-- every row that ran out more than a minute ago. Returns until.
-- The caller commits, then takes a new transaction id (pg_current_xact_id(), in a transaction of its own),
-- and claims once more after waits_settled(that id): a producer that did not see the rows had an id below it.
-- Raises QV400 (a null, blank or over-long worker id, an empty list or a null, blank or over-long queue,
-- p_for_ms outside 1000..3600000).
create or replace function wait_for_jobs(
    p_worker_id  text,
    p_queues     text[] default null,
    p_for_ms     integer default 60000
) returns timestamptz
language plpgsql
security definer
set search_path from current
as $$
declare
    v_until timestamptz;
    v_queues text[];
begin
    if p_worker_id is null or p_worker_id !~ '\S' or length(p_worker_id) > 200 then
        raise exception using errcode = 'QV400',
            message = 'worker id must be a non-empty text of at most 200 characters',
            column = 'worker_id';
    end if;
    if p_queues is not null and (cardinality(p_queues) = 0 or cardinality(p_queues) > 1000
                                 or array_position(p_queues, null) is not null
                                 or exists (select 1 from unnest(p_queues) q where q !~ '\S' or length(q) > 200)) then
        raise exception using errcode = 'QV400',
            message = 'queues, when given, must be 1 to 1000 non-blank names of at most 200 characters, without nulls',
            column = 'queues';
    end if;
    if p_for_ms is null or p_for_ms < 1000 or p_for_ms > 3600000 then
        raise exception using errcode = 'QV400',
            message = format('for_ms must be between 1000 and 3600000, got %s', coalesce(p_for_ms::text, 'null')),
            column = 'for_ms';
    end if;
    v_until := now() + make_interval(secs => p_for_ms / 1000.0);
    v_queues := case when p_queues is null then array['*'] else array(select distinct q from unnest(p_queues) q) end;
    delete from queue_waiters w
     where (w.worker_id = p_worker_id and not w.queue = any (v_queues))
        or w.until < now() - interval '1 minute';
    insert into queue_waiters as w (queue, worker_id, until)
    select q, p_worker_id, v_until from unnest(v_queues) q
    on conflict (queue, worker_id) do update set until = excluded.until;
    return v_until;
end;
$$;
