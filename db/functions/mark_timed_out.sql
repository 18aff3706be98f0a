-- mark_timed_out: processing → failed (tries left, after backoff_delay: the p_ arguments, else the task type's, else
-- queue_settings') or → dead, the token's attempt `timed_out`, once its deadline has passed, as the sweep would when
-- its lease runs out (time_out_attempt); a job asked to cancel ends cancelled (mark_cancelled). Returns the job and
-- already_recorded (true: the attempt had ended so already, by an earlier try whose reply was lost or by a sweep).
-- Raises QV400, QN404, QL409 (the token does not hold the job), QS409 (no deadline, or not passed).
create or replace function mark_timed_out(
    p_job_id         uuid,
    p_lease_token    uuid,
    p_base_ms        integer default null,
    p_max_jitter_ms  integer default null,
    p_max_delay_ms   integer default null
) returns setof recorded_job
language plpgsql
security definer
set search_path from current
-- Rows by key whatever the statistics say (as in mark_failed).
set enable_seqscan = off
set jit = off
as $$
#variable_conflict use_column
declare
    v_held record;
    v_attempt integer;
    v_deadline timestamptz;
    v_held_now boolean;
    v_outcome text;
begin
    if p_job_id is null or p_lease_token is null then
        raise exception using errcode = 'QV400', message = 'job id and lease token must not be null',
            column = case when p_job_id is null then 'job_id' else 'lease_token' end;
    end if;
    if p_base_ms < 0 or p_max_jitter_ms < 0 or p_max_delay_ms < 0 then
        raise exception using errcode = 'QV400',
            message = 'backoff base, jitter and maximum delay must not be negative',
            column = case when p_base_ms < 0 then 'base_ms' when p_max_jitter_ms < 0 then 'max_jitter_ms'
                          else 'max_delay_ms' end;
    end if;
    v_held := find_lease_attempt(p_job_id, p_lease_token);
    v_attempt := v_held.attempt;
    -- The job held, as the sweep and cancel_job hold it: a cancel request is read after this.
    select j.locked_by is not null and j.attempts = v_attempt and v_held.outcome is null into v_held_now
      from jobs j where j.id = p_job_id for update;

    if v_held_now then
        select a.deadline_at into v_deadline from job_attempts a where a.job_id = p_job_id and a.attempt = v_attempt;
        if v_deadline is null or v_deadline > now() then
            raise exception using errcode = 'QS409',
                message = case when v_deadline is null
                               then format('job %s attempt %s has no deadline: it cannot time out', p_job_id, v_attempt)
                               else format('job %s attempt %s has not timed out: its deadline is %s', p_job_id,
                                           v_attempt, v_deadline) end,
                detail = case when v_deadline is null then 'neither the job nor its task type has a timeout'
                              else format('%s ms left', ceil(extract(epoch from v_deadline - now()) * 1000)) end,
                hint = 'report its result, or call again once the deadline has passed';
        end if;
        if exists (select 1 from job_cancel_requests r where r.job_id = p_job_id) then
            return query select * from mark_cancelled(p_job_id, p_lease_token);
            return;
        end if;
        return query select time_out_attempt(p_job_id, v_attempt, p_base_ms, p_max_jitter_ms, p_max_delay_ms), false;
        return;
    end if;

    -- Not held now. An earlier try of this call committed but its reply was lost: the attempt's row says it
    -- timed out (or ended cancelled, for a job asked to cancel). The job is returned as it is now.
    select a.outcome into v_outcome from job_attempts a where a.job_id = p_job_id and a.attempt = v_attempt;
    if v_outcome in ('timed_out', 'cancelled') then
        return query select j, true from jobs j where j.id = p_job_id;
        return;
    end if;
    perform raise_job_not_held(p_job_id, v_attempt);
end;
$$;
