-- sweep_stuck_at: sweep_stuck as if the time were p_now (the owner's test clock and repairs; no role may execute
-- it): recovers the processing jobs whose lease expired before p_now (→ pending with tries left, else → dead;
-- last_error names the worker; its attempt abandoned; locked rows skipped; a job asked to cancel → cancelled,
-- whenever the request committed, its attempt cancelled when its lease ran to the deadline the request set). Which job stopped a worker that held several is not known: each gets its
-- lost attempt back (max_attempts + 1, at most 1000) and is listed in job_isolation, so it runs alone next; the
-- attempt of a job that ran alone (listed) counts. Removes the listing of jobs that are final. An attempt whose
-- lease ran to its deadline (heartbeat extends none past it) timed out: time_out_attempt ends it `timed_out` (→ failed
-- with the backoff, or → dead), unless a cancel was asked (→ cancelled, as above). Ends expired the jobs not
-- started by their expires_at (pending, no attempt yet, expires_at <= p_now; up to 10000 a call, locked rows
-- skipped; last_error 'expired at ...'); they are not among the rows returned.
-- Notifies pgqw_jobs ('*') when it swept a job, or when a job has been ready for a second or more (a queue
-- neither paused, rated nor at its max_running): listening workers that found nothing do not poll. Returns one
-- row per swept job (the timed-out ones last). QV400.
create or replace function sweep_stuck_at(
    p_now  timestamptz
) returns table (job_id uuid, attempt integer, worker_id text, status text, lease_expired_at timestamptz)
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
declare
    v_ids uuid[];
    v_timed_out uuid[];
    v_stuck record;
    v_job jobs;
    v_swept bigint := 0;
    v_expired bigint := 0;
    v_expired_ids uuid[];
