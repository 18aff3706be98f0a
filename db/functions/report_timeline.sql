-- report_timeline: every attempt of one job in order, with the wait before each since the previous one ended, and
-- its deadline (null: none). No state change. Returns one row per attempt. Raises QV400 (null id), QN404 (no such job).
create or replace function report_timeline(
    p_job_id  uuid
) returns table (
    attempt integer, worker_id text, started_at timestamptz, finished_at timestamptz,
    wait_before_s numeric, duration_s numeric, outcome text, error text, deadline_at timestamptz
)
language plpgsql stable
set search_path from current
as $$
begin
    if p_job_id is null then
        raise exception using errcode = 'QV400', message = 'job id must not be null',
            column = 'job_id';
    end if;
    if not exists (select 1 from jobs j where j.id = p_job_id) then
        raise exception using errcode = 'QN404', message = format('job %s does not exist', p_job_id);
    end if;
    return query
    select a.attempt::integer, a.worker_id, a.started_at, a.finished_at,
           round(extract(epoch from a.started_at - lag(a.finished_at) over w)::numeric, 3),
           round(extract(epoch from a.finished_at - a.started_at)::numeric, 3),
           coalesce(a.outcome::text, 'running'), a.error, a.deadline_at
      from job_attempts a
     where a.job_id = p_job_id
    window w as (order by a.attempt)
     order by a.attempt;
end;
$$;
