-- queue_stats: the queue's numbers for psql and /metrics: jobs per queue and status, age of the oldest ready job,
-- attempts per outcome, worker events, live workers, ready jobs no live worker can take (by queue and type),
-- whether each queue is paused (1/0);
-- every fixed series present, 0 when empty. No state change.
-- Returns (metric, queue, label, value) rows. Raises nothing of its own.
create or replace function queue_stats()
returns table (metric text, queue text, label text, value double precision)
language sql stable
set search_path = public, pg_temp
as $$
    with statuses(status) as (values ('pending'), ('processing'), ('succeeded'), ('failed'), ('dead'), ('cancelled')),
    -- Every queue with a job or a row in queues (paused or limited), and 'default'.
    known_queues(queue) as (select distinct j.queue from jobs j union select q.name from queues q union select 'default'),
    by_status as (
        select j.queue, j.status, count(*) as n from jobs j group by j.queue, j.status
    ),
    attempts as (
        select coalesce(a.outcome, 'running') as outcome, a.abandon_reason, count(*) as n
          from job_attempts a group by 1, 2
    )
    select 'jobs', q.queue, s.status, coalesce(b.n, 0)::double precision
      from known_queues q cross join statuses s
      left join by_status b on b.queue = q.queue and b.status = s.status
    union all
    select 'oldest_ready_age_seconds', q.queue, null,
           coalesce((select extract(epoch from now() - min(j.run_at))
                       from jobs j
                      where j.status in ('pending', 'failed') and j.run_at <= now() and j.queue = q.queue), 0)
      from known_queues q
    union all
    select 'queue_paused', k.queue, null,
           case when exists (select 1 from queues p where p.name = k.queue and p.paused) then 1 else 0 end
      from known_queues k
    union all
    select 'attempts', null, o.outcome, coalesce((select sum(a.n) from attempts a where a.outcome = o.outcome), 0)
      from (values ('running'), ('succeeded'), ('failed'), ('abandoned')) as o(outcome)
    union all
    select 'worker_events', null, e.event, coalesce(e.n, 0)
      from (
        select 'claimed' as event, (select sum(a.n) from attempts a) as n
        union all select 'succeeded', (select sum(a.n) from attempts a where a.outcome = 'succeeded')
        union all select 'failed', (select sum(a.n) from attempts a where a.outcome = 'failed')
        union all select 'swept', (select sum(a.n) from attempts a where a.abandon_reason = 'lease_expired')
        union all select 'handed_back', (select sum(a.n) from attempts a where a.abandon_reason = 'handed_back')
      ) e
    union all
    -- Ready jobs no live worker can take: of a type no live worker registered, or in a queue none takes.
    select 'waiting_without_worker', r.queue, r.type, count(*)::double precision
      from jobs r
     where r.status in ('pending', 'failed') and r.attempts < r.max_attempts and r.run_at <= now()
       and not exists (select 1 from workers w
                        where w.expires_at > now() and r.type = any (w.task_types)
                          and (w.queues is null or r.queue = any (w.queues)))
     group by r.queue, r.type
    union all
    select 'workers_alive', null, null, (select count(*) from workers w where w.expires_at > now())::double precision
    order by 1, 2 nulls first, 3;
$$;
