-- heartbeat: no status change; extends to now() + p_lease_ms (else the job's task type's lease, else queue_settings',
-- as a claim grants it), but never past the attempt's deadline (jobs.deadline_at; once it has passed, not at all),
-- the lease of each listed job whose lease token is given and still holds it, and writes its jobs.progress from
-- p_progress (one per job id; null: unchanged). Returns (job_id, lease_expires_at, cancel_requested) per held job:
-- a listed job missing from the answer is no longer its claimer's. Raises QV400 (null lists, lists of different
-- lengths, lease below 1 ms, a progress over 8192 bytes as text).
create or replace function heartbeat(
    p_job_ids       uuid[],
    p_lease_tokens  uuid[],
    p_lease_ms      integer default null,
    p_progress      jsonb[] default null
) returns table (job_id uuid, lease_expires_at timestamptz, cancel_requested boolean)
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
        raise exception using errcode = 'QV400', message = 'job ids and lease tokens must not be null (empty arrays are fine)',
            column = case when p_job_ids is null then 'job_ids' else 'lease_tokens' end;
    end if;
    if cardinality(p_job_ids) <> cardinality(p_lease_tokens) then
        raise exception using errcode = 'QV400',
            message = format('got %s job ids but %s lease tokens', cardinality(p_job_ids), cardinality(p_lease_tokens)),
            column = 'lease_tokens';
    end if;
    if p_progress is not null and cardinality(p_progress) <> cardinality(p_job_ids) then
        raise exception using errcode = 'QV400',
            message = format('got %s job ids but %s progress values', cardinality(p_job_ids), cardinality(p_progress)),
            column = 'progress';
    end if;
    -- As the column's domain (jobs_progress_size) says, refused before anything is written.
    if p_progress is not null and exists (select 1 from unnest(p_progress) v where octet_length(v::text) > 8192) then
        raise exception using errcode = 'QV400', message = 'a progress value must be at most 8192 bytes as JSON text',
            column = 'progress';
    end if;
    -- At most a day: a lease is renewed by heartbeats, and a session must not park a job for years.
    if p_lease_ms is not null and (p_lease_ms < 1 or p_lease_ms > 86400000) then
        raise exception using errcode = 'QV400', message = format('lease must be between 1 ms and one day (86400000 ms), got %s', p_lease_ms),
            column = 'lease_ms';
    end if;

    return query
    -- Capped at the deadline; once it has passed (a timeout, or a cancel that moved it to its own time) at
    -- the lease it holds, so the sweep ends the attempt when that runs out. No deadline: no cap (least
    -- skips a null).
    update jobs j
       set lease_expires_at = least(now() + make_interval(
               secs => coalesce(p_lease_ms, (select t.lease_ms from task_type_settings t where t.name = j.type),
                                (select s.lease_ms from queue_settings s)) / 1000.0),
               case when j.deadline_at is not null then greatest(j.deadline_at, j.lease_expires_at) end),
           progress = coalesce(g.progress, j.progress)
      -- unnest pads a null p_progress with nulls: no progress given, none changed.
      from unnest(p_job_ids, p_lease_tokens, p_progress) as g(job_id, token, progress)
      join job_attempts a on a.job_id = g.job_id and a.lease_token_hash = sha256(uuid_send(g.token))
     where j.id = g.job_id and j.attempts = a.attempt and a.outcome is null and j.locked_by is not null
    returning j.id, j.lease_expires_at,
              exists (select 1 from job_cancel_requests r where r.job_id = j.id);
end;
$$;
