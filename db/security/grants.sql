-- grants: who may do what in this database. Re-applied by every `pgqw migrate` in the transaction that
-- re-applies the functions, so a function is never callable by PUBLIC, not even for a moment.
-- Run as the role that owns the queue's tables and functions (the role that ran the migrations), with the
-- queue's schema first in search_path (as migrate runs every file): current_schema() is that schema.
--
-- What is true of every function in db/functions, said here once (each file's header gives only what
-- it changes, what it returns and the SQLSTATEs it raises):
--   * A function that writes to the queue's tables (every one but those named in the next two points)
--     is security definer: it runs as the queue's owner, so a caller needs EXECUTE on it and no
--     privilege on the tables, and every change goes through the function's checks.
--   * A function that only reads or computes (backoff_delay, queue_stats, the report_* functions) is
--     security invoker: it runs with the caller's rights, so the caller also needs SELECT on what it
--     reads (granted below); it shows nothing the caller could not read anyway.
--   * next_run_at only reads, but is security definer: workers read no table, and it answers with
--     times alone (when the next jobs of given queues and types come due).
--   * list_schedules only reads, but is security definer for the same reason: a worker's scheduler reads
--     the schedules through it. check_schedule_cron only computes (security invoker, reads nothing).
--   * raise_job_not_held and raise_unknown_queue are security invoker and internal: only the owner's functions call it, and no
--     role may execute it.
--   * claim_jobs_at and sweep_stuck_at take the time as an argument (tests, repairs): only the owner
--     may execute them. Every role's claim and sweep use the server's clock (claim_jobs, sweep_stuck).
--   * A claimed attempt is spoken for by its lease token, returned by the claim to its caller alone;
--     job_attempts keeps only its SHA-256. mark_*, release_job and heartbeat act only for the token's
--     attempt, so a session can finish, fail, hand back or extend only what its own claims hold.
--   * Every function pins search_path to the queue's schema, then pg_temp (`set search_path from current`:
--     the search_path migrate runs the files with), so a caller's own objects cannot stand in for the
--     queue's. Only the owner may create objects in the schema; the roles get USAGE on it.
--   * Who may execute which function is the list below, and nothing else: PUBLIC may execute none.
--
-- Nobody but that owner may insert, update, delete or truncate jobs and job_attempts: the roles change
-- them only through the security definer functions, which make every transition and check it.
-- PUBLIC (every role on the server) gets nothing. Each of the three roles first loses every privilege
-- on the queue's tables and functions, then gets the list below, so the list is the whole truth: a
-- line removed here is a privilege taken away by the next migrate. A role that does not exist is
-- skipped with a notice (make it, or run `pgqw migrate` without --no-roles, then migrate again).
do $$
declare
    -- Every function in db/functions, one name each (none is overloaded).
    v_functions constant text := 'backoff_delay, claim_job, claim_jobs, claim_jobs_at, enqueue_job, enqueue_jobs, heartbeat, '
        'mark_failed, mark_jobs_succeeded, mark_succeeded, prune_jobs, queue_stats, raise_job_not_held, release_job, '
        'register_task_types, register_worker, report_concurrency, report_double_runs, report_latest_jobs, '
        'report_timeline, retry_dead, stop_worker, sweep_stuck, sweep_stuck_at, pause_queue, resume_queue, set_queue_limit, '
        'set_queue_rate, cancel_job, mark_cancelled, next_run_at, '
        'check_schedule_cron, set_schedule, pause_schedule, resume_schedule, delete_schedule, register_schedules, '
        'enqueue_schedule_slots, list_schedules, watch_job, unwatch_job, raise_unknown_queue, prune_expired_jobs, '
        'cron_matches, schedule_times';
    -- migrations is pgqw migrate's ledger; a database installed with psql alone has none.
    v_tables constant text := 'jobs, job_attempts, job_results, flyers, queue_settings, task_types, '
        'task_type_settings, workers, queues, job_cancel_requests, schedules, job_waiters, job_isolation'
        || case when to_regclass('migrations') is null then '' else ', migrations' end;
    v_schema constant text := current_schema();
    v_role text;
    v_grant record;
