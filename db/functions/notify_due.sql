-- notify_due: wakes a worker for a waiting job of p_queue that comes due at p_run_at: notifies pgqw_jobs_at with
-- '<ms> <queue>' when it is ahead on the server's clock (measured now, delivered at commit), else pgqw_jobs with
-- the queue; only when a worker waits for it (has_waiters). Called by the functions that put a job back to wait
-- (mark_failed, snooze_job, time_out_attempt, judge_blocked).
-- Raises nothing of its own. Internal: security invoker; no role may execute it.
create or replace function notify_due(
    p_queue   text,
    p_run_at  timestamptz
) returns void
language plpgsql
set search_path from current
as $$
declare
    v_due_ms bigint;
begin
    if not has_waiters(p_queue) then
        return;  -- nobody waits for the queue: a busy worker claims (or asks next_run_at) before it waits
    end if;
    v_due_ms := ceil(extract(epoch from p_run_at - clock_timestamp()) * 1000);
    if v_due_ms > 0 then
        perform pg_notify('pgqw_jobs_at', v_due_ms || ' ' || p_queue);
    else
        perform pg_notify('pgqw_jobs', p_queue);
    end if;
end;
$$;
