-- queue_throughput: the jobs that finished in [p_since, p_until), succeeded or dead after their last attempt,
-- per queue and bucket (p_buckets equal buckets, 0 the oldest); only the (queue, bucket) pairs with a job.
-- Retried attempts are not counted: their job counts once. No state change. Raises nothing of its own.
--
-- For each type with a finished job (finished_types: one probe of jobs_type_finished_idx per type), two ranges of
-- that index (type, status, finished_at), so the cost follows the window's jobs and the types, not the history,
-- and the chart adds no index to the write path (pgqw.db.explain_throughput shows the plan).
create or replace function queue_throughput(p_since timestamptz, p_until timestamptz, p_buckets integer)
returns table (queue text, bucket integer, succeeded integer, failed integer)
language sql stable
set search_path from current
as $$
    select j.queue::text,
           least(floor(extract(epoch from j.finished_at - p_since) / extract(epoch from p_until - p_since)
                       * p_buckets)::integer, p_buckets - 1),
           (count(*) filter (where j.status = 'succeeded'))::integer,
           (count(*) filter (where j.status = 'dead'))::integer
      from jobs j
     where j.type = any (finished_types())
       and j.status in ('succeeded', 'dead')
       and j.finished_at >= p_since and j.finished_at < p_until
     group by 1, 2
     order by 1, 2;
$$;
