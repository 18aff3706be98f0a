-- queue_stats: the queue's numbers for psql and /metrics: jobs per queue and status, age of the oldest ready job,
-- attempts per outcome, worker events, live workers, ready jobs no live worker can take (by queue and type),
-- whether each queue is paused (1/0), and whether history figures are estimates (stats_estimated, 1/0);
-- every fixed series present, 0 when empty. No state change.
-- Returns (metric, queue, label, value) rows. Raises nothing of its own.
--
-- Its cost follows the waiting and running jobs, not the history. Read exactly, through indexes:
-- the queues (a skip scan of jobs_queue_status_idx, one probe per queue), pending, processing and
-- failed jobs, the oldest ready job, running attempts, workers. The history: a queue's succeeded, dead,
-- cancelled or expired jobs are counted exactly up to v_exact_limit (10,000) rows, at a bounded cost; finished
-- attempts and worker events exactly while job_attempts holds at most that many rows. Beyond, each is
-- the planner's estimate (EXPLAIN: the last ANALYZE's statistics scaled to the table's current size),
-- as Oban.Met does above its estimate_limit, and stats_estimated is 1 for that table.
create or replace function queue_stats()
returns table (metric text, queue text, label text, value double precision)
language plpgsql volatile  -- EXPLAIN (the estimates) is allowed in a volatile function only; it writes nothing
set search_path from current
as $$
declare
    v_exact_limit constant bigint := 10000;
    v_live constant text[] := array['blocked', 'pending', 'processing', 'failed'];
    v_statuses constant text[] := array['blocked', 'pending', 'processing', 'succeeded', 'failed', 'dead', 'cancelled', 'expired'];
    v_metric text[] := '{}'::text[];
    v_queue text[] := '{}'::text[];
    v_label text[] := '{}'::text[];
    v_value double precision[] := '{}'::double precision[];
    v_queues text[];
    v_q text;
    v_s text;
    v_n bigint;
    v_est double precision;
    v_jobs_estimated boolean := false;
    v_attempts_estimated boolean;
    v_attempts record;
    -- Every value of the attempt_outcome domain (its check constraint), each a series of the attempts metric.
    v_outcomes constant text[] := array['succeeded', 'failed', 'abandoned', 'cancelled', 'timed_out', 'snoozed'];
    v_outcome_n bigint[];
    v_o text;
    v_plan json;
