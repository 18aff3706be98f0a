-- mark_failed: records that a worker's attempt failed with p_error.
--   attempts left and p_retryable → failed, run_at = now() + backoff_delay(attempt) (processing → failed)
--   otherwise                     → dead, finished_at set                         (processing → dead)
-- Acts only while that worker's attempt still holds the job, like mark_succeeded.
-- Its job_attempts row becomes failed with the error. Backoff arguments left null come from queue_settings.
-- Returns the updated job.
-- Raises QV400 (null or bad argument), QN404 (no such job), QL409 (the attempt no longer holds the job).
-- Security definer: runs as the queue's owner, so a caller needs EXECUTE on it and no privilege on
-- the tables; search_path is pinned (public, pg_temp) so the caller's objects cannot stand in for
-- the queue's. EXECUTE: pgqw_worker and pgqw_admin (db/security/grants.sql).
create or replace function mark_failed(
    p_job_id         uuid,
    p_worker_id      text,
    p_attempt        integer,
    p_error          text,
    p_retryable      boolean default true,
    p_base_ms        integer default null,
    p_max_jitter_ms  integer default null,
    p_max_delay_ms   integer default null
) returns setof jobs
language plpgsql
security definer
set search_path = public, pg_temp
as $$
declare
    v_job jobs;
    v_error text;
begin
    if p_job_id is null or p_worker_id is null or p_attempt is null or p_retryable is null then
        raise exception using errcode = 'QV400',
            message = 'job id, worker id, attempt and retryable must not be null';
    end if;
    if p_attempt < 1 then
        raise exception using errcode = 'QV400', message = format('attempt must be 1 or more, got %s', p_attempt);
    end if;
    if p_error is null or p_error !~ '\S' then
        raise exception using errcode = 'QV400', message = 'error must be a non-empty text';
    end if;
    if p_base_ms < 0 or p_max_jitter_ms < 0 or p_max_delay_ms < 0 then
        raise exception using errcode = 'QV400',
            message = 'backoff base, jitter and maximum delay must not be negative';
    end if;
    v_error := left(p_error, 10000);

    update jobs j
       set status = case when p_retryable and j.attempts < j.max_attempts then 'failed' else 'dead' end,
           run_at = case when p_retryable and j.attempts < j.max_attempts
                         then now() + backoff_delay(j.attempts, p_base_ms, p_max_jitter_ms, p_max_delay_ms)
                         else j.run_at end,
           finished_at = case when p_retryable and j.attempts < j.max_attempts
                              then null else greatest(now(), j.started_at) end,
           last_error = v_error,
           locked_by = null,
           lease_expires_at = null
     where j.id = p_job_id and j.status = 'processing'
       and j.locked_by = p_worker_id and j.attempts = p_attempt
    returning j.* into v_job;
    if not found then
        perform raise_job_not_held(p_job_id, p_worker_id, p_attempt);
    end if;

    update job_attempts a
       set outcome = 'failed', error = v_error, finished_at = greatest(now(), a.started_at)
     where a.job_id = p_job_id and a.attempt = p_attempt;

    return next v_job;
end;
$$;
