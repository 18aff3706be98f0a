-- parent_results: the parents of job p_job_id (job_dependencies) with their status and result (job_results:
-- a JSON value in result, bytes in data; none: nulls), in parent id order. A job without parents has none.
-- Raises QV400 (null id), QN404 (no such job).
create or replace function parent_results(
    p_job_id  uuid
) returns table (parent_id uuid, type text, status text, content_type text, result jsonb, data bytea)
language plpgsql
stable
security definer
set search_path from current
as $$
begin
    if p_job_id is null then
        raise exception using errcode = 'QV400', message = 'job id must not be null', column = 'job_id';
    end if;
    if not exists (select 1 from jobs j where j.id = p_job_id) then
        raise exception using errcode = 'QN404', message = format('job %s does not exist', p_job_id);
    end if;
    return query
    select p.id, p.type::text, p.status::text, r.content_type::text, r.value, r.data
      from job_dependencies d
      join jobs p on p.id = d.parent_id
      left join job_results r on r.job_id = p.id
     where d.job_id = p_job_id
     order by p.id;
end;
$$;
