-- heartbeat: no status change; extends to now() + p_lease_ms (else the job's task type's lease, else queue_settings',
-- as claim_jobs grants it) the lease of each listed job this worker still holds. Returns (job_id, lease_expires_at)
-- per extended job: a listed job missing from the answer is no longer the worker's.
-- Raises QV400 (blank worker id, null job list, lease below 1 ms).
create or replace function heartbeat(
    p_worker_id  text,
    p_job_ids    uuid[],
    p_lease_ms   integer default null
) returns table (job_id uuid, lease_expires_at timestamptz)
language plpgsql
security definer
set search_path = public, pg_temp
as $$
begin
    if p_worker_id is null or p_worker_id !~ '\S' then
        raise exception using errcode = 'QV400', message = 'worker id must not be empty';
    end if;
    if p_job_ids is null then
        raise exception using errcode = 'QV400', message = 'job ids must not be null (an empty array is fine)';
    end if;
    if p_lease_ms is not null and p_lease_ms < 1 then
        raise exception using errcode = 'QV400', message = format('lease must be at least 1 ms, got %s', p_lease_ms);
    end if;

    return query
    update jobs j
       set lease_expires_at = now() + make_interval(
               secs => coalesce(p_lease_ms, (select t.lease_ms from task_type_settings t where t.name = j.type),
                                (select s.lease_ms from queue_settings s)) / 1000.0)
     where j.id = any (p_job_ids) and j.status = 'processing' and j.locked_by = p_worker_id
    returning j.id, j.lease_expires_at;
end;
$$;
