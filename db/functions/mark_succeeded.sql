-- mark_succeeded: processing → succeeded for the attempt this worker holds, with its result (a JSON value or bytes
-- of a content type) stored in the same statement; its job_attempts row becomes succeeded; notifies pgqw_finished.
-- Returns the job and already_recorded (true: this worker's attempt had already succeeded, nothing changed).
-- Raises QV400 (bad argument or result), QN404 (no such job), QL409 (the attempt is not this worker's, or ended otherwise).
create or replace function mark_succeeded(
    p_job_id     uuid,
    p_worker_id  text,
    p_attempt    integer,
    p_result_type   text default null,
    p_result_value  jsonb default null,
    p_result_data   bytea default null
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
begin
    if p_job_id is null or p_worker_id is null or p_attempt is null then
        raise exception using errcode = 'QV400', message = 'job id, worker id and attempt must not be null';
    end if;
    if p_attempt < 1 then
        raise exception using errcode = 'QV400', message = format('attempt must be 1 or more, got %s', p_attempt);
    end if;
    if (p_result_value is not null or p_result_data is not null or p_result_type is not null)
       and (p_result_type is null or p_result_type !~ '^[!-~]+/[!-~]+$' or length(p_result_type) > 200
            or (p_result_value is null) = (p_result_data is null)
            or (p_result_value is not null and p_result_type <> 'application/json')) then
        raise exception using errcode = 'QV400',
            message = 'a result is a JSON value (content type application/json) or bytes with a content type '
                      'such as application/pdf, not both';
    end if;

    -- locked_by = p_worker_id implies status = 'processing' (constraint jobs_locked_only_when_processing).
    -- Not naming the status keeps the planner on the primary key: a status condition lets it pick
    -- jobs_status_created_idx and walk every 'processing' entry, dead ones included, to find one id.
    update jobs j
       set status = 'succeeded', finished_at = greatest(now(), j.started_at),
           locked_by = null, lease_expires_at = null
     where j.id = p_job_id and j.locked_by = p_worker_id and j.attempts = p_attempt
    returning j.* into v_job;
    if found then
        update job_attempts a
           set outcome = 'succeeded', finished_at = greatest(now(), a.started_at)
         where a.job_id = p_job_id and a.attempt = p_attempt;
        if p_result_type is not null then
            insert into job_results (job_id, content_type, value, data)
            values (p_job_id, p_result_type, p_result_value, p_result_data);
        end if;
        perform pg_notify('pgqw_finished', p_job_id::text);
        return query select v_job.*, false;
        return;
    end if;

    -- Not held: an earlier call for this very attempt may have committed (its reply was lost).
    -- The attempt's own row says so: it was this worker's and it succeeded.
    if exists (select 1 from job_attempts a
                where a.job_id = p_job_id and a.attempt = p_attempt
                  and a.worker_id = p_worker_id and a.outcome = 'succeeded') then
        return query select j.*, true from jobs j where j.id = p_job_id;
        return;
    end if;
    perform raise_job_not_held(p_job_id, p_worker_id, p_attempt);
end;
$$;
