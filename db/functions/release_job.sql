-- release_job: processing → pending (runnable at once, max_attempts + 1 so the try is not spent, while that stays
-- at most 1000; past it the try is spent, and the last one ends the job dead) for the attempt whose
-- lease token this is; its job_attempts row becomes abandoned (handed_back) with the reason. Notifies pgqw_jobs.
-- A job asked to cancel (cancel_job) ends cancelled instead, its attempt cancelled; notifies pgqw_finished if watched.
-- Returns the job and already_recorded (true: this attempt was already handed back, nothing changed).
-- Raises QV400 (bad argument), QN404 (no such job), QL409 (the token does not hold the job).
create or replace function release_job(
    p_job_id       uuid,
    p_lease_token  uuid,
    p_reason       text default 'worker shutting down'
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
    v_reason text;
    v_held record;
    v_attempt integer;
    v_worker text;
    v_outcome text;
    v_abandon text;
    v_cancel boolean;
begin
    if p_job_id is null or p_lease_token is null then
        raise exception using errcode = 'QV400', message = 'job id and lease token must not be null',
            column = case when p_job_id is null then 'job_id' else 'lease_token' end;
    end if;
    v_held := find_lease_attempt(p_job_id, p_lease_token);
    v_attempt := v_held.attempt;
    v_worker := v_held.worker_id;
    v_outcome := v_held.outcome;
    v_reason := format('handed back by worker %s: %s', v_worker,
                       coalesce(nullif(btrim(p_reason), ''), 'no reason given'));

    -- A cancel request is read with the job held: cancel_job holds it to make one.
    perform 1 from jobs k where k.id = p_job_id for update;
    v_cancel := exists (select 1 from job_cancel_requests r where r.job_id = p_job_id);

    -- locked_by is not null is status = 'processing' (constraints jobs_processing_is_locked and
    -- jobs_locked_only_when_processing); naming the status would let the planner walk every processing
    -- entry of jobs_status_created_idx instead of taking the primary key.
    update jobs j
       set status = case when v_cancel then 'cancelled'
                         when j.attempts < least(1000, j.max_attempts + 1) then 'pending' else 'dead' end,
           run_at = case when v_cancel then j.run_at else now() end,
           max_attempts = case when v_cancel then j.max_attempts else least(1000, j.max_attempts + 1) end,
           finished_at = case when v_cancel or j.attempts >= least(1000, j.max_attempts + 1)
                              then greatest(now(), j.started_at) end,
           last_error = case when not v_cancel and j.attempts >= least(1000, j.max_attempts + 1)
                             then left(v_reason || ' (on its last attempt: a job has at most 1000)', 10000)
                             else j.last_error end,
           locked_by = null, lease_expires_at = null
     where j.id = p_job_id and j.locked_by is not null and j.attempts = v_attempt and v_outcome is null
    returning j.* into v_job;
    if found then
        update job_attempts a
           set outcome = case when v_cancel then 'cancelled' else 'abandoned' end,
               abandon_reason = case when v_cancel then null else 'handed_back' end,
               error = left(v_reason, 10000), finished_at = greatest(now(), a.started_at)
         where a.job_id = p_job_id and a.attempt = v_attempt;
        if v_job.status in ('cancelled', 'dead') then
            perform notify_watchers(p_job_id);  -- watch_job
            -- Its dependents and batch: only a job in a workflow (every parent is) or a batch has them.
            if v_job.workflow_id is not null or v_job.batch_id is not null then
                perform settle_jobs(array[p_job_id]);
            end if;
        else
            perform pg_notify('pgqw_jobs', v_job.queue);
        end if;
        return query select v_job, false;
        return;
    end if;

    -- Not held now. An earlier try of this call committed but its reply was lost: the attempt's row says
    -- it was handed back. The job may have moved on since.
    select a.outcome, a.abandon_reason into v_outcome, v_abandon
      from job_attempts a where a.job_id = p_job_id and a.attempt = v_attempt;
    if (v_outcome = 'abandoned' and v_abandon = 'handed_back') or v_outcome = 'cancelled' then
        return query select j, true from jobs j where j.id = p_job_id;
        return;
    end if;
    perform raise_job_not_held(p_job_id, v_attempt);
end;
$$;
