-- raise_job_not_held: no state change and never returns; explains why a lease token does not hold a job.
-- Raises QN404 (no such job) or QL409 (the token is not this job's current attempt: swept, handed back,
-- finished, or never its). Security invoker, for the owner's functions only: no role may execute it.
create or replace function raise_job_not_held(
    p_job_id   uuid,
    p_attempt  integer
) returns void
language plpgsql
set search_path from current
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
        message = case when p_attempt is null
                       then format('this lease token holds no attempt of job %s; this result is ignored', p_job_id)
                       else format('job %s attempt %s is no longer held by its lease; this result is ignored',
                                   p_job_id, p_attempt) end,
        detail = format('the job is %s at attempt %s/%s, locked by %s',
                        v_job.status, v_job.attempts, v_job.max_attempts,
                        coalesce(v_job.locked_by, 'nobody')),
        hint = 'its lease expired and sweep_stuck handed it on, it was handed back or already finished, '
               'or the token is not the one its claim returned';
end;
$$;
