-- mark_jobs_succeeded: mark_succeeded for many (p_job_ids[i], p_attempts[i]) of one worker (processing → succeeded),
-- each with its JSON result p_results[i] (a JSON array; null or a missing element: no result; a pair listed twice:
-- its first result); notifies pgqw_finished.
-- Returns each job this worker's attempt succeeded, with already_recorded (true: an earlier call did it);
-- a pair whose attempt is not this worker's, or ended otherwise, is left alone and missing. Raises QV400.
create or replace function mark_jobs_succeeded(
    p_worker_id  text,
    p_job_ids    uuid[],
    p_attempts   integer[],
    p_results    jsonb default null
) returns table (
    id uuid, type text, payload jsonb, status text, attempts integer, max_attempts integer,
    last_error text, run_at timestamptz, created_at timestamptz, started_at timestamptz,
    finished_at timestamptz, locked_by text, lease_expires_at timestamptz,
    idempotency_key text, queue text, priority integer, already_recorded boolean
)
language plpgsql
security definer
set search_path = public, pg_temp
as $$
#variable_conflict use_column
begin
    if p_worker_id is null or p_job_ids is null or p_attempts is null then
        raise exception using errcode = 'QV400', message = 'worker id, job ids and attempts must not be null';
    end if;
    if cardinality(p_job_ids) <> cardinality(p_attempts) then
        raise exception using errcode = 'QV400',
            message = format('got %s job ids but %s attempts', cardinality(p_job_ids), cardinality(p_attempts));
    end if;
    if p_results is not null and (jsonb_typeof(p_results) <> 'array'
                                  or jsonb_array_length(p_results) > cardinality(p_job_ids)) then
        raise exception using errcode = 'QV400',
            message = 'results must be a JSON array with at most one element per job id';
    end if;
    perform pg_notify('pgqw_finished', '*');

    return query
    with done as (
        -- One primary-key lookup per (id, attempt) pair. locked_by = p_worker_id implies status =
        -- 'processing' (constraint jobs_locked_only_when_processing); naming the status would let the
        -- planner scan every processing job instead.
        update jobs j
           set status = 'succeeded', finished_at = greatest(now(), j.started_at),
               locked_by = null, lease_expires_at = null
         where (j.id, j.attempts) in (select t.job_id, t.attempt from unnest(p_job_ids, p_attempts) as t(job_id, attempt))
           and j.locked_by = p_worker_id
        returning j.*
    ), recorded as (
        update job_attempts a
           set outcome = 'succeeded', finished_at = greatest(now(), a.started_at)
          from done
         where a.job_id = done.id and a.attempt = done.attempts
    ), stored as (
        insert into job_results (job_id, content_type, value)
        select done.id, 'application/json', r.value
          from done
          -- The result given with the pair that succeeded; a pair listed twice: the first one given.
          join (select distinct on (t.job_id, t.attempt) t.job_id, t.attempt, p_results -> (t.n::integer - 1) as value
                  from unnest(p_job_ids, p_attempts) with ordinality as t(job_id, attempt, n)
                 where p_results is not null
                   and coalesce(jsonb_typeof(p_results -> (t.n::integer - 1)), 'null') <> 'null'
                 order by t.job_id, t.attempt, t.n) r on r.job_id = done.id and r.attempt = done.attempts
    )
    select done.*, false from done
    union all
    -- Succeeded by an earlier call of this worker (its reply was lost): one primary-key lookup per pair.
    -- The statement's snapshot is taken before `recorded` runs, so the attempts recorded just now
    -- still show no outcome here and are not listed twice.
    select j.*, true
      from unnest(p_job_ids, p_attempts) as t(job_id, attempt)
      join job_attempts a on a.job_id = t.job_id and a.attempt = t.attempt
      join jobs j on j.id = a.job_id
     where a.worker_id = p_worker_id and a.outcome = 'succeeded';
end;
$$;
