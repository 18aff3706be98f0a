-- mark_jobs_succeeded: mark_succeeded for many (p_job_ids[i], p_lease_tokens[i]) pairs (processing → succeeded),
-- each with its JSON result p_results[i] (a JSON array; null or a missing element: no result; a pair listed twice:
-- its first result); notifies pgqw_finished if one is watched.
-- Returns each job whose attempt succeeded, with already_recorded (true: an earlier call did it); a pair whose
-- token does not hold its job, or whose job was asked to cancel, is left alone and missing. Raises QV400.
create or replace function mark_jobs_succeeded(
    p_job_ids       uuid[],
    p_lease_tokens  uuid[],
    p_results       jsonb default null
) returns setof recorded_job
language plpgsql
security definer
set search_path from current
-- Planned once per session, not per call (planning its statement cost more than running it for a few jobs),
-- and its joins are nested loops that reach each row by key, whatever the statistics say: with
-- job_attempts analyzed while small (a fresh database, a burst before autoanalyze) the plan was a
-- sequential scan, or a merge join over the whole index, of every attempt per call. No JIT for the cost
-- of the disabled paths (as in claim_jobs_at).
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set jit = off
as $$
#variable_conflict use_column
begin
    if p_job_ids is null or p_lease_tokens is null then
        raise exception using errcode = 'QV400', message = 'job ids and lease tokens must not be null',
            column = case when p_job_ids is null then 'job_ids' else 'lease_tokens' end;
    end if;
    if cardinality(p_job_ids) <> cardinality(p_lease_tokens) then
        raise exception using errcode = 'QV400',
            message = format('got %s job ids but %s lease tokens', cardinality(p_job_ids), cardinality(p_lease_tokens)),
            column = 'lease_tokens';
    end if;
    if p_results is not null and (jsonb_typeof(p_results) <> 'array'
                                  or jsonb_array_length(p_results) > cardinality(p_job_ids)) then
        raise exception using errcode = 'QV400',
            message = 'results must be a JSON array with at most one element per job id',
            column = 'results';
    end if;
    -- Hold the jobs first (in id order), as cancel_job does: the statement below then sees every cancel
    -- request committed before, and none can come in until this transaction ends.
    perform 1 from jobs k where k.id = any(p_job_ids) order by k.id for update;
    -- After the lock: a watch_job committed before it is seen here, one after it waits for this commit.
    if exists (select 1 from job_waiters w where w.job_id = any(p_job_ids)) then
        perform pg_notify('pgqw_finished', '*');
    end if;

    return query
    with pairs as (
        -- Each (job, token) pair given, with its token's hash and its result.
        select t.job_id, t.n, sha256(uuid_send(t.token)) as token_hash, p_results -> (t.n::integer - 1) as result
          from unnest(p_job_ids, p_lease_tokens) with ordinality as t(job_id, token, n)
    ), given as (
        -- The attempt each pair names: one primary-key range per job, matched by the hash. One row per
        -- attempt, not per job: a job listed with a swept attempt's token before its current one still
        -- succeeds. A pair listed twice counts once.
        select distinct on (p.job_id, a.attempt) p.job_id, p.token_hash, a.attempt, a.outcome
          from pairs p
          join job_attempts a on a.job_id = p.job_id and a.lease_token_hash = p.token_hash
         order by p.job_id, a.attempt, p.n
    ), results as (
        -- A pair listed twice: its first result given (JSON null or a missing element is none).
        select distinct on (p.job_id, p.token_hash) p.job_id, p.token_hash, p.result
          from pairs p
         where coalesce(jsonb_typeof(p.result), 'null') <> 'null'
         order by p.job_id, p.token_hash, p.n
    ), done as (
        -- locked_by is not null is status = 'processing' (constraint jobs_locked_only_when_processing);
        -- naming the status would let the planner scan every processing job instead of the primary key.
        update jobs j
           set status = 'succeeded', finished_at = greatest(now(), j.started_at),
               locked_by = null, lease_expires_at = null
          from given g
         where j.id = g.job_id and j.attempts = g.attempt and g.outcome is null and j.locked_by is not null
           and not exists (select 1 from job_cancel_requests r where r.job_id = g.job_id)
        -- The row whole (a new column of jobs is in the answer), and what the statements below need.
        returning j as job, j.id, j.attempts
    ), recorded as (
        update job_attempts a
           set outcome = 'succeeded', finished_at = greatest(now(), a.started_at)
          from done
         where a.job_id = done.id and a.attempt = done.attempts
    ), stored as (
        insert into job_results (job_id, content_type, value)
        select done.id, 'application/json', r.result
          from done
          join given g on g.job_id = done.id and g.attempt = done.attempts
          join results r on r.job_id = g.job_id and r.token_hash = g.token_hash
    )
    select done.job, false
      from done
    union all
    -- Succeeded by an earlier try of this call (its reply was lost). The statement's snapshot is taken
    -- before `recorded` runs, so the attempts recorded just now still show no outcome here.
    select j, true from given g join jobs j on j.id = g.job_id where g.outcome = 'succeeded';
    -- Their dependents and batches (a job recorded before, or left alone, changes nothing there).
    perform settle_jobs(p_job_ids);
end;
$$;
