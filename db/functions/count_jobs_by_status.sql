-- count_jobs_by_status: jobs per status, every status present (0 when none), in the order of a job's
-- life: queue_stats()'s jobs summed over the queues, so it costs what the waiting and running jobs cost,
-- and a finished status of a queue above 10,000 jobs is the planner's estimate (see queue_stats).
-- No state change. Raises nothing of its own.
create or replace function count_jobs_by_status()
returns table (status text, jobs double precision)
language sql volatile  -- queue_stats is volatile (its estimates run EXPLAIN); this writes nothing
set search_path from current
as $$
    select s.status, coalesce(sum(q.value), 0)
      from unnest(array['blocked', 'pending', 'processing', 'succeeded', 'failed', 'dead', 'cancelled', 'expired'])
           with ordinality as s(status, n)
      left join queue_stats() q on q.metric = 'jobs' and q.label = s.status
     group by s.status, s.n
     order by s.n;
$$;
