-- settle_jobs: what follows the end of the jobs p_ids, each just moved to a final status in this transaction.
-- Their blocked dependents (job_dependencies): one whose every parent has released it (succeeded, or ended
-- at all for a run_anyway dependency) → pending (notifies pgqw_jobs, or pgqw_jobs_at when its run_at is
-- ahead); one with a parent cancelled or expired (not run_anyway) → cancelled, last_error 'parent <id> was
-- cancelled' (or expired), and its own dependents are settled in turn. A dead parent releases nothing: its
-- dependents stay blocked until it is retried and succeeds, or a person cancels it. Their batches: once every
-- job of a batch is final, its callback is enqueued (once: batches.callback_job_id) and its finished_at set.
-- Each dependent is judged by judge_blocked (its row locked before its parents are read), and each batch's
-- row is locked before its jobs are counted, in a statement of its own: two jobs of a batch ending at once in
-- two transactions take turns, and the second sees the first's end. A callback that cannot be enqueued (its
-- type no longer registered) leaves its error in batches.callback_error; the job's end is not refused. Called by every function that ends a job.
-- Only jobs in a workflow (every parent is: enqueuing a dependent puts its parents in one) or a batch are looked at;
-- a caller that has the job's row calls this only for such a job. Raises nothing of its own. Internal: security
-- invoker; no role may execute it.
create or replace function settle_jobs(
    p_ids  uuid[]
) returns void
language plpgsql
set search_path from current
as $$
declare
    v_wave uuid[];                   -- the jobs whose dependents are settled next
    v_batches uuid[];                -- the batches of the jobs ended
    v_cancelled uuid[];
    v_batch record;
    v_counts jsonb;
    v_callback enqueued_job;
begin
    if p_ids is null or cardinality(p_ids) = 0 then
        return;
    end if;
    -- Only a job in a workflow can have dependents (enqueuing a dependent puts each parent in one), and only
    -- a job of a batch can end one.
    select coalesce(array_agg(j.id) filter (where j.workflow_id is not null), '{}'),
           coalesce(array_agg(distinct j.batch_id) filter (where j.batch_id is not null), '{}')
      into v_wave, v_batches
      from jobs j where j.id = any (p_ids);
    while cardinality(v_wave) > 0
          and exists (select 1 from job_dependencies d where d.parent_id = any (v_wave)) loop
        v_cancelled := judge_blocked(array(
            select distinct d.job_id from job_dependencies d where d.parent_id = any (v_wave)));
        if cardinality(v_cancelled) > 0 then
            v_batches := v_batches || array(select distinct j.batch_id from jobs j
                                             where j.id = any (v_cancelled) and j.batch_id is not null);
        end if;
        v_wave := v_cancelled;
    end loop;

    -- Each batch of a job ended, once every one of its jobs is final.
    for v_batch in
        select distinct b.id from unnest(v_batches) as b(id) order by 1
    loop
        perform 1 from batches b where b.id = v_batch.id and b.finished_at is null for update;
        continue when not found;
        -- A new statement after the lock: the ends committed by the batch's other jobs are seen.
        continue when exists (select 1 from jobs j where j.batch_id = v_batch.id and j.finished_at is null);
        select jsonb_build_object(
                   'id', v_batch.id, 'total', count(*),
                   'succeeded', count(*) filter (where j.status = 'succeeded'),
                   'dead', count(*) filter (where j.status = 'dead'),
                   'cancelled', count(*) filter (where j.status = 'cancelled'),
                   'expired', count(*) filter (where j.status = 'expired'))
          into v_counts
          from jobs j where j.batch_id = v_batch.id;
        v_callback := null;
        begin
        select e.* into v_callback
          from batches b,
               enqueue_job(p_type => b.callback ->> 'type',
                           p_payload => coalesce(b.callback -> 'payload', '{}'::jsonb) || jsonb_build_object('batch', v_counts),
                           p_idempotency_key => 'batch:' || b.id,
                           p_queue => b.callback ->> 'queue',
                           p_priority => (b.callback ->> 'priority')::integer,
                           p_max_attempts => (b.callback ->> 'max_attempts')::integer) e
         where b.id = v_batch.id and b.callback is not null;
        exception when others then
            -- The callback could not be enqueued (its type unregistered since, a payload grown too large):
            -- the last job's own end is not refused for it; the batch keeps the error for a person.
            update batches b set callback_error = format('%s: %s', sqlstate, sqlerrm) where b.id = v_batch.id;
        end;
        update batches b set finished_at = now(), callback_job_id = (v_callback.job).id where b.id = v_batch.id;
    end loop;
end;
$$;
