-- set_queue_limit: at most p_max_running jobs of the queue processing at once, across all workers
-- (claim_jobs_at enforces it); null removes the limit. Jobs already running above a lowered limit
-- finish; no new claim takes from the queue until it is under the limit. Notifies pgqw_jobs with the queue.
-- Returns the queue's row.
-- A queue that is not known yet is refused (QU404) unless p_create.
-- Raises QU404, QV400 (null, blank or over-long name; a limit below 1).
create or replace function set_queue_limit(
    p_queue        text,
    p_max_running  integer,
    p_create       boolean default false
) returns setof queues
language plpgsql
security definer
set search_path from current
as $$
begin
    if p_queue is null or p_queue !~ '\S' or length(p_queue) > 100 then
        raise exception using errcode = 'QV400',
            message = 'queue must be a non-empty text of at most 100 characters',
            column = 'queue';
    end if;
    if p_max_running < 1 then
        raise exception using errcode = 'QV400',
            message = format('max running must be at least 1 (or null for no limit), got %s', p_max_running),
            column = 'max_running';
    end if;
    perform raise_unknown_queue(p_queue, p_create);
    -- Waiting jobs the old limit or rate held back may start now: a listening worker that found
    -- nothing does not poll, so it is woken.
    perform pg_notify('pgqw_jobs', p_queue);
    return query
    insert into queues as q (name, max_running, updated_at) values (p_queue, p_max_running, now())
    on conflict on constraint queues_pkey do update set max_running = excluded.max_running,
                                                        updated_at = excluded.updated_at
    returning q.*;
end;
$$;
