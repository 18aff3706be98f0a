-- 0007_cancel: a job can be cancelled. A waiting job (pending, failed) ends cancelled at once; a
-- running one is asked to stop: the request is a row of job_cancel_requests, which heartbeat answers
-- (cancel_requested) so the worker's handler learns it, and the attempt then ends cancelled.
-- The request lives in its own table, not in a column of jobs: the functions that return jobs' row
-- type (claims, enqueues, mark_*, retry_dead) and the readers of `select * from jobs` keep their shape.

alter table jobs drop constraint jobs_status_check;
alter table jobs add constraint jobs_status_check
    check (status in ('pending', 'processing', 'succeeded', 'failed', 'dead', 'cancelled'));
alter table jobs drop constraint jobs_finished_iff_final;
alter table jobs add constraint jobs_finished_iff_final
    check ((status in ('succeeded', 'dead', 'cancelled')) = (finished_at is not null));

alter table job_attempts drop constraint job_attempts_outcome_check;
alter table job_attempts add constraint job_attempts_outcome_check
    check (outcome in ('succeeded', 'failed', 'abandoned', 'cancelled'));

-- One row per job someone asked to cancel (cancel_job), written once, kept with the job's history.
create table job_cancel_requests (
    job_id        uuid not null,
    requested_at  timestamptz not null default now(),
    constraint job_cancel_requests_pkey primary key (job_id),
    constraint job_cancel_requests_job_id_fkey foreign key (job_id) references jobs (id) on delete cascade
);

-- heartbeat answers cancel_requested too: a return type cannot change with create or replace.
drop function if exists heartbeat(uuid[], uuid[], integer);
