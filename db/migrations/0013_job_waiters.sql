-- 0013_job_waiters: who waits for a job to end. A function that ends a job (succeeded, dead, cancelled)
-- notifies pgqw_finished only when a session waits for it: a notification wakes every listening session of
-- the database for a moment, whatever its channel, so one per completion that nobody reads cost the
-- server CPU on every job (docs/benchmarks.md). Written by watch_job, unwatch_job and prune_jobs.
create table job_waiters (
    -- No foreign key: its check would lock the job's row (for key share), and a claim skips locked rows,
    -- so a client starting to wait would hide a ready job from the claims at that moment. prune_jobs
    -- deletes the rows of the jobs it deletes.
    job_id       uuid        not null,
    -- The waiting session (pg_backend_pid()): one row per session and job. A session that ends without
    -- unwatch_job leaves its row; it costs at most a notification nobody reads, and goes when its job
    -- is pruned.
    backend_pid  integer     not null,
    since        timestamptz not null default now(),
    primary key (job_id, backend_pid)
);
