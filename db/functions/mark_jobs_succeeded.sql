-- mark_jobs_succeeded: mark_succeeded for many (p_job_ids[i], p_attempts[i]) of one worker (processing → succeeded).
-- Returns each job this worker's attempt succeeded, with already_recorded (true: an earlier call did it);
-- a pair whose attempt is not this worker's, or ended otherwise, is left alone and missing. Raises QV400.
create or replace function mark_jobs_succeeded(
    p_worker_id  text,
    p_job_ids    uuid[],
    p_attempts   integer[]
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
