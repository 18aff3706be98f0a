-- release_job: a worker hands back a job it holds but will not finish (graceful shutdown)
-- (processing → pending, runnable at once). The handed-back attempt is not a failure of the work:
-- max_attempts grows by one so the job keeps all its tries, and its job_attempts row becomes
-- abandoned with the reason. Returns the updated job.
-- Raises QV400 (null or bad argument), QN404 (no such job), QL409 (the attempt no longer holds the job).
-- Security definer: runs as the queue's owner, so a caller needs EXECUTE on it and no privilege on
-- the tables; search_path is pinned (public, pg_temp) so the caller's objects cannot stand in for
-- the queue's. EXECUTE: pgqw_worker and pgqw_admin (db/security/grants.sql).
create or replace function release_job(
    p_job_id     uuid,
    p_worker_id  text,
    p_attempt    integer,
    p_reason     text default 'worker shutting down'
) returns setof jobs
language plpgsql
security definer
set search_path = public, pg_temp
as $$
declare
    v_job jobs;
    v_reason text;
begin
    if p_job_id is null or p_worker_id is null or p_attempt is null then
        raise exception using errcode = 'QV400', message = 'job id, worker id and attempt must not be null';
    end if;
    if p_attempt < 1 then
        raise exception using errcode = 'QV400', message = format('attempt must be 1 or more, got %s', p_attempt);
    end if;
    v_reason := format('handed back by worker %s: %s', p_worker_id,
                       coalesce(nullif(btrim(p_reason), ''), 'no reason given'));

    update jobs j
       set status = 'pending', run_at = now(), max_attempts = j.max_attempts + 1,
           locked_by = null, lease_expires_at = null
     where j.id = p_job_id and j.status = 'processing'
       and j.locked_by = p_worker_id and j.attempts = p_attempt
    returning j.* into v_job;
    if not found then
        perform raise_job_not_held(p_job_id, p_worker_id, p_attempt);
    end if;

    update job_attempts a
       set outcome = 'abandoned', abandon_reason = 'handed_back', error = left(v_reason, 10000), finished_at = greatest(now(), a.started_at)
     where a.job_id = p_job_id and a.attempt = p_attempt;

    perform pg_notify('pgqw_jobs', v_job.queue);
    return next v_job;
end;
$$;
