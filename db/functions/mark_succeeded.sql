-- mark_succeeded: processing → succeeded for the attempt whose lease token this is, with its result (a JSON value or
-- bytes of a content type) stored in the same statement; the attempt's row becomes succeeded; notifies pgqw_finished if watched.
-- Returns the job and already_recorded (true: this attempt had already succeeded, nothing changed).
-- Raises QV400 (bad argument or result), QN404 (no such job), QL409 (the token does not hold the job), QK409 (a cancel
-- was requested: nothing is stored, the job ends cancelled through mark_cancelled, mark_failed or a sweep).
create or replace function mark_succeeded(
    p_job_id        uuid,
    p_lease_token   uuid,
    p_result_type   text default null,
    p_result_value  jsonb default null,
    p_result_data   bytea default null
) returns setof recorded_job
language plpgsql
security definer
set search_path from current
-- Rows by key whatever the statistics say: a plan a session keeps from when a table was small (a fresh
-- database, a burst before autoanalyze) read the whole table on every later call. No JIT for the cost of
-- the disabled path (as in claim_jobs_at).
set enable_seqscan = off
set jit = off
as $$
#variable_conflict use_column
declare
    v_job jobs;
    v_held record;
    v_attempt integer;
    v_outcome text;
begin
    if p_job_id is null or p_lease_token is null then
        raise exception using errcode = 'QV400', message = 'job id and lease token must not be null',
            column = case when p_job_id is null then 'job_id' else 'lease_token' end;
    end if;
    if (p_result_value is not null or p_result_data is not null or p_result_type is not null)
       and (p_result_type is null or p_result_type !~ '^[!-~]+/[!-~]+$' or length(p_result_type) > 200
            or (p_result_value is null) = (p_result_data is null)
            or (p_result_value is not null and p_result_type <> 'application/json')) then
        raise exception using errcode = 'QV400',
            message = 'a result is a JSON value (content type application/json) or bytes with a content type '
                      'such as application/pdf, not both',
            column = case when p_result_type is null or p_result_type !~ '^[!-~]+/[!-~]+$'
                               or length(p_result_type) > 200 then 'result_type'
                          when p_result_value is not null then 'result_value' else 'result_data' end;
    end if;

    -- The attempt this token was issued for (the job's few attempts, through the primary key), or QN404/QL409.
    v_held := find_lease_attempt(p_job_id, p_lease_token);
    v_attempt := v_held.attempt;
    v_outcome := v_held.outcome;
    if v_outcome is null then
        -- locked_by is not null is status = 'processing' (constraints jobs_processing_is_locked and
        -- jobs_locked_only_when_processing); naming the status would let the planner walk every processing
        -- entry of jobs_status_created_idx instead of taking the primary key.
        update jobs j
           set status = 'succeeded', finished_at = greatest(now(), j.started_at),
               locked_by = null, lease_expires_at = null
         where j.id = p_job_id and j.attempts = v_attempt and j.locked_by is not null
        returning j.* into v_job;
        if found then
            -- Checked after the update holds the row: cancel_job locks it too, so a request committed
            -- before is seen here, and one made after finds the job succeeded.
            if exists (select 1 from job_cancel_requests r where r.job_id = p_job_id) then
                raise exception using errcode = 'QK409',
                    message = format('job %s was cancelled while attempt %s ran; this result is ignored',
                                     p_job_id, v_attempt),
                    hint = 'end the attempt with mark_cancelled',
                    -- Where the refusal comes from (exc.diag.table_name), as callers read it before QK409.
                    table = 'job_cancel_requests';
            end if;
            update job_attempts a
               set outcome = 'succeeded', finished_at = greatest(now(), a.started_at)
             where a.job_id = p_job_id and a.attempt = v_attempt;
            if p_result_type is not null then
                insert into job_results (job_id, content_type, value, data)
                values (p_job_id, p_result_type, p_result_value, p_result_data);
            end if;
            perform notify_watchers(p_job_id);  -- watch_job
            -- Its dependents and batch: only a job in a workflow (every parent is) or a batch has them.
            if v_job.workflow_id is not null or v_job.batch_id is not null then
                perform settle_jobs(array[p_job_id]);
            end if;
            return query select v_job, false;
            return;
        end if;
        -- Ended meanwhile (a sweep, or an earlier try of this very call, committed first): look again.
        select a.outcome into v_outcome from job_attempts a where a.job_id = p_job_id and a.attempt = v_attempt;
    end if;
    -- An earlier try of this call committed but its reply was lost: the attempt's row says it succeeded.
    if v_outcome = 'succeeded' then
        return query select j, true from jobs j where j.id = p_job_id;
        return;
    end if;
    perform raise_job_not_held(p_job_id, v_attempt);
end;
$$;
