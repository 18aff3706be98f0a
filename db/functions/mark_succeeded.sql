-- mark_succeeded: records that a worker's attempt finished the job (processing → succeeded).
-- Acts only while that worker's attempt still holds the job (locked_by and attempts match), so a late
-- result from a worker whose lease expired and whose job was swept changes nothing.
-- Its job_attempts row becomes succeeded. Returns the updated job.
-- Raises QV400 (null or bad argument), QN404 (no such job), QL409 (the attempt no longer holds the job).
-- Security definer: runs as the queue's owner, so a caller needs EXECUTE on it and no privilege on
-- the tables; search_path is pinned (public, pg_temp) so the caller's objects cannot stand in for
-- the queue's. EXECUTE: pgqw_worker and pgqw_admin (db/security/grants.sql).
create or replace function mark_succeeded(
    p_job_id     uuid,
    p_worker_id  text,
    p_attempt    integer
) returns setof jobs
language plpgsql
security definer
set search_path = public, pg_temp
as $$
declare
    v_job jobs;
begin
    if p_job_id is null or p_worker_id is null or p_attempt is null then
        raise exception using errcode = 'QV400', message = 'job id, worker id and attempt must not be null';
    end if;
    if p_attempt < 1 then
        raise exception using errcode = 'QV400', message = format('attempt must be 1 or more, got %s', p_attempt);
    end if;

    -- locked_by = p_worker_id implies status = 'processing' (constraint jobs_locked_only_when_processing).
    -- Not naming the status keeps the planner on the primary key: a status condition lets it pick
    -- jobs_status_created_idx and walk every 'processing' entry, dead ones included, to find one id.
    update jobs j
       set status = 'succeeded', finished_at = greatest(now(), j.started_at),
           locked_by = null, lease_expires_at = null
     where j.id = p_job_id and j.locked_by = p_worker_id and j.attempts = p_attempt
    returning j.* into v_job;
    if not found then
        perform raise_job_not_held(p_job_id, p_worker_id, p_attempt);
    end if;

    update job_attempts a
       set outcome = 'succeeded', finished_at = greatest(now(), a.started_at)
     where a.job_id = p_job_id and a.attempt = p_attempt;

    return next v_job;
end;
$$;
