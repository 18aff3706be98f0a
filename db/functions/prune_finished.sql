-- prune_finished: deletes up to p_limit jobs of type p_type and final status p_status that finished before
-- p_before, oldest first, with their attempts and results (cascade) and who waited for them (job_waiters).
-- What prune_jobs and prune_expired_jobs do for each type and status: one range of jobs_type_finished_idx
-- (type, status, finished_at). Rows another session holds are skipped, never waited for; a job whose
-- dependents still wait for it is kept. Returns how many it deleted. Raises nothing of its own.
-- Internal: security invoker; no role may execute it.
create or replace function prune_finished(
    p_type    text,
    p_status  text,
    p_before  timestamptz,
    p_limit   integer
) returns integer
language plpgsql
set search_path from current
-- The range of the index, whatever the statistics say (a plan made while the table was small must not read
-- it whole), and no JIT for the cost of the disabled path.
set enable_seqscan = off
set jit = off
as $$
declare
    v_n integer;
begin
    -- Only finished rows are picked, and a claim only locks ready ones, so a claim never waits for a
    -- prune; skip locked also passes over rows a retry or another prune holds. Rows re-checked after the
    -- lock (read committed re-evaluates the where clause on a row changed meanwhile).
    with doomed as (
        select j.id from jobs j
         where j.type = p_type and j.status = p_status
           and j.finished_at is not null and j.finished_at < p_before
           -- A job whose dependents still wait (a dead parent keeps them blocked) is kept for a person.
           and not exists (select 1 from job_dependencies d join jobs c on c.id = d.job_id
                            where d.parent_id = j.id and c.finished_at is null)
         order by j.finished_at
         limit p_limit
           for update skip locked
    ), gone as (
        delete from jobs j using doomed d where j.id = d.id returning j.id
    ), unwatched as (
        -- Sessions that waited for these jobs (job_waiters has no foreign key to cascade).
        delete from job_waiters w using gone g where w.job_id = g.id
    )
    select count(*) into v_n from gone;
    return v_n;
end;
$$;
