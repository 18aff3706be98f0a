-- 0020_snooze: a handler can put its job off without spending an attempt (snooze_job).
--   * An attempt may end `snoozed`. The rule of job_attempts.outcome (the attempt_outcome domain's
--     job_attempts_outcome_check, 0014) is restated whole, with every outcome: 0014's four, `timed_out`
--     (0019) and `snoozed`.
--   * How many times one job may be snoozed: queue_settings.max_snoozes (default 100), or a task type's
--     own, task_types.max_snoozes (a DBA's column: null takes the default). snooze_job reads the two;
--     the snooze after the last one allowed ends the job dead, its attempt failed.
alter domain attempt_outcome drop constraint job_attempts_outcome_check;
alter domain attempt_outcome add constraint job_attempts_outcome_check
    check (value in ('succeeded', 'failed', 'abandoned', 'cancelled', 'timed_out', 'snoozed')) not valid;
alter domain attempt_outcome validate constraint job_attempts_outcome_check;

-- A job has at most 1000 attempts (enqueue_job, retry_dead): more snoozes than that cannot happen.
alter table queue_settings
    add column max_snoozes integer not null default 100,
    add constraint queue_settings_max_snoozes_range check (max_snoozes between 0 and 1000);

alter table task_types
    add column max_snoozes integer,
    add constraint task_types_max_snoozes_range check (max_snoozes between 0 and 1000);
