-- watch_job: this session waits for the job to end. From the commit of its first call on, the function that ends the
-- job (succeeded, dead or cancelled) notifies pgqw_finished (its id as the payload, or '*' for several jobs at once);
-- a job no session watches ends without a notification. A processing job's row is locked for share, so a completion
-- under way finishes first and its end is what is returned (a pending or failed job is not locked: claims skip
-- locked rows). So: LISTEN pgqw_finished, call watch_job once to register, then again (a later transaction): every
-- end is either in that second answer or notified after it. Until unwatch_job, or until the job is pruned.
-- Returns the job's status. Raises QV400 (null id), QN404 (no such job).
create or replace function watch_job(p_job_id uuid) returns text
language plpgsql
security definer
set search_path from current
set enable_seqscan = off
set jit = off
as $$
declare
    v_status text;
begin
    if p_job_id is null then
        raise exception using errcode = 'QV400', message = 'job id must not be null',
            column = 'job_id';
    end if;
    select j.status into v_status from jobs j where j.id = p_job_id;
    if not found then
        raise exception using errcode = 'QN404', message = format('job %s does not exist', p_job_id);
    end if;
    if v_status = 'processing' then
        -- A completion under way holds the row: wait for it, then read the row as it left it.
        select j.status into v_status from jobs j where j.id = p_job_id for share;
    end if;
    insert into job_waiters as w (job_id, backend_pid) values (p_job_id, pg_backend_pid())
    on conflict (job_id, backend_pid) do nothing;
    return v_status;
end;
$$;
