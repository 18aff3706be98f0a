-- 0027_fewer_job_indexes: two indexes of jobs that every write kept give way to ranges of others.
--   * jobs_created_idx (created_at desc, id desc): the job list without a status (newest first) merges one
--     range per status of jobs_status_created_idx: one entry fewer for each row version (an enqueue, a
--     claim, an end).
--   * jobs_finished_idx (status, finished_at): the prunes and the throughput chart read
--     jobs_type_finished_idx (type, status, finished_at) type by type: one entry fewer for each job's end.
drop index if exists jobs_created_idx;
drop index if exists jobs_finished_idx;
