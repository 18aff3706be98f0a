-- raise_job_not_held: explains why a worker's (job, attempt) is no longer its to finish, and raises.
-- Used by mark_succeeded, mark_failed and release_job after their guarded update matched no row.
-- Never returns. Raises QN404 when the job does not exist, QL409 when it exists but this worker's
-- attempt no longer holds it (its lease expired and it was swept, it was handed back, or it finished).
-- Security invoker, search_path pinned (public, pg_temp). EXECUTE: nobody but the owner: only the
-- security definer functions call it, and they run as the owner.
create or replace function raise_job_not_held(
    p_job_id     uuid,
    p_worker_id  text,
    p_attempt    integer
) returns void
language plpgsql
set search_path = public, pg_temp
as $$
declare
    v_job jobs;
begin
    select * into v_job from jobs where id = p_job_id;
    if not found then
        raise exception using errcode = 'QN404',
            message = format('job %s does not exist', p_job_id);
    end if;
    raise exception using errcode = 'QL409',
        message = format('job %s attempt %s is not held by worker %s; this result is ignored',
                         p_job_id, p_attempt, p_worker_id),
        detail = format('the job is %s at attempt %s/%s, locked by %s',
                        v_job.status, v_job.attempts, v_job.max_attempts,
                        coalesce(v_job.locked_by, 'nobody')),
        hint = 'its lease expired and sweep_stuck handed it on, or it was already finished';
end;
$$;