begin
    if p_now is null then
        raise exception using errcode = 'QV400', message = 'now must not be null',
            column = 'now';
    end if;

    -- Jobs not started by their expiry: final, never claimed (claim_jobs_at skips them). jobs_expiry_idx holds
    -- only jobs that may expire, so this reads what it ends and no more.
    with due as (
        select j.id from jobs j
         where j.status = 'pending' and j.attempts = 0 and j.expires_at <= p_now
         order by j.expires_at
         limit 10000
           for update skip locked
    )
    , ended as (
        update jobs j
           set status = 'expired', finished_at = now(), last_error = format('expired at %s', j.expires_at)
          from due
         where j.id = due.id
        returning j.id
    )
    select array(select e.id from ended e) into v_expired_ids;
    v_expired := cardinality(v_expired_ids);
    perform settle_jobs(v_expired_ids);  -- their dependents (cancelled) and batches

    -- Listings of jobs that are final (their last attempt ended): nothing runs them again.
    delete from job_isolation i using jobs j
     where j.id = i.job_id and j.status in ('succeeded', 'dead', 'cancelled', 'expired');

    -- The expired leases are locked first (rows another session holds are skipped: it is ending them), and
    -- the cancel requests and listings read in the statements after: under read committed each statement
    -- sees what committed before it began, and cancel_job needs the row lock to make a request, so a request
    -- is either seen here or made after this commits (when it finds the job no longer processing).
    v_ids := array(
        select j.id
          from jobs j
         where j.status = 'processing' and j.lease_expires_at < p_now
         order by j.lease_expires_at
           for update skip locked);
    -- Timed out: held until its deadline (the lease reached it), and not asked to cancel (a request moved the
    -- deadline to its own time: the job ends cancelled below). The rest stopped responding before theirs.
    v_timed_out := array(
        select j.id
          from jobs j
         where j.id = any (v_ids) and j.lease_expires_at >= j.deadline_at
           and not exists (select 1 from job_cancel_requests r where r.job_id = j.id));
    if cardinality(v_timed_out) > 0 then
        v_ids := array(select x from unnest(v_ids) as x where not x = any (v_timed_out));
    end if;

    return query
    with asked as (
        select j.id, j.attempts, j.locked_by, j.lease_expires_at, j.deadline_at,
               (select r.requested_at from job_cancel_requests r where r.job_id = j.id) as cancel_requested_at,
               exists (select 1 from job_isolation i where i.job_id = j.id) as alone
          from jobs j
         where j.id = any (v_ids)
    ), stuck as (
        select asked.*, asked.cancel_requested_at is not null as cancel,
               -- Stopped by its cancel: the request moved the deadline, and the lease, extended no more,
               -- ran to it (its handler did not stop by itself). A lease that ran out before is a worker
               -- that stopped responding, asked or not.
               coalesce(asked.cancel_requested_at is not null and asked.lease_expires_at >= asked.deadline_at,
                        false) as stopped_by_cancel
          from asked
    ), judged as (
        select stuck.*,
               -- Given back: the attempt is not spent (as release_job gives a handed-back one back).
               (not stuck.cancel and not stuck.alone and j.max_attempts < 1000) as given_back,
               case when not stuck.cancel and not stuck.alone and j.max_attempts < 1000
                    then j.max_attempts + 1 else j.max_attempts end as max_attempts
          from stuck join jobs j on j.id = stuck.id
    ), swept as (
        update jobs j
           set status = case when judged.cancel then 'cancelled'
                             when j.attempts < judged.max_attempts then 'pending' else 'dead' end,
               max_attempts = judged.max_attempts,
               run_at = case when not judged.cancel and j.attempts < judged.max_attempts then now() else j.run_at end,
               finished_at = case when not judged.cancel and j.attempts < judged.max_attempts
                                  then null else greatest(now(), j.started_at) end,
               last_error = case when judged.stopped_by_cancel
                                 then format('cancelled on request (asked at %s): its lease on attempt %s ran out at %s',
                                             judged.cancel_requested_at, judged.attempts, judged.lease_expires_at)
                                 else format('worker %s stopped responding: its lease on attempt %s expired at %s%s',
                                             judged.locked_by, judged.attempts, judged.lease_expires_at,
                                             case when judged.given_back
                                                  then ' (the attempt is given back: the job runs alone next)'
                                                  when judged.alone then ' while it ran alone' else '' end) end,
               locked_by = null,
               lease_expires_at = null
          from judged
         where j.id = judged.id
        returning j.id, j.status
    ), abandoned as (
        update job_attempts a
           set outcome = case when judged.stopped_by_cancel then 'cancelled' else 'abandoned' end,
               abandon_reason = case when judged.stopped_by_cancel then null else 'lease_expired' end,
               finished_at = greatest(now(), a.started_at),
               error = case when judged.stopped_by_cancel
                            then format('cancelled on request (asked at %s): its lease ran out at %s',
                                        judged.cancel_requested_at, judged.lease_expires_at)
                            else format('worker %s stopped responding (lease expired at %s)',
                                        judged.locked_by, judged.lease_expires_at) end
          from judged
         where a.job_id = judged.id and a.attempt = judged.attempts
    ), listed as (
        insert into job_isolation (job_id)
        select judged.id from judged where judged.given_back
        on conflict on constraint job_isolation_pkey do nothing
    )
    select judged.id, judged.attempts, judged.locked_by::text, swept.status::text, judged.lease_expires_at
      from judged join swept on swept.id = judged.id
     order by judged.lease_expires_at, judged.id;
    get diagnostics v_swept = row_count;
    -- The swept jobs that ended (dead, cancelled): their dependents and batches.
    if v_swept > 0 then
        perform settle_jobs(array(select j.id from jobs j
                                   where j.id = any (v_ids) and j.status in ('dead', 'cancelled')));
    end if;

    for v_stuck in
        select j.id, j.attempts, j.locked_by, j.lease_expires_at
          from jobs j where j.id = any (v_timed_out) order by j.lease_expires_at, j.id
    loop
        v_job := time_out_attempt(v_stuck.id, v_stuck.attempts);
        return query select v_stuck.id, v_stuck.attempts::integer, v_stuck.locked_by::text, v_job.status::text,
                            v_stuck.lease_expires_at;
        v_swept := v_swept + 1;
    end loop;

    if v_expired > 0 and exists (select 1 from job_waiters) then  -- watch_job: some watched jobs may have expired
        perform pg_notify('pgqw_finished', '*');
    end if;
    if v_swept > 0 then
        -- Wake workers of every queue ('*'): some swept jobs are ready again; and whoever waits for a
        -- job to end: some may be dead now.
        perform pg_notify('pgqw_jobs', '*');
        if exists (select 1 from job_waiters) then  -- watch_job
            perform pg_notify('pgqw_finished', '*');
        end if;
    elsif exists (select 1 from jobs r
                   where r.status in ('pending', 'failed')
                     and r.run_at <= p_now - interval '1 second'
                     and r.attempts < r.max_attempts
                     and not exists (select 1 from queues q
                                      where q.name = r.queue
                                        and (q.paused or q.jobs_per_second is not null
                                             or q.max_running <= (select count(*) from jobs p
                                                                   where p.queue = q.name and p.status = 'processing')))) then
        -- The safety net for listening workers, which stop polling once a claim found nothing: a job ready
        -- for a second or more that no claim took wakes them: the claim that locked it rolled back, a row
        -- was written by hand, or a limited queue (max_running) got a slot back when one of its jobs ended
        -- (the completions do not look at queues: the worker that ran it claims again at once, and this
        -- catches a job of a type it does not run). Paused queues wait for resume_queue, rated ones for
        -- the next token a claim announced, and a limited queue at its limit for a slot.
        perform pg_notify('pgqw_jobs', '*');
    end if;
end;
$$;
