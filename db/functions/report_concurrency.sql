-- report_concurrency: per worker whose id starts with p_prefix, the most jobs it ran at once and its attempts,
-- from job_attempts timestamps alone (unfinished runs until now; back-to-back is no overlap). No state change.
-- Returns (worker_id, peak_at_once, attempts_run) rows. Raises nothing of its own.
create or replace function report_concurrency(
    p_prefix  text default ''
) returns table (worker_id text, peak_at_once integer, attempts_run integer)
language sql stable
set search_path from current
as $$
    with mine as (
        select a.* from job_attempts a
         where a.worker_id like replace(replace(replace(coalesce(p_prefix, ''), '\', '\\'), '%', '\%'), '_', '\_') || '%'
    ), events as (
        -- rank orders events at one instant: ends of earlier attempts, then starts, then the ends
        -- of attempts that took no measurable time (so they still count while they ran).
        select m.worker_id, m.started_at as at, 1 as delta, 1 as rank from mine m
        union all
        select m.worker_id, coalesce(m.finished_at, greatest(now(), m.started_at)), -1,
               case when coalesce(m.finished_at, greatest(now(), m.started_at)) = m.started_at then 2 else 0 end
          from mine m
    ), running as (
        select e.worker_id,
               sum(e.delta) over (partition by e.worker_id order by e.at, e.rank
                                  rows between unbounded preceding and current row) as n
          from events e
    )
    select r.worker_id, max(r.n)::integer, (select count(*)::integer from mine m where m.worker_id = r.worker_id)
      from running r
     group by r.worker_id
     order by r.worker_id;
$$;
