-- 0019_timeouts: a handler cannot hang for ever. An attempt may have a deadline, which the database
-- enforces: heartbeat never extends a lease past it, and the sweep ends an attempt whose lease ran to it
-- `timed_out` (a failure: retried after its backoff while tries are left, else the job is dead).
--   * The timeout of a job: its own (jobs.timeout_ms, given at enqueue), else its task type's as of the
--     claim (task_type_settings.timeout_ms: a DBA's task_types.timeout_ms, else the code's
--     code_timeout_ms, which register_task_types writes), else none. Null everywhere: no deadline.
--   * The claim gives the attempt its deadline, started_at + the timeout: job_attempts.deadline_at,
--     and jobs.deadline_at (the latest attempt's, as jobs.started_at is its start), where heartbeat
--     and the sweep read it with the row they already hold. cancel_job of a processing job moves both
--     to now, so its lease is extended no more and the attempt ends within one lease.
--   * An attempt may end `timed_out`: the rule of job_attempts.outcome (the attempt_outcome domain's
--     job_attempts_outcome_check, 0014) is restated with it.

create domain job_timeout_ms as integer;
alter domain job_timeout_ms add constraint jobs_timeout_ms_range check (value >= 1);

alter table jobs
    add column timeout_ms job_timeout_ms,
    add column deadline_at timestamptz;

alter table job_attempts
    add column deadline_at timestamptz;

alter table task_types
    add column code_timeout_ms integer,
    add column timeout_ms integer,
    add constraint task_types_timeout_range check (timeout_ms >= 1 and code_timeout_ms >= 1);

-- As in 0017, with the timeout (no queue_settings default: a type without one has no deadline).
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
       coalesce(t.timeout_ms, t.code_timeout_ms) as timeout_ms
  from task_types t cross join queue_settings s;

alter domain attempt_outcome drop constraint job_attempts_outcome_check;
alter domain attempt_outcome add constraint job_attempts_outcome_check
    check (value in ('succeeded', 'failed', 'abandoned', 'cancelled', 'timed_out')) not valid;
alter domain attempt_outcome validate constraint job_attempts_outcome_check;

-- enqueue_job takes the job's timeout (p_timeout_ms): a new signature.
drop function if exists enqueue_job(text, jsonb, text, text, integer, timestamptz, integer, interval);
-- report_timeline answers each attempt's deadline too: a new return type.
drop function if exists report_timeline(uuid);
