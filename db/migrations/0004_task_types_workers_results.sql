-- 0004_task_types_workers_results: task types (registered by workers from code, tuned by a DBA),
-- the live workers, and one result per succeeded job (the flyers of the demo move into it).

-- A task type. Workers register it at start from its definition in code (register_task_types): its
-- payload JSON Schema and the code_* defaults are rewritten by every registration, so a new release's
-- defaults take effect when its first worker starts. The plain columns are a DBA's: null unless a DBA
-- sets them with an update, never written by a registration, and when set they win over the code's
-- value. Effective value of a setting: the job's own, else the DBA's column, else code_*, else
-- queue_settings (the view task_type_settings shows it).
create table task_types (
    name                       text not null,
    payload_schema             jsonb not null default '{}'::jsonb,
    description                text,
    code_queue                 text,
    code_priority              integer,
    code_max_attempts          integer,
    code_backoff_base_ms       integer,
    code_backoff_max_delay_ms  integer,
    code_backoff_max_jitter_ms integer,
    code_lease_ms              integer,
    queue                      text,
    priority                   integer,
    max_attempts               integer,
    backoff_base_ms            integer,
    backoff_max_delay_ms       integer,
    backoff_max_jitter_ms      integer,
    lease_ms                   integer,
    registered_at              timestamptz not null default now(),
    constraint task_types_pkey primary key (name),
    constraint task_types_name_length check (length(name) between 1 and 100 and name ~ '\S'),
    constraint task_types_schema_is_object check (jsonb_typeof(payload_schema) = 'object'),
    -- A blank queue would make every enqueue of the type without a queue of its own fail (QV400).
    constraint task_types_queue_length
        check (length(queue) between 1 and 100 and queue ~ '\S'
               and length(code_queue) between 1 and 100 and code_queue ~ '\S'),
    constraint task_types_max_attempts_range
        check (max_attempts between 1 and 1000 and code_max_attempts between 1 and 1000),
    constraint task_types_backoff_range
        check (backoff_base_ms >= 0 and backoff_max_delay_ms >= 0 and backoff_max_jitter_ms >= 0
               and code_backoff_base_ms >= 0 and code_backoff_max_delay_ms >= 0
               and code_backoff_max_jitter_ms >= 0),
    constraint task_types_lease_range check (lease_ms >= 1 and code_lease_ms >= 1)
);

-- What every function uses for a type: the DBA's value, else the code's, else queue_settings.
create view task_type_settings as
select t.name,
       coalesce(t.queue, t.code_queue, 'default') as queue,
       coalesce(t.priority, t.code_priority, 0) as priority,
       coalesce(t.max_attempts, t.code_max_attempts, s.max_attempts) as max_attempts,
       coalesce(t.backoff_base_ms, t.code_backoff_base_ms, s.backoff_base_ms) as backoff_base_ms,
       coalesce(t.backoff_max_delay_ms, t.code_backoff_max_delay_ms, s.backoff_max_delay_ms) as backoff_max_delay_ms,
       coalesce(t.backoff_max_jitter_ms, t.code_backoff_max_jitter_ms, s.backoff_max_jitter_ms)
           as backoff_max_jitter_ms,
       coalesce(t.lease_ms, t.code_lease_ms, s.lease_ms) as lease_ms,
       t.payload_schema
  from task_types t cross join queue_settings s;

-- A worker process: registered at start, seen again at every heartbeat, marked stopped at a clean
-- exit. Alive while expires_at is in the future (its heartbeat moves it on).
create table workers (
    id            text not null,
    hostname      text,
    pid           integer,
    queues        text[],
    task_types    text[] not null default '{}',
    concurrency   integer,
    started_at    timestamptz not null default now(),
    last_seen_at  timestamptz not null default now(),
    expires_at    timestamptz not null,
    stopped_at    timestamptz,
    constraint workers_pkey primary key (id),
    constraint workers_id_length check (length(id) between 1 and 200),
    constraint workers_expires_after_seen check (expires_at >= last_seen_at)
);

-- The output of a succeeded job: a JSON value, or a file (bytes and a content type). One per job,
-- written only by mark_succeeded / mark_jobs_succeeded in the transaction that records the success.
create table job_results (
    job_id        uuid not null,
    content_type  text not null,
    value         jsonb,
    data          bytea,
    created_at    timestamptz not null default now(),
    constraint job_results_pkey primary key (job_id),
    constraint job_results_job_id_fkey foreign key (job_id) references jobs (id) on delete cascade,
    constraint job_results_one_kind check ((value is null) <> (data is null)),
    constraint job_results_json_is_json check (value is null or content_type = 'application/json'),
    constraint job_results_content_type_form check (content_type ~ '^[!-~]+/[!-~]+$' and length(content_type) <= 200)
);

-- Only the flyers of succeeded jobs become results: save_flyer stored a flyer before its success, so a
-- worker that stopped in between left one for a job that is pending, processing, failed or dead. As a
-- result it would break "a result exists exactly when its job succeeded", and the job's next success
-- would be refused by job_results_pkey; dropped, the job makes its flyer again when it next runs.
insert into job_results (job_id, content_type, data, created_at)
select f.job_id, 'application/pdf', f.pdf, f.created_at
  from flyers f
  join jobs j on j.id = f.job_id
 where j.status = 'succeeded';
drop table flyers;

-- The demo's flyers, as they were: the PDF result of each succeeded listing_flyer job.
create view flyers as
select r.job_id, r.data as pdf, r.created_at
  from job_results r
  join jobs j on j.id = r.job_id
 where j.type = 'listing_flyer' and r.content_type = 'application/pdf';

drop function if exists save_flyer(uuid, bytea);

-- A claim takes the worker's task types, and a success stores its result: new arguments (the
-- function files make the new versions in the same migrate).
drop function if exists claim_job(text, text[], integer, timestamptz);
drop function if exists claim_jobs(text, integer, text[], integer, timestamptz);
drop function if exists mark_succeeded(uuid, text, integer);
drop function if exists mark_jobs_succeeded(text, uuid[], integer[]);
