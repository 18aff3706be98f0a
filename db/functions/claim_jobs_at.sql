-- claim_jobs_at: claim_jobs as if the time were p_now (the owner's test clock and repairs; no role may
-- execute it). pending/failed → processing for up to p_limit jobs ready at p_now, each with a new lease token.
-- Skips paused queues, and takes from a queue with max_running at most what keeps it at or under that many
-- processing jobs. Returns the claimed rows with their lease tokens. Raises QV400 (bad worker id, limit, lease,
-- queues, types, now).
create or replace function claim_jobs_at(
    p_now        timestamptz,
    p_worker_id  text,
    p_limit      integer,
    p_queues     text[] default null,
    p_lease_ms   integer default null,
    p_task_types text[] default null
) returns table (
    id uuid, type text, payload jsonb, status text, attempts integer, max_attempts integer,
    last_error text, run_at timestamptz, created_at timestamptz, started_at timestamptz,
    finished_at timestamptz, locked_by text, lease_expires_at timestamptz,
    idempotency_key text, queue text, priority integer, lease_token uuid
)
language plpgsql
security definer
set search_path = public, pg_temp
set plan_cache_mode = force_generic_plan
set enable_bitmapscan = off
set enable_seqscan = off
set jit = off
as $$
#variable_conflict use_column
declare
    v_ids   uuid[];
    v_queue record;
    v_slots bigint;
begin
    if p_worker_id is null or p_worker_id !~ '\S' or length(p_worker_id) > 200 then
        raise exception using errcode = 'QV400',
            message = 'worker id must be a non-empty text of at most 200 characters';
    end if;
    if p_limit is null or p_limit < 1 or p_limit > 1000 then
        raise exception using errcode = 'QV400',
            message = format('limit must be between 1 and 1000, got %s', coalesce(p_limit::text, 'null'));
    end if;
    -- At most a day: a lease is renewed by heartbeats, and a session must not park a job for years.
    if p_lease_ms is not null and (p_lease_ms < 1 or p_lease_ms > 86400000) then
        raise exception using errcode = 'QV400',
            message = format('lease must be between 1 ms and one day (86400000 ms), got %s', p_lease_ms);
    end if;
    if p_queues is not null and cardinality(p_queues) = 0 then
        raise exception using errcode = 'QV400', message = 'queues, when given, must name at least one queue';
    end if;
    if p_task_types is not null and cardinality(p_task_types) = 0 then
        raise exception using errcode = 'QV400', message = 'task types, when given, must name at least one type';
    end if;
    if p_now is null or not isfinite(p_now) or p_now >= '9999-01-01' then
        raise exception using errcode = 'QV400',
            message = format('now must be a finite time before the year 9999, got %s', coalesce(p_now::text, 'null'));
    end if;

    -- Plan (measured in docs/benchmarks.md): whatever the statistics say, the ready index is read in its
    -- order up to the limit and the picked rows are updated through the primary key, so a claim costs the
    -- same with 10 or 1,000,000 jobs waiting. One generic plan per session (plan_cache_mode) spares a
    -- replan per call; it may be made on an empty table, so scans that only look cheap there are ruled
    -- out: no bitmap scan (with stale statistics, a burst, it sorted the whole backlog on every call), no
    -- sequential scan (a plan made while idle updated the picked rows by reading the whole table). The
    -- cost of those disabled paths would trip JIT compilation, which a claim never needs (jit = off).
    if not exists (select 1 from queues q where q.paused or q.max_running is not null) then
        -- The common case, no queue paused or limited: the ready index in its order, no lock but the rows'.
        -- The rows picked here stay locked by this transaction: nothing can change them before the update.
        v_ids := array(
            select r.id
              from jobs r
             where r.status in ('pending', 'failed')
               and r.run_at <= p_now
               and r.attempts < r.max_attempts
               and (p_queues is null or r.queue = any (p_queues))
               and (p_task_types is null or r.type = any (p_task_types))
             order by r.priority desc, r.run_at, r.id
             limit p_limit
               for update skip locked);
    else
        -- A limited queue: its row is locked (in name order, so two claims never wait on each other in a
        -- circle) before its processing jobs are counted, so claims racing for it take turns, and each one's
        -- count (a statement after the lock, a new snapshot under read committed) sees the claims committed
        -- before it. It gives at most max_running - running jobs. Unlimited queues take no lock.
        v_ids := '{}';
        for v_queue in
            select q.name, q.max_running
              from queues q
             where q.max_running is not null and not q.paused
               and (p_queues is null or q.name = any (p_queues))
             order by q.name
               for update
        loop
            select v_queue.max_running - count(*) into v_slots
              from jobs p where p.status = 'processing' and p.queue = v_queue.name;
            continue when v_slots < 1;
            v_ids := v_ids || array(
                select r.id
                  from jobs r
                 where r.status in ('pending', 'failed')
                   and r.run_at <= p_now
                   and r.attempts < r.max_attempts
                   and r.queue = v_queue.name
                   and (p_task_types is null or r.type = any (p_task_types))
                 order by r.priority desc, r.run_at, r.id
                 limit least(p_limit, v_slots)
                   for update skip locked);
        end loop;
        -- The queues with no row, or a row neither paused nor limited.
        v_ids := v_ids || array(
            select r.id
              from jobs r
             where r.status in ('pending', 'failed')
               and r.run_at <= p_now
               and r.attempts < r.max_attempts
               and (p_queues is null or r.queue = any (p_queues))
               and (p_task_types is null or r.type = any (p_task_types))
               and not exists (select 1 from queues q
                                where q.name = r.queue and (q.paused or q.max_running is not null))
             order by r.priority desc, r.run_at, r.id
             limit p_limit
               for update skip locked);
        -- The best p_limit of them; the others stay locked (skipped by other claims) until this commits.
        v_ids := array(select r.id from jobs r where r.id = any (v_ids)
                        order by r.priority desc, r.run_at, r.id limit p_limit);
    end if;

    return query
    with claimed as (
        update jobs j
           set status = 'processing',
               attempts = j.attempts + 1,
               started_at = p_now,
               locked_by = p_worker_id,
               lease_expires_at = p_now + make_interval(
                   secs => coalesce(p_lease_ms, (select t.lease_ms from task_type_settings t where t.name = j.type),
                                    (select s.lease_ms from queue_settings s)) / 1000.0)
         where j.id = any (v_ids)
        -- The lease token: a random value for this attempt, returned to this caller only. The attempt's
        -- row keeps its SHA-256, which every later call for the attempt must match.
        returning j.*, gen_random_uuid() as lease_token
    ), recorded as (
        insert into job_attempts (job_id, attempt, worker_id, started_at, lease_token_hash)
        select c.id, c.attempts, c.locked_by, c.started_at, sha256(uuid_send(c.lease_token)) from claimed c
    )
    select c.* from claimed c order by c.priority desc, c.run_at, c.id;
end;
$$;
