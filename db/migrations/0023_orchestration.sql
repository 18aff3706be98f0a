-- 0023_orchestration: work that depends on other work, batches with a callback, one job at a time per key,
-- and limits per key.
--   * Dependencies. job_dependencies: a job (job_id) waits for each of its parents (parent_id), for its
--     success, or for any final end when run_anyway. Such a job is `blocked` (a new status, in flight, never
--     claimed) until every parent has released it; then it becomes pending in the transaction of the last
--     parent's end (settle_jobs, under the child's row lock). jobs.workflow_id names the graph a job belongs to.
--   * Batches. batches: a set of jobs enqueued together (jobs.batch_id) and the job to enqueue once every one
--     of them has reached a final state (callback), enqueued once (callback_job_id, under the batch's row lock;
--     callback_error when it could not be).
--   * Serial keys. jobs.serial_key: at most one job of a key processing (jobs_serial_running_key, a unique
--     partial index), and a job starts only once every job of its key enqueued before it (serial_seq, from
--     job_serial_seq) has finished: a failed job waiting for its retry keeps its place.
--   * Limits per key. jobs.concurrency_key and queues.key_max_running: at most that many jobs of one
--     (queue, key) processing at once, checked by the claim under the queue's row lock (it counts the queue's
--     processing jobs through jobs_queue_status_idx: no index of its own, which every write would keep).
-- The rule of jobs.status (the job_status domain's jobs_status_check) is restated with `blocked`.

create table batches (
    id               uuid primary key default gen_random_uuid(),
    idempotency_key  text unique,
    callback         jsonb,
    callback_job_id  uuid,
    callback_error   text,
    total            integer not null,
    created_at       timestamptz not null default now(),
    finished_at      timestamptz,
    constraint batches_idempotency_key_charset check (length(idempotency_key) between 1 and 255
                                                      and idempotency_key !~ '[^!-~]'),
    constraint batches_total_range check (total between 1 and 10000),
    constraint batches_callback_is_object check (jsonb_typeof(callback) = 'object')
);

create sequence job_serial_seq;

-- The keys' rules are their columns' types (domains, read once per session, as 0014's), not CHECK
-- constraints, which every statement that writes jobs would read back from their text. batch_id has no
-- foreign key for the same reason (every insert would queue its check): only enqueue_batch sets it, to the
-- batch it has just made, and no batch is ever deleted.
create domain job_serial_key as text collate "C";
alter domain job_serial_key add constraint jobs_serial_key_form check (length(value) between 1 and 200);
create domain job_concurrency_key as text collate "C";
alter domain job_concurrency_key add constraint jobs_concurrency_key_form check (length(value) between 1 and 200);

alter table jobs
    add column workflow_id uuid,
    add column batch_id uuid,
    add column serial_key job_serial_key,
    add column serial_seq bigint,
    add column concurrency_key job_concurrency_key;

alter domain job_status drop constraint jobs_status_check;
alter domain job_status add constraint jobs_status_check
    check (value in ('blocked', 'pending', 'processing', 'succeeded', 'failed', 'dead', 'cancelled', 'expired'))
    not valid;
alter domain job_status validate constraint jobs_status_check;

create table job_dependencies (
    job_id      uuid not null references jobs (id) on delete cascade,
    parent_id   uuid not null references jobs (id) on delete cascade,
    run_anyway  boolean not null default false,
    primary key (job_id, parent_id),
    constraint job_dependencies_not_self check (job_id <> parent_id)
);
-- What a parent's end reads: its dependents.
create index job_dependencies_parent_idx on job_dependencies (parent_id);

alter table queues
    add column key_max_running integer,
    add constraint queues_key_max_running_range check (key_max_running >= 1);

-- One job of a serial key processing at once: the guarantee, whatever a claim does.
create unique index jobs_serial_running_key on jobs (serial_key) where status = 'processing' and serial_key is not null;
-- What a claim reads to find whether a job of a serial key is its key's first unfinished one.
create index jobs_serial_idx on jobs (serial_key, serial_seq) where serial_key is not null and finished_at is null;
create index jobs_workflow_idx on jobs (workflow_id) where workflow_id is not null;
-- A batch's jobs: what its end and its status read.
create index jobs_batch_idx on jobs (batch_id, status) where batch_id is not null;

-- What enqueue_batch answers: each job with its batch.
create type enqueued_batch_job as (batch_id uuid, job jobs, created boolean);
-- What workflow_jobs answers: each job with the parents it waits for.
create type workflow_job as (job jobs, depends_on uuid[], run_anyway boolean);

-- enqueue_job takes the dependencies, keys and workflow: a new signature.
drop function if exists enqueue_job(text, jsonb, text, text, integer, timestamptz, integer, interval, integer,
                                    timestamptz, integer);

-- What settle_jobs reads first: is any batch still waiting for its end?
create index batches_open_idx on batches (id) where finished_at is null;
-- list_queues answers key_max_running too: a new return type.
drop function if exists list_queues();
