-- report_latest_jobs: the p_limit newest jobs with what a person checks first (status, attempts, last_error).
-- No state change. Returns one row per job, newest first. Raises QV400 (p_limit not between 1 and 1000).
create or replace function report_latest_jobs(
    p_limit  integer default 20
) returns table (
    id uuid, type text, queue text, status text, attempts integer, max_attempts integer,
    locked_by text, created_at timestamptz, run_at timestamptz, finished_at timestamptz, last_error text
)
language plpgsql stable
set search_path from current
as $$
begin
    if p_limit is null or p_limit < 1 or p_limit > 1000 then
        raise exception using errcode = 'QV400',
            message = format('limit must be between 1 and 1000, got %s', coalesce(p_limit::text, 'null')),
            column = 'limit';
    end if;
    -- The newest of each status present (a skip scan of jobs_status_created_idx: each step is the next
    -- status in the index), then the newest of those: a range of that index per status, no other index.
    return query
    with recursive present(status) as (
        (select j.status::text from jobs j order by j.status limit 1)
        union all
        select (select j.status::text from jobs j where j.status > p.status order by j.status limit 1)
          from present p where p.status is not null
    )
    select j.id, j.type::text, j.queue::text, j.status::text, j.attempts, j.max_attempts::integer,
           j.locked_by::text, j.created_at, j.run_at, j.finished_at, j.last_error
      from present p
     cross join lateral (select * from jobs j where j.status = p.status
                          order by j.created_at desc, j.id desc limit p_limit) j
     where p.status is not null
     order by j.created_at desc, j.id desc
     limit p_limit;
end;
$$;
