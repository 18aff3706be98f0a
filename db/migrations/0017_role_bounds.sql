-- 0017_role_bounds: what a worker login can change for others is held to documented bounds.
--   * Retention ages are the database's (queue_settings), not a caller's: prune_expired_jobs, the one a
--     worker may call, deletes only what they allow. prune_jobs (any age) is the owner's and pgqw_admin's.
--   * A registered lease (code_lease_ms, which any worker login writes through register_task_types) is read
--     as at least 1 s and at most a day; a DBA's lease_ms is taken as set.
alter table queue_settings
    add column prune_succeeded_after interval not null default interval '7 days',
    add column prune_finished_after interval not null default interval '30 days',
    add constraint queue_settings_prune_succeeded_range
        check (prune_succeeded_after between interval '0' and interval '100 years'),
    add constraint queue_settings_prune_finished_range
        check (prune_finished_after between interval '0' and interval '100 years');

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
       t.payload_schema
  from task_types t cross join queue_settings s;
