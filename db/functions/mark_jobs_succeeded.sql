-- mark_jobs_succeeded: mark_succeeded for many jobs of one worker in one call (processing → succeeded).
-- p_job_ids[i] was claimed at attempt p_attempts[i]. Only the jobs that attempt still holds change;
-- the others (swept, handed back) are left alone and are missing from the result, so the caller can
-- tell which late results were ignored. Their job_attempts rows become succeeded.
-- Raises QV400 for a null argument or arrays of different lengths.
-- Security definer: runs as the queue's owner, so a caller needs EXECUTE on it and no privilege on
-- the tables; search_path is pinned (public, pg_temp) so the caller's objects cannot stand in for
-- the queue's. EXECUTE: pgqw_worker and pgqw_admin (db/security/grants.sql).
create or replace function mark_jobs_succeeded(
    p_worker_id  text,
    p_job_ids    uuid[],
    p_attempts   integer[]
) returns setof jobs
language plpgsql
security definer
set search_path = public, pg_temp
as $$
begin
    if p_worker_id is null or p_job_ids is null or p_attempts is null then
        raise exception using errcode = 'QV400', message = 'worker id, job ids and attempts must not be null';
    end if;
    if cardinality(p_job_ids) <> cardinality(p_attempts) then
        raise exception using errcode = 'QV400',
            message = format('got %s job ids but %s attempts', cardinality(p_job_ids), cardinality(p_attempts));
    end if;

    return query
    with done as (
        -- One primary-key lookup per (id, attempt) pair. locked_by = p_worker_id implies status =
        -- 'processing' (constraint jobs_locked_only_when_processing); naming the status would let the
        -- planner scan every processing job instead.
        update jobs j
           set status = 'succeeded', finished_at = greatest(now(), j.started_at),
               locked_by = null, lease_expires_at = null
         where (j.id, j.attempts) in (select t.job_id, t.attempt from unnest(p_job_ids, p_attempts) as t(job_id, attempt))
           and j.locked_by = p_worker_id
        returning j.*
    ), recorded as (
        update job_attempts a
           set outcome = 'succeeded', finished_at = greatest(now(), a.started_at)
          from done
         where a.job_id = done.id and a.attempt = done.attempts
    )
    select * from done;
end;
$$;
