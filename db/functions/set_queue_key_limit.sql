-- set_queue_key_limit: at most p_max_running jobs of the queue with one concurrency_key processing at once,
-- across all workers (claim_jobs_at enforces it: a claim skips a key at its limit and takes another key's job);
-- null removes the limit. Jobs without a concurrency_key are not counted. Notifies pgqw_jobs with the queue.
-- Returns the queue's row. A queue that is not known yet is refused (QU404) unless p_create.
-- Raises QU404, QV400 (null, blank or over-long name; a limit below 1).
create or replace function set_queue_key_limit(
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
            message = format('max running per key must be at least 1 (or null for no limit), got %s', p_max_running),
            column = 'max_running';
    end if;
    perform raise_unknown_queue(p_queue, p_create);
    -- Waiting jobs the old limit held back may start now: a listening worker that found nothing does not poll.
    perform pg_notify('pgqw_jobs', p_queue);
    return query
    insert into queues as q (name, key_max_running, updated_at) values (p_queue, p_max_running, now())
    on conflict on constraint queues_pkey do update set key_max_running = excluded.key_max_running,
                                                        updated_at = excluded.updated_at
    returning q.*;
end;
$$;
