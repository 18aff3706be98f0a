-- mark_failed: processing → failed (tries left and p_retryable; run_at = now() + backoff_delay with the p_ arguments,
-- else the task type's backoff, else queue_settings'; notifies pgqw_jobs_at with '<ms> <queue>', or pgqw_jobs with the
-- queue when it is due at once) or → dead (notifies pgqw_finished if watched), for the attempt whose lease
-- token this is; its job_attempts row becomes failed with p_error (cut to 10,000 characters). A job asked to cancel
-- (cancel_job) ends cancelled instead (notifies pgqw_finished if watched), its attempt cancelled with p_error.
-- Returns the job and already_recorded (true: this attempt had already failed with this error, nothing changed).
-- Raises QV400 (bad argument), QN404 (no such job), QL409 (the token does not hold the job).
create or replace function mark_failed(
    p_job_id         uuid,
    p_lease_token    uuid,
    p_error          text,
    p_retryable      boolean default true,
    p_base_ms        integer default null,
    p_max_jitter_ms  integer default null,
    p_max_delay_ms   integer default null
) returns table (
    id uuid, type job_type, payload job_payload, status job_status, attempts integer, max_attempts job_max_attempts,
    last_error text, run_at timestamptz, created_at timestamptz, started_at timestamptz,
    finished_at timestamptz, locked_by job_worker_id, lease_expires_at timestamptz,
    idempotency_key job_idempotency_key, queue job_queue, priority integer, already_recorded boolean
)
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
    v_error text;
    v_type task_type_settings;
    v_attempt integer;
    v_outcome text;
    v_recorded_error text;
    v_cancel boolean;
    v_due_ms bigint;
begin
    if p_job_id is null or p_lease_token is null or p_retryable is null then
        raise exception using errcode = 'QV400',
            message = 'job id, lease token and retryable must not be null';
    end if;
    if p_error is null or p_error !~ '\S' then
        raise exception using errcode = 'QV400', message = 'error must be a non-empty text';
    end if;
    if p_base_ms < 0 or p_max_jitter_ms < 0 or p_max_delay_ms < 0 then
        raise exception using errcode = 'QV400',
            message = 'backoff base, jitter and maximum delay must not be negative';
    end if;
    v_error := left(p_error, 10000);
    select a.attempt, a.outcome, a.error into v_attempt, v_outcome, v_recorded_error
      from job_attempts a where a.job_id = p_job_id and a.lease_token_hash = sha256(uuid_send(p_lease_token));
    if v_attempt is null then
        perform raise_job_not_held(p_job_id, null);
    end if;
    -- A cancel request is read with the job held: cancel_job holds it to make one.
    perform 1 from jobs k where k.id = p_job_id for update;
    v_cancel := exists (select 1 from job_cancel_requests r where r.job_id = p_job_id);
    -- The job's task type's backoff where an argument is null (a type no worker registered: none).
    select t.* into v_type from jobs k join task_type_settings t on t.name = k.type where k.id = p_job_id;

    -- locked_by is not null is status = 'processing' (constraints jobs_processing_is_locked and
    -- jobs_locked_only_when_processing); naming the status would let the planner walk every processing
    -- entry of jobs_status_created_idx instead of taking the primary key.
    update jobs j
       set status = case when v_cancel then 'cancelled'
                         when p_retryable and j.attempts < j.max_attempts then 'failed' else 'dead' end,
           run_at = case when not v_cancel and p_retryable and j.attempts < j.max_attempts
                         then now() + backoff_delay(j.attempts, coalesce(p_base_ms, v_type.backoff_base_ms),
                                                    coalesce(p_max_jitter_ms, v_type.backoff_max_jitter_ms),
                                                    coalesce(p_max_delay_ms, v_type.backoff_max_delay_ms))
                         else j.run_at end,
           finished_at = case when not v_cancel and p_retryable and j.attempts < j.max_attempts
                              then null else greatest(now(), j.started_at) end,
           last_error = v_error,
           locked_by = null,
           lease_expires_at = null
     where j.id = p_job_id and j.locked_by is not null and j.attempts = v_attempt and v_outcome is null
    returning j.* into v_job;
    if found then
        if v_job.status in ('dead', 'cancelled') then
            if exists (select 1 from job_waiters w where w.job_id = p_job_id) then  -- watch_job
                perform pg_notify('pgqw_finished', p_job_id::text);
            end if;
        elsif v_job.status = 'failed' then
            -- The retry's time, so a worker wakes for it (delivered at commit, measured now).
            v_due_ms := ceil(extract(epoch from v_job.run_at - clock_timestamp()) * 1000);
            if v_due_ms > 0 then
                perform pg_notify('pgqw_jobs_at', v_due_ms || ' ' || v_job.queue);
            else
                perform pg_notify('pgqw_jobs', v_job.queue);
            end if;
        end if;
        update job_attempts a
           set outcome = case when v_cancel then 'cancelled' else 'failed' end, error = v_error, finished_at = greatest(now(), a.started_at)
         where a.job_id = p_job_id and a.attempt = v_attempt;
        return query select v_job.*, false;
        return;
    end if;

    -- Not held now. An earlier try of this call committed but its reply was lost: the attempt's row says
    -- it failed with this error. The job may have moved on since (a retry claimed it): it is returned as
    -- it is now.
    select a.outcome, a.error into v_outcome, v_recorded_error
      from job_attempts a where a.job_id = p_job_id and a.attempt = v_attempt;
    if v_outcome in ('failed', 'cancelled') and v_recorded_error = v_error then
        return query select j.*, true from jobs j where j.id = p_job_id;
        return;
    end if;
    perform raise_job_not_held(p_job_id, v_attempt);
end;
$$;
