-- cancel_job: pending/failed → cancelled at once (notifies pgqw_finished if watched); processing: the cancel is
-- requested (the job stays processing until its worker ends the attempt cancelled, or a sweep does). Attempts and
-- errors are kept.
-- Returns the job and cancel_requested_at. Raises QV400 (null id), QN404 (no such job), QS409 (already finished).
create or replace function cancel_job(
    p_job_id  uuid
) returns table (
    id uuid, type job_type, payload job_payload, status job_status, attempts integer, max_attempts job_max_attempts,
    last_error text, run_at timestamptz, created_at timestamptz, started_at timestamptz,
    finished_at timestamptz, locked_by job_worker_id, lease_expires_at timestamptz,
    idempotency_key job_idempotency_key, queue job_queue, priority integer, cancel_requested_at timestamptz
)
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
        raise exception using errcode = 'QV400', message = 'job id must not be null';
    end if;
    -- The row lock orders this call with a claim (which skips locked rows) and with mark_*: whichever
    -- commits first, the other sees its result.
    select j.* into v_job from jobs j where j.id = p_job_id for update;
    if not found then
        raise exception using errcode = 'QN404', message = format('job %s does not exist', p_job_id);
    end if;
    if v_job.status not in ('pending', 'failed', 'processing') then
        raise exception using errcode = 'QS409',
            message = format('job %s is %s; only pending, failed or processing jobs can be cancelled',
                             p_job_id, v_job.status);
    end if;

    insert into job_cancel_requests as r (job_id) values (p_job_id)
    on conflict on constraint job_cancel_requests_pkey do nothing;
    select r.requested_at into v_requested_at from job_cancel_requests r where r.job_id = p_job_id;

    if v_job.status in ('pending', 'failed') then
        update jobs j
           set status = 'cancelled', finished_at = greatest(now(), j.started_at)
         where j.id = p_job_id
        returning j.* into v_job;
        if exists (select 1 from job_waiters w where w.job_id = p_job_id) then  -- watch_job
            perform pg_notify('pgqw_finished', p_job_id::text);
        end if;
    end if;
    return query select v_job.*, v_requested_at;
end;
$$;
