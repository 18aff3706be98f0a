-- judge_blocked: decides the blocked jobs among p_children from their parents (job_dependencies). Each is
-- locked first (in id order), then its parents are read in a statement of their own, so a parent ending at
-- the same moment in another transaction is seen: one of the two waits for the other's commit. A child with
-- a parent cancelled or expired (a dependency that needs the parent's success) → cancelled, last_error
-- 'parent <id> was cancelled' (or expired), notifying pgqw_finished if watched; a child every parent has
-- released (succeeded, or ended at all for a run_anyway dependency) → pending from greatest(run_at, now())
-- (notify_due wakes a worker that waits for its queue). A dead parent releases nothing. Returns the ids cancelled (whose own dependents
-- the caller settles: settle_jobs). Raises nothing of its own. Internal: security invoker; no role may execute it.
create or replace function judge_blocked(
    p_children  uuid[]
) returns uuid[]
language plpgsql
set search_path from current
as $$
declare
    v_children uuid[];
    v_cancelled uuid[];
    v_released record;
begin
    v_children := array(select c.id from jobs c where c.id = any (p_children) and c.status = 'blocked'
                         order by c.id for update);
    if cardinality(v_children) = 0 then
        return '{}'::uuid[];
    end if;
    -- A parent that will never succeed, for a dependency that needs its success.
    with gone as (
        select distinct on (d.job_id) d.job_id, d.parent_id, p.status
          from job_dependencies d join jobs p on p.id = d.parent_id
         where d.job_id = any (v_children) and not d.run_anyway and p.status in ('cancelled', 'expired')
         order by d.job_id, d.parent_id
    ), ended as (
        update jobs j
           set status = 'cancelled', finished_at = now(),
               last_error = format('parent %s was %s', g.parent_id, g.status)
          from gone g
         where j.id = g.job_id and j.status = 'blocked'
        returning j.id
    )
    select coalesce(array_agg(e.id), '{}') into v_cancelled from ended e;
    for v_released in
        with ready as (
            update jobs j
               set status = 'pending', run_at = greatest(j.run_at, now())
             where j.id = any (v_children) and j.status = 'blocked' and not j.id = any (v_cancelled)
               and not exists (select 1 from job_dependencies d join jobs p on p.id = d.parent_id
                                where d.job_id = j.id
                                  and not (p.status = 'succeeded' or (d.run_anyway and p.finished_at is not null)))
            returning j.queue, j.run_at
        )
        select r.queue, min(r.run_at) as run_at from ready r group by r.queue
    loop
        perform notify_due(v_released.queue, v_released.run_at);
    end loop;
    for i in 1 .. cardinality(v_cancelled) loop
        perform notify_watchers(v_cancelled[i]);  -- watch_job
    end loop;
    return v_cancelled;
end;
$$;
