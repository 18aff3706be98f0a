-- claim_job: takes the next ready job for one worker (pending/failed → processing), or returns no row.
-- The one-job form of claim_jobs, with the same rules: for update skip locked, highest priority then
-- oldest run_at, optional queue filter, lease and job_attempts row written in the same statement.
--   select * from claim_job('w1');
--   select * from claim_job('w1', array['emails']);
-- Raises QV400 for a missing worker id or an out-of-range lease or queue list.
-- Security definer: runs as the queue's owner, so a caller needs EXECUTE on it and no privilege on
-- the tables; search_path is pinned (public, pg_temp) so the caller's objects cannot stand in for
-- the queue's. EXECUTE: pgqw_worker and pgqw_admin (db/security/grants.sql).
create or replace function claim_job(
    p_worker_id  text,
    p_queues     text[] default null,
    p_lease_ms   integer default null,
    p_now        timestamptz default now()
) returns setof jobs
language plpgsql
security definer
set search_path = public, pg_temp
as $$
begin
    -- plpgsql, not sql: its call of claim_jobs is planned once per session, not once per call.
    return query select * from claim_jobs(p_worker_id, 1, p_queues, p_lease_ms, p_now);
end;
$$;
