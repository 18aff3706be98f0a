-- mark_failed: processing → failed (tries left and p_retryable; run_at = now() + backoff_delay of the tries that
-- failed (not the attempts snoozed or handed back), with the p_ arguments, else the task type's backoff, else queue_settings'; notify_due: pgqw_jobs_at with
-- '<ms> <queue>', or pgqw_jobs with the queue when it is due at once, while a worker waits for the queue) or → dead (notifies pgqw_finished if watched),
-- for the attempt whose lease token this is; its job_attempts row becomes failed with p_error (cut to 10,000
-- characters). A job asked to cancel (cancel_job) ends cancelled instead (notifies pgqw_finished if watched), its
-- attempt cancelled with p_error.
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
    v_error text;
    v_type task_type_settings;
    v_held record;
    v_attempt integer;
    v_outcome text;
    v_recorded_error text;
    v_cancel boolean;
    v_spared integer := 0;
begin
    if p_job_id is null or p_lease_token is null or p_retryable is null then
        raise exception using errcode = 'QV400',
            message = 'job id, lease token and retryable must not be null',
            column = case when p_job_id is null then 'job_id' when p_lease_token is null then 'lease_token'
                          else 'retryable' end;
    end if;
    if p_error is null or p_error !~ '\S' then
        raise exception using errcode = 'QV400', message = 'error must be a non-empty text', column = 'error';
    end if;
    if p_base_ms < 0 or p_max_jitter_ms < 0 or p_max_delay_ms < 0 then
        raise exception using errcode = 'QV400',
            message = 'backoff base, jitter and maximum delay must not be negative',
            column = case when p_base_ms < 0 then 'base_ms' when p_max_jitter_ms < 0 then 'max_jitter_ms'
                          else 'max_delay_ms' end;
    end if;
    v_error := left(p_error, 10000);
    v_held := find_lease_attempt(p_job_id, p_lease_token);
    v_attempt := v_held.attempt;
    v_outcome := v_held.outcome;
    -- A cancel request is read with the job held: cancel_job holds it to make one.
    perform 1 from jobs k where k.id = p_job_id for update;
    v_cancel := exists (select 1 from job_cancel_requests r where r.job_id = p_job_id);
    -- The job's task type's backoff where an argument is null (a type no worker registered: none).
    select t.* into v_type from jobs k join task_type_settings t on t.name = k.type where k.id = p_job_id;
    -- The backoff counts the tries that failed: an attempt snoozed (snooze_job) or handed back (release_job)
    -- spent no try, and makes the next wait no longer (time_out_attempt counts the same). The first attempt
    -- has none before it.
    if v_attempt > 1 then
        v_spared := (select count(*) from job_attempts a
                      where a.job_id = p_job_id and a.attempt < v_attempt
                        and (a.outcome = 'snoozed' or a.abandon_reason = 'handed_back'));
    end if;

    -- locked_by is not null is status = 'processing' (constraints jobs_processing_is_locked and
    -- jobs_locked_only_when_processing); naming the status would let the planner walk every processing
    -- entry of jobs_status_created_idx instead of taking the primary key.
    update jobs j
       set status = case when v_cancel then 'cancelled'
                         when p_retryable and j.attempts < j.max_attempts then 'failed' else 'dead' end,
           run_at = case when not v_cancel and p_retryable and j.attempts < j.max_attempts
                         then now() + backoff_delay(j.attempts - v_spared, coalesce(p_base_ms, v_type.backoff_base_ms),
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
            perform notify_watchers(p_job_id);  -- watch_job
            -- Its dependents and batch: only a job in a workflow (every parent is) or a batch has them.
            if v_job.workflow_id is not null or v_job.batch_id is not null then
                perform settle_jobs(array[p_job_id]);
            end if;
        elsif v_job.status = 'failed' then
            perform notify_due(v_job.queue, v_job.run_at);  -- a worker wakes when it comes due
        end if;
        update job_attempts a
           set outcome = case when v_cancel then 'cancelled' else 'failed' end, error = v_error, finished_at = greatest(now(), a.started_at)
         where a.job_id = p_job_id and a.attempt = v_attempt;
        return query select v_job, false;
        return;
    end if;

    -- Not held now. An earlier try of this call committed but its reply was lost: the attempt's row says
    -- it failed with this error. The job may have moved on since (a retry claimed it): it is returned as
    -- it is now.
    select a.outcome, a.error into v_outcome, v_recorded_error
      from job_attempts a where a.job_id = p_job_id and a.attempt = v_attempt;
    if v_outcome in ('failed', 'cancelled') and v_recorded_error = v_error then
        return query select j, true from jobs j where j.id = p_job_id;
        return;
    end if;
    perform raise_job_not_held(p_job_id, v_attempt);
end;
$$;
