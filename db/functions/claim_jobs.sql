-- claim_jobs: pending/failed → processing for up to p_limit ready jobs (run_at <= p_now, a try left, in p_queues and
-- of p_task_types when given; highest priority, then oldest run_at; for update skip locked), each with attempts + 1,
-- a lease (p_lease_ms, else its task type's, else queue_settings') and a job_attempts row. Returns the claimed rows
-- (lease_expires_at - started_at is the lease granted). Raises QV400 (bad worker id, limit, lease, queues, types, now).
create or replace function claim_jobs(
    p_worker_id  text,
    p_limit      integer,
    p_queues     text[] default null,
    p_lease_ms   integer default null,
    p_now        timestamptz default now(),
    p_task_types text[] default null
) returns setof jobs
language plpgsql
security definer
set search_path = public, pg_temp
set plan_cache_mode = force_generic_plan
set enable_bitmapscan = off
set enable_seqscan = off
set jit = off
as $$
begin
    if p_worker_id is null or p_worker_id !~ '\S' or length(p_worker_id) > 200 then
        raise exception using errcode = 'QV400',
            message = 'worker id must be a non-empty text of at most 200 characters';
    end if;
    if p_limit is null or p_limit < 1 or p_limit > 1000 then
        raise exception using errcode = 'QV400',
            message = format('limit must be between 1 and 1000, got %s', coalesce(p_limit::text, 'null'));
    end if;
    if p_lease_ms is not null and p_lease_ms < 1 then
        raise exception using errcode = 'QV400',
            message = format('lease must be at least 1 ms, got %s', p_lease_ms);
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
         -- The rows picked here are locked by this statement: nothing can change them before the update.
         where j.id = any (array(
                   select r.id
                     from jobs r
                    where r.status in ('pending', 'failed')
                      and r.run_at <= p_now
                      and r.attempts < r.max_attempts
                      and (p_queues is null or r.queue = any (p_queues))
                      and (p_task_types is null or r.type = any (p_task_types))
                    order by r.priority desc, r.run_at, r.id
                    limit p_limit
                      for update skip locked))
        returning j.*
    ), recorded as (
        insert into job_attempts (job_id, attempt, worker_id, started_at)
        select c.id, c.attempts, c.locked_by, c.started_at from claimed c
    )
    select c.* from claimed c order by c.priority desc, c.run_at, c.id;
end;
$$;
