-- cancel_job: blocked/pending/failed → cancelled at once (notifies pgqw_finished if watched); dead → cancelled too
-- (a person gives up on it: the dependents it kept blocked are cancelled; settle_jobs); processing: the cancel is
-- requested and the attempt's deadline moved to now, so heartbeat extends its lease no more (the job stays processing
-- until its worker ends the attempt cancelled, or, within one lease, a sweep does). Attempts and errors are kept.
-- Returns the job and cancel_requested_at. Raises QV400 (null id), QN404 (no such job), QS409 (succeeded, cancelled or expired).
create or replace function cancel_job(
    p_job_id  uuid
) returns setof cancelled_job
language plpgsql
security definer
set search_path from current
as $$
#variable_conflict use_column
declare
    v_job jobs;
    v_requested_at timestamptz;
begin
    if p_job_id is null then
        raise exception using errcode = 'QV400', message = 'job id must not be null', column = 'job_id';
    end if;
    -- The row lock orders this call with a claim (which skips locked rows) and with mark_*: whichever
    -- commits first, the other sees its result.
    select j.* into v_job from jobs j where j.id = p_job_id for update;
    if not found then
        raise exception using errcode = 'QN404', message = format('job %s does not exist', p_job_id);
    end if;
    if v_job.status not in ('blocked', 'pending', 'failed', 'processing', 'dead') then
        raise exception using errcode = 'QS409',
            message = format('job %s is %s; only blocked, pending, failed, processing or dead jobs can be cancelled',
                             p_job_id, v_job.status);
    end if;

    insert into job_cancel_requests as r (job_id) values (p_job_id)
    on conflict on constraint job_cancel_requests_pkey do nothing;
    select r.requested_at into v_requested_at from job_cancel_requests r where r.job_id = p_job_id;

    if v_job.status in ('blocked', 'pending', 'failed', 'dead') then
        update jobs j
           set status = 'cancelled', finished_at = greatest(now(), j.started_at)
         where j.id = p_job_id
        returning j.* into v_job;
        perform notify_watchers(p_job_id);  -- watch_job
        if v_job.workflow_id is not null or v_job.batch_id is not null then
            perform settle_jobs(array[p_job_id]);  -- its dependents and batch
        end if;
    elsif v_job.deadline_at is null or v_job.deadline_at > now() then
        -- Running: its deadline is now (least skips a null one), as a timeout's would be. The worker has what
        -- is left of its lease to end the attempt; a handler that does not look is stopped at its end.
        update jobs j set deadline_at = least(j.deadline_at, now()) where j.id = p_job_id returning j.* into v_job;
        update job_attempts a set deadline_at = least(a.deadline_at, now())
         where a.job_id = p_job_id and a.attempt = v_job.attempts;
    end if;
    return query select v_job, v_requested_at;
end;
$$;
