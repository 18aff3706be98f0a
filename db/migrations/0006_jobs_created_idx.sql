-- 0006_jobs_created_idx: the unfiltered job list (GET /api/jobs without a status, newest first) reads
-- an index range, first page and later pages (keyset on created_at, id) alike, instead of sorting
-- the whole table. Built inside the migration's transaction: writes to jobs wait while it builds.
create index jobs_created_idx on jobs (created_at desc, id desc);
