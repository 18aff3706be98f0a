-- 0016_isolated_jobs: a worker that stops responding while it holds several jobs leaves no sign of which of
-- them stopped it (a handler that crashes the process, exhausts its memory, hangs the interpreter). The
-- sweep then gives each of them its lost attempt back and lists it here; a listed job runs alone
-- (claim_jobs_at: on a worker that holds no other job, and which claims nothing else until it ends), so a
-- crash while it runs is its own, and that attempt counts. The row stays until the job is final (then the
-- sweep removes it) or the job is deleted.
create table job_isolation (
    job_id      uuid not null,
    listed_at   timestamptz not null default now(),
    constraint job_isolation_pkey primary key (job_id),
    constraint job_isolation_job_id_fkey foreign key (job_id) references jobs (id) on delete cascade
);
