-- claim_job: claim_jobs with p_limit 1 (pending/failed → processing): the next ready job for this worker (of its
-- queues and task types when given), with its lease (ending at its deadline at the latest), job_attempts row and
-- lease token, or no row. Raises QV400 (blank or long worker id, empty queue or type list, lease below 1 ms).
create or replace function claim_job(
    p_worker_id  text,
    p_queues     text[] default null,
    p_lease_ms   integer default null,
    p_task_types text[] default null
) returns setof claimed_job
language plpgsql
security definer
set search_path from current
as $$
begin
    -- plpgsql, not sql: its call of claim_jobs_at is planned once per session, not once per call.
    return query select * from claim_jobs_at(now(), p_worker_id, 1, p_queues, p_lease_ms, p_task_types);
end;
$$;