begin
    -- Every queue with a job (a skip scan: each step is the next queue name in the index), a row in
    -- queues (paused or limited), and 'default'.
    with recursive found(name) as (
        (select j.queue from jobs j order by j.queue limit 1)
        union all
        select (select j.queue from jobs j where j.queue > f.name order by j.queue limit 1)
          from found f where f.name is not null
    )
    select array_agg(distinct k.name order by k.name) into v_queues
      from (select f.name from found f where f.name is not null
            union select q.name from queues q
            union select 'default') k;

    foreach v_q in array v_queues loop
        foreach v_s in array v_statuses loop
            if v_s = any (v_live) then
                select count(*) into v_n from jobs j where j.queue = v_q and j.status = v_s;
                v_est := v_n;
            else
                execute format('explain (format json) select 1 from jobs where queue = %L and status = %L', v_q, v_s)
                   into v_plan;
                v_est := (v_plan -> 0 -> 'Plan' ->> 'Plan Rows')::double precision;
                if v_est <= v_exact_limit then
                    select count(*) into v_n
                      from (select 1 from jobs j where j.queue = v_q and j.status = v_s limit v_exact_limit + 1) x;
                    if v_n <= v_exact_limit then
                        v_est := v_n;
                    else
                        v_est := greatest(v_est, v_n);
                        v_jobs_estimated := true;
                    end if;
                else
                    v_jobs_estimated := true;
                end if;
            end if;
            v_metric := v_metric || 'jobs'::text; v_queue := v_queue || v_q; v_label := v_label || v_s;
            v_value := v_value || round(v_est);
        end loop;

        -- The oldest job ready now: the first run_at of each waiting status, one index probe each.
        v_metric := v_metric || 'oldest_ready_age_seconds'::text; v_queue := v_queue || v_q; v_label := v_label || null::text;
        v_value := v_value || coalesce(extract(epoch from now() - least(
            (select min(j.run_at) from jobs j where j.queue = v_q and j.status = 'pending' and j.run_at <= now()),
            (select min(j.run_at) from jobs j where j.queue = v_q and j.status = 'failed' and j.run_at <= now())
        ))::double precision, 0);

        v_metric := v_metric || 'queue_paused'::text; v_queue := v_queue || v_q; v_label := v_label || null::text;
        v_value := v_value || (case when exists (select 1 from queues p where p.name = v_q and p.paused)
                                    then 1 else 0 end)::double precision;
    end loop;

    -- Attempts. The running ones are those of processing jobs (jobs_lease_idx, then the key): exact.
    execute 'explain (format json) select 1 from job_attempts' into v_plan;
    v_est := (v_plan -> 0 -> 'Plan' ->> 'Plan Rows')::double precision;
    v_attempts_estimated := v_est > v_exact_limit;
    if not v_attempts_estimated then
        -- A small history: read it (at most about v_exact_limit rows by the planner's count).
        select count(*) filter (where a.outcome is null) as running,
               count(*) filter (where a.outcome = 'succeeded') as succeeded,
               count(*) filter (where a.outcome = 'failed') as failed,
               count(*) filter (where a.outcome = 'abandoned') as abandoned,
               count(*) as claimed,
               count(*) filter (where a.abandon_reason = 'lease_expired') as swept,
               count(*) filter (where a.abandon_reason = 'handed_back') as handed_back
          into v_attempts
          from job_attempts a;
        select array_agg(coalesce(g.n, 0) order by o.i) into v_outcome_n
          from unnest(v_outcomes) with ordinality as o(name, i)
          left join (select a.outcome, count(*) as n from job_attempts a where a.outcome is not null
                      group by a.outcome) g on g.outcome = o.name;
    else
        select (select count(*) from jobs j join job_attempts a on a.job_id = j.id
                 where j.status = 'processing' and a.outcome is null) as running,
               0::bigint as succeeded, 0::bigint as failed, 0::bigint as abandoned, round(v_est)::bigint as claimed,
               0::bigint as swept, 0::bigint as handed_back
          into v_attempts;
        execute 'explain (format json) select 1 from job_attempts where outcome = ''succeeded''' into v_plan;
        v_attempts.succeeded := round((v_plan -> 0 -> 'Plan' ->> 'Plan Rows')::double precision);
        execute 'explain (format json) select 1 from job_attempts where outcome = ''failed''' into v_plan;
        v_attempts.failed := round((v_plan -> 0 -> 'Plan' ->> 'Plan Rows')::double precision);
        execute 'explain (format json) select 1 from job_attempts where outcome = ''abandoned''' into v_plan;
        v_attempts.abandoned := round((v_plan -> 0 -> 'Plan' ->> 'Plan Rows')::double precision);
        execute 'explain (format json) select 1 from job_attempts where abandon_reason = ''lease_expired''' into v_plan;
        v_attempts.swept := round((v_plan -> 0 -> 'Plan' ->> 'Plan Rows')::double precision);
        execute 'explain (format json) select 1 from job_attempts where abandon_reason = ''handed_back''' into v_plan;
        v_attempts.handed_back := round((v_plan -> 0 -> 'Plan' ->> 'Plan Rows')::double precision);
        v_outcome_n := '{}'::bigint[];
        foreach v_o in array v_outcomes loop
            execute format('explain (format json) select 1 from job_attempts where outcome = %L', v_o) into v_plan;
            v_outcome_n := v_outcome_n || round((v_plan -> 0 -> 'Plan' ->> 'Plan Rows')::double precision)::bigint;
        end loop;
    end if;

    return query
    select * from unnest(v_metric, v_queue, v_label, v_value)
    union all
    select 'attempts', null, 'running', v_attempts.running::double precision
    union all
    select 'attempts', null, o.outcome, o.n::double precision
      from unnest(v_outcomes, v_outcome_n) as o(outcome, n)
    union all
    select 'worker_events', null, e.event, e.n::double precision
      from (values ('claimed', v_attempts.claimed), ('succeeded', v_attempts.succeeded),
                   ('failed', v_attempts.failed), ('swept', v_attempts.swept),
                   ('handed_back', v_attempts.handed_back)) as e(event, n)
    union all
    select 'stats_estimated', null, t.name, (case when t.estimated then 1 else 0 end)::double precision
      from (values ('jobs', v_jobs_estimated), ('job_attempts', v_attempts_estimated)) as t(name, estimated)
    union all
    -- Ready jobs no live worker can take: of a type no live worker registered, or in a queue none takes.
    -- Counted per (queue, type) first: the live workers are checked once per group, not per job.
    select 'waiting_without_worker', r.queue, r.type, r.n::double precision
      from (select j.queue, j.type, count(*) as n
              from jobs j
             where j.status in ('pending', 'failed') and j.attempts < j.max_attempts and j.run_at <= now()
             group by j.queue, j.type) r
     where not exists (select 1 from workers w
                        where w.expires_at > now() and r.type = any (w.task_types)
                          and (w.queues is null or r.queue = any (w.queues)))
    union all
    select 'workers_alive', null, null, (select count(*) from workers w where w.expires_at > now())::double precision
    order by 1, 2 nulls first, 3;
end;
$$;