begin
    execute format('revoke all on schema %I from public', v_schema);
    execute format('revoke all on table %s from public', v_tables);
    execute format('revoke all on function %s from public', v_functions);

    foreach v_role in array array['pgqw_api', 'pgqw_worker', 'pgqw_admin'] loop
        if to_regrole(v_role) is null then
            raise notice 'role % does not exist: its grants are skipped', v_role;
            continue;
        end if;
        execute format('revoke all on schema %I from %I', v_schema, v_role);
        execute format('revoke all on table %s from %I', v_tables, v_role);
        execute format('revoke all on function %s from %I', v_functions, v_role);
        -- Each role may name what is in the schema (and nothing more: what it may do is below).
        execute format('grant usage on schema %I to %I', v_schema, v_role);
    end loop;

    for v_grant in
        select g.role, g.privilege from (values
            -- The API: POST /api/jobs, POST .../retry, GET /metrics; the job, attempt and flyer reads.
            ('pgqw_api', 'execute on function enqueue_job, enqueue_jobs, retry_dead, queue_stats'),
            -- GET /api/queues, POST /api/queues/{name}/pause, /resume, /limit, /rate.
            ('pgqw_api', 'execute on function pause_queue, resume_queue, set_queue_limit, set_queue_rate'),
            ('pgqw_api', 'select on table queues'),
            -- POST /api/jobs/{id}/cancel, and whether a running job was asked to stop.
            ('pgqw_api', 'execute on function cancel_job'),
            ('pgqw_api', 'select on table job_cancel_requests'),
            -- GET /api/schedules, POST /api/schedules/{name}/pause, /resume.
            ('pgqw_api', 'execute on function pause_schedule, resume_schedule, list_schedules'),
            ('pgqw_api', 'select on table schedules'),
            ('pgqw_api', 'select on table jobs, job_attempts, job_results, flyers, task_types, task_type_settings, '
                         'workers'),
            -- Waiting for a job to end (pgqw.client.wait): only then is its end notified.
            ('pgqw_api', 'execute on function watch_job, unwatch_job'),
            -- Workers: the functions of their work, and no table. Every answer they need comes from the
            -- functions (the lease a claim granted, already_recorded after a lost reply).
            ('pgqw_worker', 'execute on function claim_job, claim_jobs, heartbeat, mark_succeeded, '
                            'mark_jobs_succeeded, mark_failed, release_job, sweep_stuck, register_task_types, '
                            'register_worker, stop_worker'),
            -- Retention as the database's settings allow (prune_jobs, any age, is pgqw_admin's).
            ('pgqw_worker', 'execute on function prune_expired_jobs'),
            -- Ending an attempt whose job was asked to cancel (heartbeat says so).
            ('pgqw_worker', 'execute on function mark_cancelled'),
            -- The scheduler: the schedules' timing each round (no payloads), then each due slot (only the
            -- cron's own slots). Defining schedules is the deploy's (register_schedules: pgqw_admin).
            ('pgqw_worker', 'execute on function schedule_times, enqueue_schedule_slots'),
            -- When the next delayed job comes due (after a missed pgqw_jobs_at notification).
            ('pgqw_worker', 'execute on function next_run_at'),
            -- Operators (pgqw report, pgqw check-idempotency, psql): every function but the internal
            -- raise_job_not_held and raise_unknown_queue and the owner's clock (claim_jobs_at,
            -- sweep_stuck_at), every table read,
            -- the settings changed. Still no direct write to jobs
            -- or job_attempts: a repair goes through the functions too.
            ('pgqw_admin', 'execute on function backoff_delay, claim_job, claim_jobs, enqueue_job, '
                           'enqueue_jobs, heartbeat, mark_failed, mark_jobs_succeeded, mark_succeeded, '
                           'queue_stats, register_task_types, register_worker, release_job, report_concurrency, '
                           'report_double_runs, report_latest_jobs, report_timeline, retry_dead, stop_worker, '
                           'sweep_stuck, prune_jobs, prune_expired_jobs'),
            ('pgqw_admin', 'execute on function pause_queue, resume_queue, set_queue_limit, set_queue_rate'),
            ('pgqw_admin', 'execute on function cancel_job, mark_cancelled'),
            ('pgqw_admin', 'execute on function check_schedule_cron, set_schedule, pause_schedule, resume_schedule, '
                           'delete_schedule, register_schedules, enqueue_schedule_slots, list_schedules, '
                           'schedule_times, cron_matches'),
            ('pgqw_admin', 'execute on function next_run_at'),
            ('pgqw_admin', 'execute on function watch_job, unwatch_job'),
            ('pgqw_admin', format('select on table %s', v_tables)),
            -- A DBA's settings: queue_settings, and the plain (not code_*) columns of a task type.
            ('pgqw_admin', 'update on table queue_settings'),
            ('pgqw_admin', 'update (queue, priority, max_attempts, backoff_base_ms, backoff_max_delay_ms, '
                           'backoff_max_jitter_ms, lease_ms) on table task_types')
        ) as g(role, privilege)
        where to_regrole(g.role) is not null
    loop
        execute format('grant %s to %I', v_grant.privilege, v_grant.role);
    end loop;
end
$$;
