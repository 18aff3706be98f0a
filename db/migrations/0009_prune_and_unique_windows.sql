-- 0009_prune_and_unique_windows: what prune_jobs reads (finished jobs by status and age), and
-- enqueue_job's new optional p_unique_for (a signature change: the old function is dropped here and
-- made again by the functions that every migrate re-applies).
-- Built inside the migration's transaction: writes to jobs wait while it builds.
create index jobs_finished_idx on jobs (status, finished_at) where finished_at is not null;

drop function if exists enqueue_job(text, jsonb, text, text, integer, timestamptz, integer);
