-- 0001_core: the queue's tables, constraints and indexes.
-- DDL only. Function bodies live in db/functions and are re-applied by every migrate.

-- One row of settings a DBA may change at any time without a deploy.
-- Every stored function falls back to these when its own argument is null.
create table queue_settings (
    id                      boolean primary key default true,
    max_attempts            integer not null default 5,
    backoff_base_ms         integer not null default 2000,
    backoff_max_jitter_ms   integer not null default 1000,
    backoff_max_delay_ms    integer not null default 3600000,
    lease_ms                integer not null default 60000,
    retry_extra_attempts    integer not null default 5,
    max_payload_bytes       integer not null default 65536,
    constraint queue_settings_single_row check (id),
    constraint queue_settings_max_attempts_range check (max_attempts between 1 and 1000),
    constraint queue_settings_backoff_base_range check (backoff_base_ms >= 0),
    constraint queue_settings_backoff_jitter_range check (backoff_max_jitter_ms >= 0),
    constraint queue_settings_backoff_max_delay_range check (backoff_max_delay_ms >= 0),
    constraint queue_settings_lease_range check (lease_ms >= 1),
    constraint queue_settings_retry_extra_range check (retry_extra_attempts between 1 and 1000),
    constraint queue_settings_max_payload_range check (max_payload_bytes between 2 and 104857600)
);
insert into queue_settings default values;

create table jobs (
    id                uuid primary key default gen_random_uuid(),
    type              text not null,
    payload           jsonb not null default '{}'::jsonb,
    status            text not null default 'pending',
    attempts          integer not null default 0,
    max_attempts      integer not null,
    last_error        text,
    run_at            timestamptz not null default now(),
    created_at        timestamptz not null default now(),
    started_at        timestamptz,
    finished_at       timestamptz,
    locked_by         text,
    lease_expires_at  timestamptz,
    idempotency_key   text not null,
    queue             text not null default 'default',
    priority          integer not null default 0,
    constraint jobs_idempotency_key_key unique (idempotency_key),
    constraint jobs_status_check
        check (status in ('pending', 'processing', 'succeeded', 'failed', 'dead')),
    constraint jobs_attempts_range check (attempts >= 0 and attempts <= max_attempts),
    constraint jobs_max_attempts_positive check (max_attempts >= 1),
    constraint jobs_processing_is_locked
        check (status <> 'processing'
               or (locked_by is not null and started_at is not null and lease_expires_at is not null)),
    constraint jobs_locked_only_when_processing
        check (status = 'processing' or (locked_by is null and lease_expires_at is null)),
    constraint jobs_failure_has_error
        check (status not in ('failed', 'dead') or last_error is not null),
    constraint jobs_finished_iff_final
        check ((status in ('succeeded', 'dead')) = (finished_at is not null)),
    constraint jobs_succeeded_was_attempted check (status <> 'succeeded' or attempts >= 1),
    constraint jobs_type_length check (length(type) between 1 and 100),
    constraint jobs_queue_length check (length(queue) between 1 and 100),
    constraint jobs_idempotency_key_length check (length(idempotency_key) between 1 and 255),
    constraint jobs_locked_by_length check (length(locked_by) between 1 and 200),
    constraint jobs_payload_is_object check (jsonb_typeof(payload) = 'object')
) with (fillfactor = 80);

-- What claim reads: only ready rows are in it, so its size follows the backlog, not the history.
create index jobs_ready_idx on jobs (priority desc, run_at, id)
    where status in ('pending', 'failed');
-- What sweep reads: only rows being worked on.
create index jobs_lease_idx on jobs (lease_expires_at)
    where status = 'processing';
-- Listing by status, newest first (keyset pagination), and counts by status.
create index jobs_status_created_idx on jobs (status, created_at desc, id desc);

-- Hot tables: vacuum after a small fraction of churn rather than the default 20 %.
alter table jobs set (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05
);

create table job_attempts (
    job_id       uuid not null,
    attempt      integer not null,
    worker_id    text not null,
    started_at   timestamptz not null,
    finished_at  timestamptz,
    outcome      text,
    error        text,
    -- Why an abandoned attempt ended: its worker stopped responding, or handed the job back.
    abandon_reason text,
    constraint job_attempts_job_id_attempt_key primary key (job_id, attempt),
    constraint job_attempts_job_id_fkey foreign key (job_id) references jobs (id) on delete cascade,
    constraint job_attempts_attempt_positive check (attempt >= 1),
    constraint job_attempts_outcome_check check (outcome in ('succeeded', 'failed', 'abandoned')),
    constraint job_attempts_finished_iff_outcome check ((outcome is null) = (finished_at is null)),
    constraint job_attempts_failure_has_error
        check (outcome is null or outcome = 'succeeded' or error is not null),
    constraint job_attempts_abandon_reason_check
        check (case when outcome = 'abandoned' then coalesce(abandon_reason in ('lease_expired', 'handed_back'), false)
                    else abandon_reason is null end),
    constraint job_attempts_finish_after_start check (finished_at is null or finished_at >= started_at)
) with (fillfactor = 80);

alter table job_attempts set (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05
);

create table flyers (
    job_id      uuid not null,
    pdf         bytea not null,
    created_at  timestamptz not null default now(),
    constraint flyers_pkey primary key (job_id),
    constraint flyers_job_id_fkey foreign key (job_id) references jobs (id) on delete cascade,
    constraint flyers_pdf_is_pdf check (substring(pdf from 1 for 5) = '%PDF-'::bytea)
);
