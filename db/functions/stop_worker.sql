-- stop_worker: a worker says it has stopped (a clean exit): it shows as gone at once, and waits for no job. Returns its
-- row, or nothing for an unknown worker. Raises QV400 (a null id).
create or replace function stop_worker(
    p_worker_id  text
) returns setof workers
language plpgsql
security definer
set search_path from current
as $$
begin
    if p_worker_id is null then
        raise exception using errcode = 'QV400', message = 'worker id must not be null',
            column = 'worker_id';
    end if;
    delete from queue_waiters q where q.worker_id = p_worker_id;  -- it no longer waits for jobs (wait_for_jobs)
    return query
    update workers w set stopped_at = now(), last_seen_at = now(), expires_at = now()
     where w.id = p_worker_id
    returning w.*;
end;
$$;
