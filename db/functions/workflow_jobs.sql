-- workflow_jobs: the graph of a workflow: every job whose workflow_id is p_workflow_id, or whose id is it (the
-- root a workflow is named after when its jobs were given none), each with the parents it waits for
-- (job_dependencies), whether it runs whatever their end (run_anyway: for every parent; run_anyway_for: the
-- parents it waits for only to end, in id order), parents before their dependents
-- (by the longest chain of parents within the workflow), then in enqueue order. Raises QV400 (null
-- id), QN404 (no job of that workflow).
create or replace function workflow_jobs(
    p_workflow_id  uuid
) returns setof workflow_job
language plpgsql
stable
security definer
set search_path from current
as $$
begin
    if p_workflow_id is null then
        raise exception using errcode = 'QV400', message = 'workflow id must not be null', column = 'workflow_id';
    end if;
    return query
    with recursive members as (
        select j.id from jobs j where j.workflow_id = p_workflow_id or j.id = p_workflow_id
    ), depth(id, n) as (
        -- How far each job is from the workflow's roots (the longest chain of parents within it).
        select m.id, 0 from members m
         where not exists (select 1 from job_dependencies d join members p on p.id = d.parent_id where d.job_id = m.id)
        union  -- (job, distance) pairs, not paths: a graph of many paths stays small
        select d.job_id, depth.n + 1
          from depth join job_dependencies d on d.parent_id = depth.id join members m on m.id = d.job_id
         where depth.n < 1000
    )
    select j, coalesce(array(select d.parent_id from job_dependencies d where d.job_id = j.id order by d.parent_id),
                       '{}'),
           coalesce((select bool_and(d.run_anyway) from job_dependencies d where d.job_id = j.id), false),
           coalesce(array(select d.parent_id from job_dependencies d where d.job_id = j.id and d.run_anyway
                           order by d.parent_id), '{}')
      from jobs j join (select depth.id, max(depth.n) as n from depth group by depth.id) o on o.id = j.id
     order by o.n, j.created_at, j.id;
    if not found then
        raise exception using errcode = 'QN404', message = format('workflow %s has no job', p_workflow_id);
    end if;
end;
$$;
