-- retry_dead: gives a dead job more tries (dead → pending, runnable at once; max_attempts + p_extra_attempts,
-- default retry_extra_attempts, up to 1000 tries in all; attempts and job_attempts kept; a cancel request
-- left from an earlier attempt is dropped: a person wants it run). Returns the updated job.
-- Raises QV400 (null or bad argument), QN404 (no such job), QS409 (the job is not dead, or has had 1000
-- attempts, the most a job may have).
create or replace function retry_dead(
    p_job_id          uuid,
    p_extra_attempts  integer default null
) returns setof jobs
language plpgsql
security definer
set search_path from current
as $$
declare
    v_job jobs;
    v_status text;
begin
    if p_job_id is null then
        raise exception using errcode = 'QV400', message = 'job id must not be null',
            column = 'job_id';
    end if;
    if p_extra_attempts is not null and (p_extra_attempts < 1 or p_extra_attempts > 1000) then
        raise exception using errcode = 'QV400',
            message = format('extra attempts must be between 1 and 1000, got %s', p_extra_attempts),
            column = 'extra_attempts';
    end if;

    update jobs j
       set status = 'pending', run_at = now(), finished_at = null,
           max_attempts = least(1000, j.max_attempts + coalesce(
               p_extra_attempts, (select s.retry_extra_attempts from queue_settings s)))
     where j.id = p_job_id and j.status = 'dead' and j.attempts < 1000
    returning j.* into v_job;
    if not found then
        select j.status into v_status from jobs j where j.id = p_job_id;
        if not found then
            raise exception using errcode = 'QN404', message = format('job %s does not exist', p_job_id);
        end if;
        if v_status = 'dead' then
            raise exception using errcode = 'QS409',
                message = format('job %s has had 1000 attempts, the most a job may have', p_job_id);
        end if;
        raise exception using errcode = 'QS409',
            message = format('job %s is %s; only dead jobs can be retried', p_job_id, v_status);
    end if;
    delete from job_cancel_requests r where r.job_id = p_job_id;

    perform pg_notify('pgqw_jobs', v_job.queue);
    return next v_job;
end;
$$;
