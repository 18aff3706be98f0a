-- enqueue_jobs: enqueue_job for a JSON array of jobs in one insert: see enqueue_jobs_into, which it calls with no
-- batch. Returns one row per element, in order. Raises what enqueue_jobs_into raises.
create or replace function enqueue_jobs(
    p_jobs  jsonb
) returns setof enqueued_job
language sql
security definer
set search_path from current
as $$
    select * from enqueue_jobs_into(p_jobs, null);
$$;
