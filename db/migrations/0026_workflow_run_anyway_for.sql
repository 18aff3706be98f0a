-- 0026_workflow_run_anyway_for: a job's run_anyway is each dependency's own (enqueue_jobs takes a flag per
-- parent), so workflow_jobs answers the parents a job waits for only to end, beside run_anyway (now: every
-- one of them).
alter type workflow_job add attribute run_anyway_for uuid[];
