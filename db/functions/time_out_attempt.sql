-- time_out_attempt: processing → failed (tries left; run_at = now() + backoff_delay of the tries that failed, as in
-- mark_failed, with the p_ arguments, else the
-- task type's backoff, else queue_settings'; notify_due, as mark_failed) or → dead
-- (notifies pgqw_finished if watched), attempt p_attempt `timed_out`, last_error `timed out after <ms> ms`. Internal:
-- security invoker, for sweep_stuck_at and mark_timed_out, which hold the job's row lock and checked that this
-- attempt holds it, that its deadline passed and that no cancel was asked; no role may execute it. Returns the job.
-- Raises QL409 should the attempt not hold the job (raise_job_not_held).
create or replace function time_out_attempt(
    p_job_id         uuid,
    p_attempt        integer,
    p_base_ms        integer default null,
    p_max_jitter_ms  integer default null,
    p_max_delay_ms   integer default null
) returns jobs
language plpgsql
set search_path from current
set enable_seqscan = off
set jit = off
as $$
#variable_conflict use_column
declare
    v_job jobs;
    v_type task_type_settings;
    v_error text;
    v_spared integer := 0;
begin
    select format('timed out after %s ms (its deadline was %s)',
                  round(extract(epoch from a.deadline_at - a.started_at) * 1000)::bigint, a.deadline_at)
      into v_error
      from job_attempts a where a.job_id = p_job_id and a.attempt = p_attempt;
    -- The job's task type's backoff where an argument is null (a type no worker registered: none).
    select t.* into v_type from jobs k join task_type_settings t on t.name = k.type where k.id = p_job_id;
    -- The attempts before this one that spent no try (snoozed, handed back), as mark_failed counts them.
    if p_attempt > 1 then
        v_spared := (select count(*) from job_attempts a
                      where a.job_id = p_job_id and a.attempt < p_attempt
                        and (a.outcome = 'snoozed' or a.abandon_reason = 'handed_back'));
    end if;

    update jobs j
       set status = case when j.attempts < j.max_attempts then 'failed' else 'dead' end,
           run_at = case when j.attempts < j.max_attempts
                         then now() + backoff_delay(j.attempts - v_spared, coalesce(p_base_ms, v_type.backoff_base_ms),
                                                    coalesce(p_max_jitter_ms, v_type.backoff_max_jitter_ms),
                                                    coalesce(p_max_delay_ms, v_type.backoff_max_delay_ms))
                         else j.run_at end,
           finished_at = case when j.attempts < j.max_attempts then null else greatest(now(), j.started_at) end,
           last_error = v_error,
           locked_by = null,
           lease_expires_at = null
     where j.id = p_job_id and j.locked_by is not null and j.attempts = p_attempt
    returning j.* into v_job;
    if not found then
        perform raise_job_not_held(p_job_id, p_attempt);  -- its callers checked: not reached
    end if;
    update job_attempts a
       set outcome = 'timed_out', error = v_error, finished_at = greatest(now(), a.started_at)
     where a.job_id = p_job_id and a.attempt = p_attempt;

    if v_job.status = 'dead' then
        perform notify_watchers(p_job_id);  -- watch_job
        -- Its dependents and batch: only a job in a workflow (every parent is) or a batch has them.
        if v_job.workflow_id is not null or v_job.batch_id is not null then
            perform settle_jobs(array[p_job_id]);
        end if;
    else
        perform notify_due(v_job.queue, v_job.run_at);  -- a worker wakes when it comes due
    end if;
    return v_job;
end;
$$;
