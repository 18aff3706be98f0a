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
--   * So are the reads the API and the console make (list_queues, list_worker_status, list_task_types,
--     count_jobs_by_status, get_job_result, queue_throughput): each is the statement its wrapper in pgqw.db runs;
--     and finished_types, which queue_throughput and the prunes read the types with.
--   * next_run_at only reads, but is security definer: workers read no table, and it answers with
--     times alone (when the next jobs of given queues and types come due).
--   * list_schedules only reads, but is security definer for the same reason: a worker's scheduler reads
--     the schedules through it. check_schedule_cron only computes (security invoker, reads nothing).
--   * waits_settled only computes (security invoker, reads no table).
--   * raise_job_not_held, raise_unknown_queue, find_lease_attempt, notify_watchers, notify_due, time_out_attempt,
--     settle_jobs, judge_blocked, serial_turn, enqueue_jobs_into, check_bulk_filter, has_waiters and
--     prune_finished are security invoker and internal: only the owner's functions call them, and no role
--     may execute them.
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
        'list_queues, list_worker_status, list_task_types, count_jobs_by_status, get_job_result, queue_throughput, '
        'set_queue_rate, cancel_job, mark_cancelled, next_run_at, '
        'check_schedule_cron, set_schedule, pause_schedule, resume_schedule, delete_schedule, register_schedules, '
        'enqueue_schedule_slots, list_schedules, watch_job, unwatch_job, raise_unknown_queue, prune_expired_jobs, '
        'cron_matches, schedule_times, find_lease_attempt, notify_watchers, notify_due, mark_timed_out, time_out_attempt, '
        'snooze_job, settle_jobs, judge_blocked, serial_turn, enqueue_jobs_into, check_bulk_filter, enqueue_batch, batch_status, '
        'workflow_jobs, parent_results, set_queue_key_limit, retry_dead_jobs, cancel_jobs, wait_for_jobs, waits_settled, '
        'has_waiters, prune_finished, finished_types';
    -- migrations is pgqw migrate's ledger; a database installed with psql alone has none.
    v_tables constant text := 'jobs, job_attempts, job_results, queue_settings, task_types, '
        'task_type_settings, workers, queues, job_cancel_requests, schedules, job_waiters, job_isolation, '
        'job_dependencies, batches, queue_waiters'
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
            -- The API: POST /api/jobs, POST .../retry, GET /metrics; the job, attempt and result reads.
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
            ('pgqw_api', 'select on table jobs, job_attempts, job_results, task_types, task_type_settings, '
                         'workers'),
            -- Workflows, batches, limits per key and bulk actions (/api/workflows, /api/batches, /key-limit,
            -- /api/jobs/bulk/*).
            ('pgqw_api', 'execute on function enqueue_batch, batch_status, workflow_jobs, parent_results, '
                         'set_queue_key_limit, retry_dead_jobs, cancel_jobs'),
            -- Waiting for a job to end (pgqw.client.wait): only then is its end notified.
            ('pgqw_api', 'execute on function watch_job, unwatch_job'),
            -- GET /api/queues, /api/workers, /api/task-types, /api/throughput, the jobs per status, a job's result.
            ('pgqw_api', 'execute on function list_queues, list_worker_status, list_task_types, count_jobs_by_status, '
                         'get_job_result, queue_throughput, finished_types'),
            -- Workers: the functions of their work, and no table. Every answer they need comes from the
            -- functions (the lease a claim granted, already_recorded after a lost reply).
            ('pgqw_worker', 'execute on function claim_job, claim_jobs, heartbeat, mark_succeeded, '
                            'mark_jobs_succeeded, mark_failed, release_job, sweep_stuck, register_task_types, '
                            'register_worker, stop_worker'),
            -- Retention as the database's settings allow (prune_jobs, any age, is pgqw_admin's).
            ('pgqw_worker', 'execute on function prune_expired_jobs'),
            -- Ending an attempt whose job was asked to cancel (heartbeat says so).
            ('pgqw_worker', 'execute on function mark_cancelled'),
            -- Ending an attempt still running at its deadline (the worker's own timer; the sweep otherwise).
            ('pgqw_worker', 'execute on function mark_timed_out'),
            -- Putting a job off without spending its attempt (a handler's Snooze).
            ('pgqw_worker', 'execute on function snooze_job'),
            -- The scheduler: the schedules' timing each round (no payloads), then each due slot (only the
            -- cron's own slots). Defining schedules is the deploy's (register_schedules: pgqw_admin).
            ('pgqw_worker', 'execute on function schedule_times, enqueue_schedule_slots'),
            -- A handler's ctx.parent_results(): the results of the jobs it waited for.
            ('pgqw_worker', 'execute on function parent_results'),
            -- When the next delayed job comes due (after a missed pgqw_jobs_at notification).
            ('pgqw_worker', 'execute on function next_run_at'),
            -- Waiting for a notification once a claim found nothing (producers notify only then).
            ('pgqw_worker', 'execute on function wait_for_jobs, waits_settled'),
            -- Operators (pgqw report, pgqw check-idempotency, psql): every function but the internal ones
            -- (raise_job_not_held, raise_unknown_queue, find_lease_attempt, notify_watchers, notify_due, time_out_attempt,
            -- settle_jobs, judge_blocked, serial_turn, enqueue_jobs_into, check_bulk_filter, has_waiters,
            -- prune_finished)
            -- and the owner's
            -- clock (claim_jobs_at,
            -- sweep_stuck_at), every table read,
            -- the settings changed. Still no direct write to jobs
            -- or job_attempts: a repair goes through the functions too.
            ('pgqw_admin', 'execute on function backoff_delay, claim_job, claim_jobs, enqueue_job, '
                           'enqueue_jobs, heartbeat, mark_failed, mark_jobs_succeeded, mark_succeeded, '
                           'queue_stats, register_task_types, register_worker, release_job, report_concurrency, '
                           'report_double_runs, report_latest_jobs, report_timeline, retry_dead, stop_worker, '
                           'sweep_stuck, prune_jobs, prune_expired_jobs'),
            ('pgqw_admin', 'execute on function pause_queue, resume_queue, set_queue_limit, set_queue_rate'),
            ('pgqw_admin', 'execute on function cancel_job, mark_cancelled, mark_timed_out'),
            ('pgqw_admin', 'execute on function snooze_job'),
            ('pgqw_admin', 'execute on function check_schedule_cron, set_schedule, pause_schedule, resume_schedule, '
                           'delete_schedule, register_schedules, enqueue_schedule_slots, list_schedules, '
                           'schedule_times, cron_matches'),
            ('pgqw_admin', 'execute on function next_run_at, wait_for_jobs, waits_settled'),
            ('pgqw_admin', 'execute on function enqueue_batch, batch_status, workflow_jobs, parent_results, '
                           'set_queue_key_limit, retry_dead_jobs, cancel_jobs'),
            ('pgqw_admin', 'execute on function watch_job, unwatch_job'),
            ('pgqw_admin', 'execute on function list_queues, list_worker_status, list_task_types, '
                           'count_jobs_by_status, get_job_result, queue_throughput, finished_types'),
            ('pgqw_admin', format('select on table %s', v_tables)),
            -- A DBA's settings: queue_settings, and the plain (not code_*) columns of a task type.
            ('pgqw_admin', 'update on table queue_settings'),
            ('pgqw_admin', 'update (queue, priority, max_attempts, backoff_base_ms, backoff_max_delay_ms, '
                           'backoff_max_jitter_ms, lease_ms, timeout_ms) on table task_types'),
            ('pgqw_admin', 'update (max_snoozes) on table task_types')
        ) as g(role, privilege)
        where to_regrole(g.role) is not null
    loop
        execute format('grant %s to %I', v_grant.privilege, v_grant.role);
    end loop;
end
$$;
