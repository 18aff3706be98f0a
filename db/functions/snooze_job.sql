-- snooze_job: processing → pending with run_at = p_until (or now() + p_delay_ms; a time already past: now()) for the
-- attempt whose lease token this is, without spending it (max_attempts + 1, as release_job, while that stays at most
-- 1000; past it the try is spent, and the 1000th ends the job dead); its job_attempts row becomes snoozed. notify_due:
-- pgqw_jobs_at with '<ms> <queue>', or pgqw_jobs with the queue when it is due at once, while a worker waits for it. A job snoozed max_snoozes
-- times already (task_type_settings.max_snoozes: a DBA's, else the code's, else queue_settings') ends dead, its attempt failed ('snoozed more than N times');
-- a job asked to cancel ends cancelled; both notify pgqw_finished if watched. Returns the job and already_recorded
-- (true: this attempt had already ended so, nothing changed). Raises QV400 (bad argument; exactly one of p_until and
-- p_delay_ms), QN404 (no such job), QL409 (the token does not hold the job).
create or replace function snooze_job(
    p_job_id       uuid,
    p_lease_token  uuid,
    p_until        timestamptz default null,
    p_delay_ms     integer default null
) returns setof recorded_job
language plpgsql
security definer
set search_path from current
-- Rows by key whatever the statistics say, and no JIT (as in mark_failed).
set enable_seqscan = off
set jit = off
as $$
#variable_conflict use_column
declare
    v_job jobs;
    v_held record;
    v_attempt integer;
    v_outcome text;
    v_error text;
    v_until timestamptz;
    v_cancel boolean;
    v_requested_at timestamptz;
    v_limit integer;
    v_snoozes integer;
begin
    if p_job_id is null or p_lease_token is null then
        raise exception using errcode = 'QV400', message = 'job id and lease token must not be null',
            column = case when p_job_id is null then 'job_id' else 'lease_token' end;
    end if;
    if (p_until is null) = (p_delay_ms is null) then
        raise exception using errcode = 'QV400',
            message = 'give exactly one of until (a time) and delay_ms (milliseconds from now)',
            column = case when p_until is null then 'until' else 'delay_ms' end;
    end if;
    if p_delay_ms < 0 then
        raise exception using errcode = 'QV400',
            message = format('delay_ms must not be negative, got %s', p_delay_ms), column = 'delay_ms';
    end if;
    if not isfinite(p_until) or p_until >= '9999-01-01' then
        raise exception using errcode = 'QV400',
            message = format('until must be a finite time before the year 9999, got %s', p_until), column = 'until';
    end if;
    v_until := greatest(now(), coalesce(p_until, now() + make_interval(secs => p_delay_ms / 1000.0)));
    v_held := find_lease_attempt(p_job_id, p_lease_token);
    v_attempt := v_held.attempt;
    v_outcome := v_held.outcome;
    -- A cancel request is read with the job held: cancel_job holds it to make one.
    perform 1 from jobs k where k.id = p_job_id for update;
    select r.requested_at into v_requested_at from job_cancel_requests r where r.job_id = p_job_id;
    v_cancel := v_requested_at is not null;
    -- The job's limit, and its snoozes so far (through the primary key: one job's attempts).
    select coalesce(t.max_snoozes, s.max_snoozes) into v_limit
      from queue_settings s
      left join jobs k on k.id = p_job_id
      left join task_type_settings t on t.name = k.type;
    v_snoozes := (select count(*) from job_attempts a where a.job_id = p_job_id and a.outcome = 'snoozed');

    -- As it would end: snoozed, or cancelled, or failed (over the limit, or on the 1000th attempt).
    v_error := case
        when v_cancel then format('cancelled on request (asked at %s)', v_requested_at)
        when v_snoozes >= v_limit then format('snoozed more than %s time%s', v_limit, case when v_limit = 1 then '' else 's' end)
        else format('snoozed until %s', v_until) end;

    -- locked_by is not null is status = 'processing' (as in mark_failed).
    update jobs j
       set status = case when v_cancel then 'cancelled'
                         when v_snoozes >= v_limit or j.attempts >= least(1000, j.max_attempts + 1) then 'dead'
                         else 'pending' end,
           run_at = case when v_cancel or v_snoozes >= v_limit or j.attempts >= least(1000, j.max_attempts + 1)
                         then j.run_at else v_until end,
           max_attempts = case when v_cancel or v_snoozes >= v_limit then j.max_attempts
                               else least(1000, j.max_attempts + 1) end,
           finished_at = case when v_cancel or v_snoozes >= v_limit or j.attempts >= least(1000, j.max_attempts + 1)
                              then greatest(now(), j.started_at) end,
           last_error = case when v_cancel then j.last_error
                             when v_snoozes >= v_limit then v_error
                             when j.attempts >= least(1000, j.max_attempts + 1)
                                 then 'snoozed on its last attempt: a job has at most 1000'
                             else j.last_error end,
           locked_by = null, lease_expires_at = null
     where j.id = p_job_id and j.locked_by is not null and j.attempts = v_attempt and v_outcome is null
    returning j.* into v_job;
    if found then
        update job_attempts a
           set outcome = case when v_cancel then 'cancelled'
                              when v_job.status = 'dead' then 'failed' else 'snoozed' end,
               error = case when v_job.status = 'dead' then v_job.last_error else v_error end,
               finished_at = greatest(now(), a.started_at)
         where a.job_id = p_job_id and a.attempt = v_attempt;
        if v_job.status in ('dead', 'cancelled') then
            perform notify_watchers(p_job_id);  -- watch_job
            -- Its dependents and batch: only a job in a workflow (every parent is) or a batch has them.
            if v_job.workflow_id is not null or v_job.batch_id is not null then
                perform settle_jobs(array[p_job_id]);
            end if;
        else
            perform notify_due(v_job.queue, v_job.run_at);  -- a worker wakes when it comes due
        end if;
        return query select v_job, false;
        return;
    end if;

    -- Not held now. An earlier try of this call committed but its reply was lost: the attempt's row says it
    -- ended as a snooze ends. The job may have moved on since: it is returned as it is now.
    select a.outcome, a.error into v_outcome, v_error
      from job_attempts a where a.job_id = p_job_id and a.attempt = v_attempt;
    if v_outcome in ('snoozed', 'cancelled')
       or (v_outcome = 'failed' and (v_error like 'snoozed more than %' or v_error like 'snoozed on its last attempt%')) then
        return query select j, true from jobs j where j.id = p_job_id;
        return;
    end if;
    perform raise_job_not_held(p_job_id, v_attempt);
end;
$$;
