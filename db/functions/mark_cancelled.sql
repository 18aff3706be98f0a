-- mark_cancelled: processing → cancelled for the attempt whose lease token this is, when a cancel was requested
-- (cancel_job); its job_attempts row becomes cancelled; notifies pgqw_finished if watched. Returns the job and
-- already_recorded (true: this attempt had already ended cancelled). Raises QV400, QN404, QL409 (the token does
-- not hold the job), QS409 (no cancel was requested).
create or replace function mark_cancelled(
    p_job_id       uuid,
    p_lease_token  uuid
) returns setof recorded_job
language plpgsql
security definer
set search_path from current
-- Rows by key whatever the statistics say: a plan a session keeps from when a table was small (a fresh
-- database, a burst before autoanalyze) read the whole table on every later call. No JIT for the cost of
-- the disabled path (as in claim_jobs_at).
set enable_seqscan = off
set jit = off
as $$
#variable_conflict use_column
declare
    v_job jobs;
    v_held record;
    v_attempt integer;
    v_outcome text;
    v_requested_at timestamptz;
begin
    if p_job_id is null or p_lease_token is null then
        raise exception using errcode = 'QV400', message = 'job id and lease token must not be null',
            column = case when p_job_id is null then 'job_id' else 'lease_token' end;
    end if;
    v_held := find_lease_attempt(p_job_id, p_lease_token);
    v_attempt := v_held.attempt;
    v_outcome := v_held.outcome;
    select r.requested_at into v_requested_at from job_cancel_requests r where r.job_id = p_job_id;
    if v_requested_at is null then
        raise exception using errcode = 'QS409',
            message = format('job %s was not asked to cancel; report its success or failure instead', p_job_id);
    end if;

    -- locked_by is not null is status = 'processing' (constraints jobs_processing_is_locked and
    -- jobs_locked_only_when_processing); naming the status would let the planner walk every processing
    -- entry of jobs_status_created_idx instead of taking the primary key.
    update jobs j
       set status = 'cancelled', finished_at = greatest(now(), j.started_at), locked_by = null, lease_expires_at = null
     where j.id = p_job_id and j.locked_by is not null and j.attempts = v_attempt and v_outcome is null
    returning j.* into v_job;
    if found then
        update job_attempts a
           set outcome = 'cancelled', finished_at = greatest(now(), a.started_at),
               error = format('cancelled on request (asked at %s)', v_requested_at)
         where a.job_id = p_job_id and a.attempt = v_attempt;
        perform notify_watchers(p_job_id);  -- watch_job
        -- Its dependents and batch: only a job in a workflow (every parent is) or a batch has them.
        if v_job.workflow_id is not null or v_job.batch_id is not null then
            perform settle_jobs(array[p_job_id]);
        end if;
        return query select v_job, false;
        return;
    end if;
    select a.outcome into v_outcome from job_attempts a where a.job_id = p_job_id and a.attempt = v_attempt;
    if v_outcome = 'cancelled' then
        return query select j, true from jobs j where j.id = p_job_id;
        return;
    end if;
    perform raise_job_not_held(p_job_id, v_attempt);
end;
$$;
