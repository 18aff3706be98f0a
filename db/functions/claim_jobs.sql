-- claim_jobs: pending/failed → processing for up to p_limit ready jobs (run_at <= now(), a try left, in p_queues and
-- of p_task_types when given; highest priority, then oldest run_at; for update skip locked), each with attempts + 1,
-- a lease (p_lease_ms, else its task type's, else queue_settings'; never past the attempt's deadline, which a job's
-- timeout or its task type's sets), a job_attempts row and a lease token. Returns the claimed rows with their lease
-- tokens, which the claimer alone holds. Raises QV400 (bad worker id, limit, lease, queues, types).
create or replace function claim_jobs(
    p_worker_id  text,
    p_limit      integer,
    p_queues     text[] default null,
    p_lease_ms   integer default null,
    p_task_types text[] default null
) returns setof claimed_job
language plpgsql
security definer
set search_path from current
as $$
begin
    -- The server's clock: only the owner may claim as of another time (claim_jobs_at).
    return query select * from claim_jobs_at(now(), p_worker_id, p_limit, p_queues, p_lease_ms, p_task_types);
end;
$$;
