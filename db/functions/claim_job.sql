-- claim_job: claim_jobs with p_limit 1 (pending/failed → processing): the next ready job for this worker (of its
-- queues and task types when given),
-- with its lease (lease_expires_at - started_at is the lease granted) and job_attempts row, or no row.
-- Raises QV400 (blank or long worker id, empty queue list, lease below 1 ms, bad now).
create or replace function claim_job(
    p_worker_id  text,
    p_queues     text[] default null,
    p_lease_ms   integer default null,
    p_now        timestamptz default now(),
    p_task_types text[] default null
) returns setof jobs
language plpgsql
security definer
set search_path = public, pg_temp
as $$
begin
    -- plpgsql, not sql: its call of claim_jobs is planned once per session, not once per call.
    return query select * from claim_jobs(p_worker_id, 1, p_queues, p_lease_ms, p_now, p_task_types);
end;
$$;
