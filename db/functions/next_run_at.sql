-- next_run_at: the earliest p_limit distinct run_at times still ahead (after now()) of waiting jobs (pending or
-- failed, a try left) in p_queues and of p_task_types when given, in queues not paused; with due_in_ms, how far
-- ahead each is on the server's clock. Changes nothing. What a worker asks when it may have missed a pgqw_jobs_at
-- notification (at start, after its LISTEN connection came back). Raises QV400 (limit, empty queues or types).
create or replace function next_run_at(
    p_queues     text[] default null,
    p_task_types text[] default null,
    p_limit      integer default 1
) returns table (
    run_at timestamptz, due_in_ms bigint
)
language plpgsql
security definer
set search_path from current
set plan_cache_mode = force_generic_plan
set enable_bitmapscan = off
set enable_seqscan = off
set jit = off
as $$
#variable_conflict use_column
begin
    if p_limit is null or p_limit < 1 or p_limit > 1000 then
        raise exception using errcode = 'QV400',
            message = format('limit must be between 1 and 1000, got %s', coalesce(p_limit::text, 'null')),
            column = 'limit';
    end if;
    if p_queues is not null and cardinality(p_queues) = 0 then
        raise exception using errcode = 'QV400', message = 'queues, when given, must name at least one queue',
            column = 'queues';
    end if;
    if p_task_types is not null and cardinality(p_task_types) = 0 then
        raise exception using errcode = 'QV400', message = 'task types, when given, must name at least one type',
            column = 'task_types';
    end if;

    -- Plan (docs/worker.md): jobs_ready_idx is ordered by priority first, so the earliest run_at is found
    -- priority by priority: a skip scan of the distinct priorities (one index descent each), then for each
    -- one the index range after now() in run_at order, up to p_limit matching rows. It reads a few index
    -- entries per priority level, not the waiting set, and needs no index of its own (one more index on
    -- jobs would cost every enqueue). Rows of other queues or types, or of paused queues, are stepped over.
    return query
    with recursive levels(priority) as (
        (select r.priority from jobs r where r.status in ('pending', 'failed')
          order by r.priority desc limit 1)
        union all
        select (select r.priority from jobs r
                 where r.status in ('pending', 'failed') and r.priority < l.priority
                 order by r.priority desc limit 1)
          from levels l
         where l.priority is not null
    ), times as (
        select t.run_at
          from levels l
          cross join lateral (
              select distinct r.run_at
                from jobs r
               where r.status in ('pending', 'failed')
                 and r.priority = l.priority
                 and r.run_at > now()
                 and r.attempts < r.max_attempts
                 and (p_queues is null or r.queue = any (p_queues))
                 and (p_task_types is null or r.type = any (p_task_types))
                 and not exists (select 1 from queues q where q.name = r.queue and q.paused)
               order by r.run_at
               limit p_limit) t
         where l.priority is not null
    )
    select d.run_at,
           greatest(0, ceil(extract(epoch from d.run_at - clock_timestamp()) * 1000))::bigint
      from (select distinct t.run_at from times t order by t.run_at limit p_limit) d
     order by d.run_at;
end;
$$;
