-- 0021_expiry_retention: a job may expire before it starts, and a task type may keep its finished jobs
-- longer or shorter than the queue's retention.
--   * Expiry. jobs.expires_at: a job whose first attempt has not begun by then is never claimed, and ends
--     `expired` (a new final status): the sweep moves it there. Given at enqueue (expires_at, or
--     expire_after_ms from its run_at), else the task type's expire_after_ms from its run_at
--     (task_type_settings.expire_after_ms: a DBA's task_types.expire_after_ms over the code's
--     code_expire_after_ms, which register_task_types writes), else never. Once an attempt has begun
--     (attempts > 0) expiry no longer applies. The rule of jobs.status (the job_status domain's
--     jobs_status_check, 0014) is restated with `expired`, and check_job_row's jobs_finished_iff_final
--     counts it final. jobs_expiry_idx is what the sweep reads: only jobs not started that may expire.
--   * Retention per task type. task_types.retain_succeeded and retain_failed (a DBA's) over
--     code_retain_succeeded and code_retain_failed (the code's): how long a type's succeeded jobs, and its
--     dead, cancelled and expired ones, are kept before prune_expired_jobs deletes them; null takes
--     queue_settings' prune_succeeded_after and prune_finished_after. jobs_type_finished_idx lets
--     prune_expired_jobs read each type's oldest finished jobs, whatever the other types keep.
--   * The snooze limit from code: task_types.code_max_snoozes, under a DBA's max_snoozes (0020).
-- task_type_settings is restated whole (0019's columns, then expire_after_ms, retain_succeeded,
-- retain_failed, max_snoozes).

alter table jobs
    add column expires_at timestamptz;

alter table task_types
    add column code_expire_after_ms integer,
    add column expire_after_ms integer,
    add column code_retain_succeeded interval,
    add column retain_succeeded interval,
    add column code_retain_failed interval,
    add column retain_failed interval,
    add column code_max_snoozes integer,
    add constraint task_types_expire_after_range check (expire_after_ms >= 1 and code_expire_after_ms >= 1),
    add constraint task_types_retain_range
        check (retain_succeeded between interval '0' and interval '100 years'
               and code_retain_succeeded between interval '0' and interval '100 years'
               and retain_failed between interval '0' and interval '100 years'
               and code_retain_failed between interval '0' and interval '100 years'),
    add constraint task_types_code_max_snoozes_range check (code_max_snoozes between 0 and 1000);

alter domain job_status drop constraint jobs_status_check;
alter domain job_status add constraint jobs_status_check
    check (value in ('pending', 'processing', 'succeeded', 'failed', 'dead', 'cancelled', 'expired')) not valid;
alter domain job_status validate constraint jobs_status_check;

-- As in 0014, with `expired` among the final statuses (no row is expired yet: the rows there keep the rule).
create or replace function check_job_row(
    p_status text, p_attempts integer, p_max_attempts integer, p_last_error text,
    p_started_at timestamptz, p_finished_at timestamptz, p_locked_by text, p_lease_expires_at timestamptz
) returns boolean
language plpgsql immutable
-- No SET clause: see 0014.
as $$
declare
    v_rule text;
begin
    -- Each rule as it was a CHECK constraint; a null result passes, as it does for one.
    if not (p_attempts >= 0 and p_attempts <= p_max_attempts) then
        v_rule := 'jobs_attempts_range';
    elsif not (p_status <> 'processing'
               or (p_locked_by is not null and p_started_at is not null and p_lease_expires_at is not null)) then
        v_rule := 'jobs_processing_is_locked';
    elsif not (p_status = 'processing' or (p_locked_by is null and p_lease_expires_at is null)) then
        v_rule := 'jobs_locked_only_when_processing';
    elsif not (p_status not in ('failed', 'dead') or p_last_error is not null) then
        v_rule := 'jobs_failure_has_error';
    elsif not ((p_status in ('succeeded', 'dead', 'cancelled', 'expired')) = (p_finished_at is not null)) then
        v_rule := 'jobs_finished_iff_final';
    elsif not (p_status <> 'succeeded' or p_attempts >= 1) then
        v_rule := 'jobs_succeeded_was_attempted';
    else
        return true;
    end if;
    raise exception using errcode = 'check_violation', constraint = v_rule, table = 'jobs',
        message = format('new row for relation "jobs" violates check constraint "%s"', v_rule);
end;
$$;

-- What the sweep reads to expire jobs: only jobs not started yet that have an expiry, oldest expiry first.
create index jobs_expiry_idx on jobs (expires_at)
    where status = 'pending' and attempts = 0 and expires_at is not null;
-- What prune_expired_jobs reads: each type's finished jobs of one status, oldest first.
create index jobs_type_finished_idx on jobs (type, status, finished_at) where finished_at is not null;

-- As in 0019, with the expiry, the retention and the snooze limit.
create or replace view task_type_settings as
select t.name,
       coalesce(t.queue, t.code_queue, 'default') as queue,
       coalesce(t.priority, t.code_priority, 0) as priority,
       coalesce(t.max_attempts, t.code_max_attempts, s.max_attempts) as max_attempts,
       coalesce(t.backoff_base_ms, t.code_backoff_base_ms, s.backoff_base_ms) as backoff_base_ms,
       coalesce(t.backoff_max_delay_ms, t.code_backoff_max_delay_ms, s.backoff_max_delay_ms) as backoff_max_delay_ms,
       coalesce(t.backoff_max_jitter_ms, t.code_backoff_max_jitter_ms, s.backoff_max_jitter_ms)
           as backoff_max_jitter_ms,
       coalesce(t.lease_ms, case when t.code_lease_ms is not null
                                 then least(86400000, greatest(1000, t.code_lease_ms)) end, s.lease_ms) as lease_ms,
       t.payload_schema,
       coalesce(t.timeout_ms, t.code_timeout_ms) as timeout_ms,
       coalesce(t.expire_after_ms, t.code_expire_after_ms) as expire_after_ms,
       coalesce(t.retain_succeeded, t.code_retain_succeeded, s.prune_succeeded_after) as retain_succeeded,
       coalesce(t.retain_failed, t.code_retain_failed, s.prune_finished_after) as retain_failed,
       coalesce(t.max_snoozes, t.code_max_snoozes, s.max_snoozes) as max_snoozes
  from task_types t cross join queue_settings s;

-- enqueue_job takes the job's expiry (p_expires_at, p_expire_after_ms): a new signature.
drop function if exists enqueue_job(text, jsonb, text, text, integer, timestamptz, integer, interval, integer);
