-- list_queues: every known queue (one with a job or a row in queues), by name, with what an operator set
-- on it and its numbers now: ready jobs (depth), processing jobs (running), age of the oldest ready job, and its
-- limit per concurrency key (key_max_running).
-- No state change. Raises nothing of its own.
--
-- The queues with a job come from a skip scan of jobs_queue_status_idx (one probe per queue), not a
-- read of the history; then each queue's waiting and running jobs, a range of that index each.
create or replace function list_queues()
returns table (name text, paused boolean, max_running integer, jobs_per_second numeric, depth integer,
               running integer, oldest_ready_age_seconds double precision, key_max_running integer)
language sql stable
set search_path from current
as $$
    with recursive found(name) as (
        (select j.queue from jobs j order by j.queue limit 1)
        union all
        select (select j.queue from jobs j where j.queue > f.name order by j.queue limit 1)
          from found f
         where f.name is not null
    ), known(name) as (
        select f.name from found f where f.name is not null
        union
        select q.name from queues q
    ), ready as (
        select k.name, count(j.*) as depth, min(j.run_at) as oldest
          from known k
          left join jobs j on j.queue = k.name and j.status in ('pending', 'failed')
               and j.run_at <= now() and j.attempts < j.max_attempts
         group by k.name
    )
    select r.name::text, coalesce(q.paused, false), q.max_running, q.jobs_per_second,
           r.depth::integer,
           (select count(*) from jobs j where j.queue = r.name and j.status = 'processing')::integer,
           coalesce(extract(epoch from now() - r.oldest), 0)::double precision, q.key_max_running
      from ready r
      left join queues q on q.name = r.name
     order by 1;
$$;
