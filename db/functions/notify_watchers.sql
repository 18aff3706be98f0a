-- notify_watchers: notifies pgqw_finished with the job's id (delivered at commit) when a session watches the job
-- (watch_job); a job nobody watches ends without a notification. Called by the functions that end one job
-- (cancel_job, mark_succeeded, mark_failed, mark_cancelled, release_job). Raises nothing of its own. Internal:
-- security invoker; no role may execute it.
create or replace function notify_watchers(
    p_job_id  uuid
) returns void
language plpgsql
set search_path from current
as $$
begin
    if exists (select 1 from job_waiters w where w.job_id = p_job_id) then
        perform pg_notify('pgqw_finished', p_job_id::text);
    end if;
end;
$$;
