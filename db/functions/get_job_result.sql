-- get_job_result: a job's status with its result, if any (content_type, value, data; null when it has
-- none), so a caller tells a job not finished from one whose handler returned nothing. No row when there
-- is no such job. No state change. Raises nothing of its own.
create or replace function get_job_result(p_job_id uuid)
returns table (status text, content_type text, value jsonb, data bytea)
language sql stable
set search_path from current
as $$
    select j.status::text, r.content_type::text, r.value, r.data
      from jobs j
      left join job_results r on r.job_id = j.id
     where j.id = p_job_id;
$$;
