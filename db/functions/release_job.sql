-- release_job: processing → pending (runnable at once, max_attempts + 1 so the try is not spent) for the attempt
-- this worker holds; its job_attempts row becomes abandoned (handed_back) with the reason. Notifies pgqw_jobs.
-- Returns the job and already_recorded (true: this attempt was already handed back, nothing changed).
-- Raises QV400 (bad argument), QN404 (no such job), QL409 (the attempt is not this worker's, or ended otherwise).
create or replace function release_job(
    p_job_id     uuid,
    p_worker_id  text,
    p_attempt    integer,
    p_reason     text default 'worker shutting down'
) returns table (
    id uuid, type text, payload jsonb, status text, attempts integer, max_attempts integer,
    last_error text, run_at timestamptz, created_at timestamptz, started_at timestamptz,
    finished_at timestamptz, locked_by text, lease_expires_at timestamptz,
    idempotency_key text, queue text, priority integer, already_recorded boolean
)
language plpgsql
security definer
set search_path = public, pg_temp
as $$
#variable_conflict use_column
declare
    v_job jobs;
    v_reason text;
begin
    if p_job_id is null or p_worker_id is null or p_attempt is null then
        raise exception using errcode = 'QV400', message = 'job id, worker id and attempt must not be null';
    end if;
    if p_attempt < 1 then
        raise exception using errcode = 'QV400', message = format('attempt must be 1 or more, got %s', p_attempt);
    end if;
    v_reason := format('handed back by worker %s: %s', p_worker_id,
                       coalesce(nullif(btrim(p_reason), ''), 'no reason given'));

    update jobs j
       set status = 'pending', run_at = now(), max_attempts = j.max_attempts + 1,
           locked_by = null, lease_expires_at = null
     where j.id = p_job_id and j.status = 'processing'
       and j.locked_by = p_worker_id and j.attempts = p_attempt
    returning j.* into v_job;
    if found then
        update job_attempts a
           set outcome = 'abandoned', abandon_reason = 'handed_back', error = left(v_reason, 10000),
               finished_at = greatest(now(), a.started_at)
         where a.job_id = p_job_id and a.attempt = p_attempt;
        perform pg_notify('pgqw_jobs', v_job.queue);
        return query select v_job.*, false;
        return;
    end if;

    -- Not held: an earlier call for this very attempt may have committed (its reply was lost).
    -- The attempt's own row says so: this worker handed it back. The job may have moved on since.
    if exists (select 1 from job_attempts a
                where a.job_id = p_job_id and a.attempt = p_attempt and a.worker_id = p_worker_id
                  and a.outcome = 'abandoned' and a.abandon_reason = 'handed_back') then
        return query select j.*, true from jobs j where j.id = p_job_id;
        return;
    end if;
    perform raise_job_not_held(p_job_id, p_worker_id, p_attempt);
end;
$$;
