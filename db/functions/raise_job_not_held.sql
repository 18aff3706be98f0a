-- raise_job_not_held: no state change and never returns; explains why a worker's (job, attempt) is not its to finish.
-- Raises QN404 (no such job) or QL409 (swept, handed back or finished). Security invoker, for the owner's
-- functions only (mark_succeeded, mark_failed, release_job): no role may execute it.
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
