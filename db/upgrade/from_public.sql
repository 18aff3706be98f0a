-- from_public: moves an install of an earlier release, which kept every object in public with its ledger
-- in public.schema_migrations, into the queue's schema (the session's current_schema(), which `pgqw migrate`
-- has just made). Every table keeps its rows, its indexes, constraints and grants: ALTER … SET SCHEMA changes
-- only where an object is named. Run by `pgqw migrate` in the transaction that then applies the new
-- migrations and re-applies the functions (whose files replace the moved ones), so no session ever sees
-- the queue half moved. Only objects that release made are moved, each by its name; a function only when
-- the owner of public.jobs owns it, so an application's own objects in public stay where they are.
-- Raises QM409 while a job is processing under a lease that has not run out: its worker would report to
-- functions that are no longer in public.
do $$
declare
    v_target constant text := current_schema();
    v_held integer;
    v_owner oid := (select c.relowner from pg_class c where c.oid = 'public.jobs'::regclass);
    v_name text;
    v_fn regprocedure;
begin
    -- The rows every worker's session could still change: locked for the rest of the transaction.
    lock table public.jobs in share row exclusive mode;
    select count(*) into v_held from public.jobs where status = 'processing' and lease_expires_at > now();
    if v_held > 0 then
        raise exception using errcode = 'QM409',
            message = format('cannot move the queue from public into %s while workers hold leases: %s job(s) are '
                             'processing', v_target, v_held),
            hint = 'stop the workers (a stopping worker hands its jobs back) or wait for their leases to run out, '
                   'then run pgqw migrate again; deploy the new release''s workers after it';
    end if;

    foreach v_name in array array['queue_settings', 'jobs', 'job_attempts', 'job_results', 'task_types', 'workers',
                                  'queues', 'job_cancel_requests', 'schedules', 'job_waiters'] loop
        if to_regclass('public.' || v_name) is not null then
            execute format('alter table public.%I set schema %I', v_name, v_target);
        end if;
    end loop;
    foreach v_name in array array['task_type_settings', 'flyers'] loop
        if to_regclass('public.' || v_name) is not null then
            execute format('alter view public.%I set schema %I', v_name, v_target);
        end if;
    end loop;
    foreach v_name in array array['job_type', 'job_queue', 'job_status', 'job_payload', 'job_idempotency_key',
                                  'job_worker_id', 'job_max_attempts', 'attempt_number', 'attempt_outcome'] loop
        if to_regtype('public.' || v_name) is not null then
            execute format('alter domain public.%I set schema %I', v_name, v_target);
        end if;
    end loop;
    if exists (select 1 from pg_statistic_ext s
                where s.stxname = 'jobs_queue_status_stats' and s.stxnamespace = 'public'::regnamespace) then
        execute format('alter statistics public.jobs_queue_status_stats set schema %I', v_target);
    end if;
    for v_fn in
        select p.oid::regprocedure
          from pg_proc p
         where p.pronamespace = 'public'::regnamespace
           and p.proowner = v_owner
           and p.proname = any (array[
               'backoff_delay', 'cancel_job', 'check_schedule_cron', 'claim_job', 'claim_jobs', 'claim_jobs_at',
               'delete_schedule', 'enqueue_job', 'enqueue_jobs', 'enqueue_schedule_slots', 'heartbeat',
               'list_schedules', 'mark_cancelled', 'mark_failed', 'mark_jobs_succeeded', 'mark_succeeded',
               'next_run_at', 'pause_queue', 'pause_schedule', 'prune_jobs', 'queue_stats', 'raise_job_not_held',
               'register_schedules', 'register_task_types', 'register_worker', 'release_job', 'report_concurrency',
               'report_double_runs', 'report_latest_jobs', 'report_timeline', 'resume_queue', 'resume_schedule',
               'retry_dead', 'set_queue_limit', 'set_queue_rate', 'set_schedule', 'stop_worker', 'sweep_stuck',
               'sweep_stuck_at', 'unwatch_job', 'watch_job', 'check_job_row', 'check_attempt_row'])
    loop
        execute format('alter function %s set schema %I', v_fn, v_target);
    end loop;

    -- The ledger, under its name in the schema; what it recorded stays recorded.
    execute format('alter table public.schema_migrations set schema %I', v_target);
    alter table schema_migrations rename constraint schema_migrations_pkey to migrations_pkey;
    alter table schema_migrations rename to migrations;
end
$$;
