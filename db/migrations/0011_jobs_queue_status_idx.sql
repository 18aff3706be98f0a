-- 0011_jobs_queue_status_idx: what queue_stats() reads, so /metrics costs what the waiting and running
-- jobs cost, not the history: the queues there are (a skip scan, one probe per queue), each queue's
-- pending, processing and failed jobs (a range each), its oldest ready job (the first entry of a range),
-- and a bounded count of its finished jobs of a status. Every row version has an entry (a job's
-- status change already writes a new entry in jobs_status_created_idx: this is one more per change).
-- The statistics object gives the planner the joint frequencies of (queue, status), which queue_stats
-- reports as the estimate of a status of a queue above 50,000 jobs.
-- Built inside the migration's transaction: writes to jobs wait while it builds.
create index jobs_queue_status_idx on jobs (queue, status, run_at);
create statistics jobs_queue_status_stats (mcv) on queue, status from jobs;
