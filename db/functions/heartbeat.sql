-- heartbeat: extends the lease of the jobs a worker still holds, to now() + p_lease_ms
-- (or queue_settings.lease_ms). No status change. Returns the jobs whose lease was extended:
-- a job the worker asked for that is missing from the result is no longer its own (it was swept).
-- Raises QV400 for a missing worker id, a null job list or a bad lease.
-- Security definer: runs as the queue's owner, so a caller needs EXECUTE on it and no privilege on
-- the tables; search_path is pinned (public, pg_temp) so the caller's objects cannot stand in for
-- the queue's. EXECUTE: pgqw_worker and pgqw_admin (db/security/grants.sql).
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
               secs => coalesce(p_lease_ms, (select s.lease_ms from queue_settings s)) / 1000.0)
     where j.id = any (p_job_ids) and j.status = 'processing' and j.locked_by = p_worker_id
    returning j.id, j.lease_expires_at;
end;
$$;
