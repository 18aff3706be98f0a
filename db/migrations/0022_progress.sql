-- 0022_progress: a running job may say how far it got. jobs.progress is the latest JSON value its handler
-- reported (ctx.progress), written by heartbeat (p_progress, one per job id) under the attempt's lease
-- token, so only the attempt that holds the job writes it; null until one is reported. A claim does not
-- clear it: the next attempt's first report replaces it. At most 8192 bytes in its text form (heartbeat
-- refuses more with QV400); the column's domain holds a row written by hand to the same rule, checked
-- only when the column is given a value (as 0014's domains).

create domain job_progress as jsonb;
alter domain job_progress add constraint jobs_progress_size check (octet_length(value::text) <= 8192);

alter table jobs
    add column progress job_progress;

-- heartbeat takes the progress of each job (p_progress): a new signature.
drop function if exists heartbeat(uuid[], uuid[], integer);
