-- report_double_runs: for workers whose id starts with p_prefix, the two numbers that must be 0 (overlapping_jobs,
-- succeeded_twice) beside the jobs, attempts, succeeded jobs and results (job_results) looked at. No state change.
-- Returns one row. Raises nothing of its own.
create or replace function report_double_runs(
    p_prefix  text default ''
) returns table (
    jobs_seen integer, attempts_seen integer, overlapping_jobs integer, succeeded_twice integer,
    succeeded_jobs integer, results integer
)
language sql stable
set search_path from current
as $$
    with mine as (
        select a.* from job_attempts a
         where a.worker_id like replace(replace(replace(coalesce(p_prefix, ''), '\', '\\'), '%', '\%'), '_', '\_') || '%'
    ), job_ids as (
        select distinct m.job_id from mine m
    )
    select
        (select count(*)::integer from job_ids),
        (select count(*)::integer from mine),
        (select count(distinct a1.job_id)::integer
           from mine a1
           join job_attempts a2 on a2.job_id = a1.job_id and a2.attempt > a1.attempt
          where a2.started_at < coalesce(a1.finished_at, now())
            and a1.started_at < coalesce(a2.finished_at, now())),
        (select count(*)::integer from (
            select a.job_id from job_attempts a join job_ids using (job_id)
             where a.outcome = 'succeeded' group by a.job_id having count(*) > 1) twice),
        (select count(*)::integer from jobs j join job_ids i on i.job_id = j.id where j.status = 'succeeded'),
        (select count(*)::integer from job_results r join job_ids i on i.job_id = r.job_id);
$$;
