"""Writes docs/sql.md: the queue used from psql alone, with the real output of a real run.

    .venv/bin/python docs/tools/make_sql_doc.py [DSN of a server where databases may be created]

Default DSN: postgresql://postgres@127.0.0.1:5432/postgres. A scratch database is created,
the queue is installed into it with psql alone (migrations, then function files), every step
below is run in one psql session, and the scratch database is dropped.
"""
from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from pgqw.migrate import function_files, grants_file, migration_files, roles_file  # noqa: E402

STEPS: list[tuple[str, str]] = [
    ("Install with psql alone",
     "Everything the queue makes lives in one schema, `pgqw`: make it, put it first on the session's "
     "`search_path` (then `pg_temp`), and run every migration in order, then every function file, then the "
     "roles and their grants; each function pins that `search_path` (`set search_path from current`). Function "
     "files may call functions that come later in the alphabet, so they are loaded with `check_function_bodies` "
     "off (as `pg_dump` does). `db/security/roles.sql` makes the three roles when missing (it needs CREATEROLE; "
     "leave it out where a managed database forbids it and make the roles by hand); `db/security/grants.sql` "
     "grants to whichever of them exist. `pgqw migrate` does the same (`--no-roles` leaves out `roles.sql`; "
     "`PGQW_SCHEMA` names another schema), applies the functions and the grants in one transaction, records "
     "what it applied in `pgqw.migrations`, gives each role a `search_path` that starts with the schema in "
     "this database, and registers the demo's task types (`--tasks` names yours).\n\n"
     "```sh\npsql -v ON_ERROR_STOP=1 -c 'create schema pgqw' -c 'set search_path = pgqw, pg_temp' \\\n"
     "     -f db/migrations/0001_core.sql ... \\\n"
     "     -c 'set check_function_bodies = off' -f db/functions/backoff_delay.sql ... \\\n"
     "     -f db/security/roles.sql -f db/security/grants.sql\n```\n\n"
     "A session names the functions `pgqw.claim_job(...)`, or puts the schema on its `search_path`, as this "
     "one does:\n\n@@SQL@@\n"
     "set search_path = pgqw, public;\n"),
    ("Register a task type: jobs of a type nobody registered are refused",
     "A worker registers the types it runs at its start; `pgqw migrate --tasks` and `pgqw tasks register` do it "
     "at deploy time, so jobs are accepted before any worker has run. Until then, `enqueue_job` refuses the type "
     "(`QT422`), unless a DBA sets `queue_settings.accept_unregistered_types`.\n\n@@SQL@@\n"
     "\\set VERBOSITY verbose\n"
     "select * from enqueue_job('listing_flyer', '{\"title\": \"Too soon\"}', 'psql-too-soon');\n"
     "\\set VERBOSITY default\n"
     "select name from register_task_types('[{\"name\": \"listing_flyer\", \"payload_schema\": {\"type\": \"object\"}}]');\n"),
    ("Settings a DBA can change without a deploy",
     "One row. Every function falls back to it when its own argument is null; a worker started with "
     "`MAX_ATTEMPTS`, `RETRY_BASE_DELAY_MS`, `RETRY_MAX_JITTER_MS`, `RETRY_MAX_DELAY_MS` or "
     "`STUCK_JOB_TIMEOUT_MS` set passes its value as the argument instead.\n\n@@SQL@@\n"
     "select * from queue_settings;\n"),
    ("Enqueue two jobs",
     "@@SQL@@\n"
     "select (e.job).id as job_a, (e.job).status, e.created from enqueue_job('listing_flyer',\n"
     "  '{\"title\": \"3-bedroom apartment in Yaba\", \"priceMinor\": 270000000, \"currency\": \"NGN\",\n"
     "    \"address\": \"12 Herbert Macaulay Way, Yaba, Lagos\", \"bedrooms\": 3}', 'psql-demo-a') e \\gset\n"
     "select :'job_a' as job_a;\n"
     "\\set studio '{\"title\": \"Studio in Lekki\", \"priceMinor\": 150000000, \"currency\": \"NGN\", \"address\": \"4 Admiralty Way, Lekki, Lagos\", \"bedrooms\": 1}'\n"
     "select (e.job).id as job_b, (e.job).status, e.created from enqueue_job('listing_flyer', :'studio', 'psql-demo-b',\n"
     "  p_max_attempts => 3) e \\gset\n"
     "select :'job_b' as job_b;\n"
     "-- The same key again returns the same job, created = false: the row whole, then its columns.\n"
     "select * from enqueue_job('listing_flyer', :'studio', 'psql-demo-b');\n"
     "select (e.job).*, e.created from enqueue_job('listing_flyer', :'studio', 'psql-demo-b') e;\n"),
    ("Two workers claim: different jobs",
     "`claim_job` picks with `for update skip locked`, so two sessions never get the same row and never wait "
     "for each other. Each claim returns a lease token, to its caller alone: every later call for that "
     "attempt presents it (`\\gset` keeps it in a psql variable here).\n\n@@SQL@@\n"
     "select (c.job).id, (c.job).status, (c.job).attempts, (c.job).locked_by,\n"
     "       (c.job).lease_expires_at - (c.job).started_at as lease, c.lease_token as token_a\n"
     "  from claim_job('w1') c \\gset\n"
     "select :'token_a' is not null as got_a_token;\n"
     "select (c.job).id, (c.job).status, (c.job).attempts, (c.job).locked_by, c.lease_token as token_b\n"
     "  from claim_job('w2') c \\gset\n"
     "select * from claim_job('w3');  -- nothing is ready: no row\n"),
    ("Finish one",
     "@@SQL@@\n"
     "select (m.job).id, (m.job).status, (m.job).finished_at is not null as finished, m.already_recorded\n"
     "  from mark_succeeded(:'job_a', :'token_a', 'application/json', '{\"pages\": 1}') m;\n"
     "select * from job_results where job_id = :'job_a';\n"),
    ("Fail the other until it is dead",
     "Backoff arguments are given here as 0 so the demo needs no waiting; left out, they come from "
     "`queue_settings` (2 s doubling, plus up to 1 s of jitter).\n\n@@SQL@@\n"
     "select (m.job).status, (m.job).attempts, (m.job).max_attempts, (m.job).run_at - now() as wait\n"
     "  from mark_failed(:'job_b', :'token_b', 'printer on fire', p_base_ms => 0, p_max_jitter_ms => 0) m;\n"
     "select (c.job).id, (c.job).attempts, c.lease_token as token_b from claim_job('w1') c \\gset\n"
     "select (m.job).status, (m.job).attempts\n"
     "  from mark_failed(:'job_b', :'token_b', 'printer on fire', p_base_ms => 0, p_max_jitter_ms => 0) m;\n"
     "select (c.job).id, (c.job).attempts, c.lease_token as token_b from claim_job('w2') c \\gset\n"
     "select (m.job).status, (m.job).attempts, (m.job).max_attempts, (m.job).last_error\n"
     "  from mark_failed(:'job_b', :'token_b', 'printer on fire') m;\n"
     "select * from job_attempts where job_id = :'job_b' order by attempt;\n"),
    ("Retry the dead job: attempt numbers continue",
     "@@SQL@@\n"
     "select status, attempts, max_attempts from retry_dead(:'job_b');\n"
     "select (c.job).id, (c.job).attempts, (c.job).locked_by, c.lease_token as token_b from claim_job('w1') c \\gset\n"),
    ("A worker dies: the sweep recovers its job",
     "Here the lease is 1 ms so it has run out by the time the sweep looks; a live worker extends its lease "
     "with `heartbeat`.\n\n@@SQL@@\n"
     "select (e.job).id as job_c from enqueue_job('listing_flyer', :'studio', 'psql-demo-c') e \\gset\n"
     "select (c.job).id, (c.job).attempts, (c.job).locked_by, c.lease_token as token_c\n"
     "  from claim_job('w-crash', p_lease_ms => 1) c \\gset\n"
     "select pg_sleep(0.01);\n"
     "select * from heartbeat(array[:'job_b']::uuid[], array[:'token_b']::uuid[]);\n"
     "select * from sweep_stuck();\n"
     "select status, last_error from jobs where id = :'job_c';\n"
     "select attempt, worker_id, outcome, abandon_reason, error from job_attempts where job_id = :'job_c';\n"),
    ("Bad input: a stable SQLSTATE, nothing changed",
     "`\\set VERBOSITY verbose` shows the SQLSTATE. Every code is listed in [errors.md](errors.md).\n\n@@SQL@@\n"
     "\\set VERBOSITY verbose\n"
     "select retry_dead(:'job_a');\n"
     "-- The crashed worker's token no longer holds its job: its late result is refused.\n"
     "select mark_succeeded(:'job_c', :'token_c');\n"
     "-- Nor does a token made up (or one of another job's attempts).\n"
     "select mark_succeeded(:'job_b', gen_random_uuid());\n"
     "select enqueue_job('listing_flyer', :'studio', 'psql-demo-a');\n"
     "-- The error's column names the argument (pgqw.errors.InvalidArgument.argument):\n"
     "select * from claim_job('');\n"
     "-- A queue nobody has named (no job, setting, worker, task type or schedule): a typo makes nothing.\n"
     "select * from pause_queue('nosuchqueue');\n"
     "select name, paused from pause_queue('nightly-exports', p_create => true);\n"
     "-- A success reported after a person asked the running job to cancel: refused with its own code, QK409;\n"
     "-- the worker then ends the attempt cancelled.\n"
     "select (c.job).status, c.cancel_requested_at is not null as asked from cancel_job(:'job_b') c;\n"
     "select mark_succeeded(:'job_b', :'token_b');\n"
     "select (m.job).status, m.already_recorded from mark_cancelled(:'job_b', :'token_b') m;\n"
     "\\set VERBOSITY default\n"),
    ("The backoff table",
     "`backoff_delay` is the formula `mark_failed` uses; with the jitter pinned at 0 and 1 it gives the "
     "bounds of each wait.\n\n@@SQL@@\n"
     "select n as after_attempt, backoff_delay(n, p_jitter => 0) as shortest, backoff_delay(n, p_jitter => 1) as longest\n"
     "  from generate_series(1, 8) n;\n"),
    ("Reports",
     "The CLI's `pgqw report` prints these same functions.\n\n@@SQL@@\n"
     "select * from queue_stats() where value > 0;\n"
     "select * from report_timeline(:'job_b');\n"
     "select * from report_concurrency('w');\n"
     "select * from report_double_runs('w');\n"),
    ("Roles: each may do its own work and nothing else",
     "Three login roles (`db/security/roles.sql`): `pgqw_api` for the API, `pgqw_worker` for workers, "
     "`pgqw_admin` for operators. PUBLIC may do nothing. The functions that change state are `security "
     "definer` (they run as the queue's owner, with `search_path` pinned to `pgqw, pg_temp`), so a role "
     "needs EXECUTE on a function and never a write privilege on `jobs` or `job_attempts`; the reports run "
     "with the caller's rights and read what its SELECT grants allow. Who may call what:\n\n@@SQL@@\n"
     "select p.proname as function, p.prosecdef as definer,\n"
     "       has_function_privilege('pgqw_api', p.oid, 'execute') as api,\n"
     "       has_function_privilege('pgqw_worker', p.oid, 'execute') as worker,\n"
     "       has_function_privilege('pgqw_admin', p.oid, 'execute') as admin\n"
     "  from pg_proc p where p.pronamespace = 'pgqw'::regnamespace order by 1;\n"
     "select r.rolname as role, c.relname as table,\n"
     "       string_agg(k.privilege, ', ' order by k.n) as privileges\n"
     "  from pg_roles r cross join pg_class c\n"
     "  cross join unnest(array['select', 'insert', 'update', 'delete', 'truncate']) with ordinality k(privilege, n)\n"
     " where r.rolname in ('pgqw_api', 'pgqw_worker', 'pgqw_admin')\n"
     "   and c.relnamespace = 'pgqw'::regnamespace and c.relkind = 'r'\n"
     "   and has_table_privilege(r.oid, c.oid, k.privilege)\n"
     " group by 1, 2 order by 1, 2;\n"
     "-- As the worker: its own functions work, a direct write or another role's function does not.\n"
     "set role pgqw_worker;\n"
     "select (c.job).id, (c.job).attempts, (c.job).locked_by from claim_job('w1') c;\n"
     "\\set VERBOSITY verbose\n"
     "update jobs set status = 'succeeded' where id = :'job_b';\n"
     "select * from sweep_stuck_at(now() + interval '1 day');\n"
     "select retry_dead(:'job_b');\n"
     "\\set VERBOSITY default\n"
     "reset role;\n"),
    ("Schedules: periodic jobs",
     "A schedule enqueues a job of its task type at each slot of a cron expression, read in UTC "
     "([schedules.md](schedules.md)). A worker registers the schedules its code defines when it starts "
     "(`register_schedules`); a DBA sets one with `set_schedule`, which checks the expression "
     "(`check_schedule_cron`) and the task type. Every worker's scheduler hands the due slots to "
     "`enqueue_schedule_slots`, which gives each slot one job, keyed `schedule:<name>@<slot>`. Here a "
     "stop of three days is staged by moving the schedule's start back, and the slots are passed by hand; "
     "with `catch_up => 'all'` each missed 03:00 gets its job (the default, `latest`, would enqueue only "
     "the last one).\n\n@@SQL@@\n"
     "select name from register_task_types('[{\"name\": \"nightly_report\", \"payload_schema\": {\"type\": \"object\"}}]');\n"
     "select name, task_type, cron, payload, catch_up, paused, source\n"
     "  from set_schedule('reports.nightly', 'nightly_report', '0 3 * * *', '{\"format\": \"pdf\"}', p_catch_up => 'all');\n"
     "\\set VERBOSITY verbose\n"
     "select * from set_schedule('reports.bad', 'nightly_report', '0 25 * * *');\n"
     "select * from set_schedule('reports.bad', 'no_such_type', '@daily');\n"
     "select * from pause_schedule('no-such-schedule');\n"
     "\\set VERBOSITY default\n"
     "update schedules set slots_after = now() - interval '3 days 1 hour' where name = 'reports.nightly';\n"
     "select slot, created from enqueue_schedule_slots('reports.nightly', array(\n"
     "  select s from generate_series(date_trunc('day', now()) - interval '3 days' + interval '3 hours', now(),\n"
     "                                interval '1 day') s));\n"
     "select idempotency_key, type, status from jobs where type = 'nightly_report' order by run_at;\n"
     "-- Another scheduler with the same slots: nothing left to do.\n"
     "select count(*) from enqueue_schedule_slots('reports.nightly', array(\n"
     "  select s from generate_series(date_trunc('day', now()) - interval '3 days' + interval '3 hours', now(),\n"
     "                                interval '1 day') s));\n"
     "select name, paused from pause_schedule('reports.nightly');\n"
     "select name, paused, slots_after > now() - interval '1 minute' as from_now_on from resume_schedule('reports.nightly');\n"
     "select name from delete_schedule('reports.nightly');\n"),
    ("Snooze: put a job off without spending its attempt",
     "A handler that cannot do its work yet raises `Snooze` ([tasks.md](tasks.md#snoozing)); its worker calls "
     "`snooze_job` with the lease token, and a time (`p_until`) or a delay (`p_delay_ms`, on the server's clock), "
     "exactly one. The attempt ends `snoozed`, the job is pending at that time with one more try "
     "(`max_attempts`), and `mark_failed`'s backoff counts only the attempts that were not snoozed. After "
     "`max_snoozes` snoozes (the task type's, else `queue_settings`', 100) the next one ends the job dead.\n\n@@SQL@@\n"
     "select (e.job).id as job_s from enqueue_job('listing_flyer', '{\"title\": \"Loft in Ikoyi\"}', 'psql-snooze',\n"
     "  p_queue => 'snoozing', p_max_attempts => 3) e \\gset\n"
     "select c.lease_token as token_s from claim_job('w4', array['snoozing']) c \\gset\n"
     "select (s.job).status, (s.job).attempts, (s.job).max_attempts, (s.job).run_at - now() as due_in, s.already_recorded\n"
     "  from snooze_job(:'job_s', :'token_s', p_delay_ms => 600000) s;\n"
     "select attempt, outcome, error from job_attempts where job_id = :'job_s';\n"
     "-- The same call again (its reply was lost): already recorded, nothing changed.\n"
     "select (s.job).status, (s.job).max_attempts, s.already_recorded from snooze_job(:'job_s', :'token_s', p_delay_ms => 600000) s;\n"
     "\\set VERBOSITY verbose\n"
     "select * from snooze_job(:'job_s', :'token_s', now() + interval '1 hour', 1000);\n"
     "\\set VERBOSITY default\n"),
    ("Timeouts: an attempt ends at its deadline",
     "A job's timeout is its own (`p_timeout_ms`), else its task type's as of the claim (`task_types.timeout_ms`, "
     "a DBA's, over the code's `code_timeout_ms` that `register_task_types` writes), else none. The claim gives "
     "the attempt its deadline (`job_attempts.deadline_at`, and `jobs.deadline_at`), and `heartbeat` never "
     "extends the lease past it. So an attempt still held at its deadline ends when its lease runs out there, "
     "whatever its worker does, frozen or not: the sweep ends it `timed_out`, a failure (retried after the "
     "backoff while tries are left, else dead). The worker ends it itself at the deadline with `mark_timed_out`, "
     "which refuses (`QS409`) before. `cancel_job` of a running job moves its deadline to now: the lease is "
     "extended no more, and the attempt ends cancelled within one lease. Here the sweep is asked as of two "
     "seconds from now, as a frozen worker's would run then.\n\n@@SQL@@\n"
     "update task_types set timeout_ms = 1500 where name = 'listing_flyer';  -- a DBA's, over the code's\n"
     "select name, timeout_ms from task_type_settings where name = 'listing_flyer';\n"
     "select (e.job).id as job_t from enqueue_job('listing_flyer', '{\"title\": \"Duplex in Surulere\"}', "
     "'psql-timeout',\n  p_queue => 'timeouts', p_max_attempts => 2, p_timeout_ms => 1000) e \\gset\n"
     "select (c.job).deadline_at - (c.job).started_at as timeout, (c.job).lease_expires_at = (c.job).deadline_at "
     "as lease_ends_there,\n       c.lease_token as token_t from claim_job('w5', array['timeouts'], p_lease_ms => 60000) c "
     "\\gset\n"
     "select :'timeout' as timeout, :'lease_ends_there' as lease_ends_there;\n"
     "-- A minute asked: the lease stays at the deadline.\n"
     "select lease_expires_at = (select deadline_at from jobs where id = :'job_t') as capped\n"
     "  from heartbeat(array[:'job_t']::uuid[], array[:'token_t']::uuid[], 60000);\n"
     "\\set VERBOSITY verbose\n"
     "select * from mark_timed_out(:'job_t', :'token_t');\n"
     "\\set VERBOSITY default\n"
     "select job_id = :'job_t' as this_job, attempt, worker_id, status from sweep_stuck_at(now() + interval '2 seconds');\n"
     "select status, attempts, max_attempts, last_error from jobs where id = :'job_t';\n"
     "select attempt, outcome, deadline_at - started_at as timeout from report_timeline(:'job_t');\n"
     "update task_types set timeout_ms = null where name = 'listing_flyer';\n"),
    ("Expiry and retention per task type",
     "A job not started by its `expires_at` (`p_expires_at`, or `p_expire_after_ms` from when it may start, else "
     "its type's `expire_after_ms`) is never claimed, and the sweep ends it `expired`, a final status: it cannot "
     "be cancelled or retried, and `prune_expired_jobs` deletes it with the dead and cancelled ones. Once an "
     "attempt has begun, expiry no longer applies. An expiry not later than now and than `run_at` is refused "
     "(`QV400`). A type's `retain_succeeded` and `retain_failed` (a DBA's, over the code's) replace "
     "`queue_settings`' two ages for its jobs. Here the claim and the sweep are asked as of a minute from now."
     "\n\n@@SQL@@\n"
     "select (e.job).id as job_x, (e.job).expires_at - (e.job).run_at as expires_after from enqueue_job("
     "'listing_flyer',\n  '{\"title\": \"Bungalow in Yaba\"}', 'psql-expiry', p_queue => 'expiry', "
     "p_expire_after_ms => 30000) e \\gset\n"
     "select :'expires_after' as expires_after;\n"
     "select count(*) as claimed from claim_jobs_at(now() + interval '1 minute', 'w6', 1, array['expiry']);\n"
     "-- The sweep ends it expired; its rows list only the leases it recovered.\n"
     "select count(*) filter (where job_id = :'job_x') as listed from sweep_stuck_at(now() + interval '1 minute');\n"
     "select status, last_error like 'expired at %' as says_when, finished_at is not null as finished "
     "from jobs where id = :'job_x';\n"
     "\\set VERBOSITY verbose\n"
     "select * from enqueue_job('listing_flyer', '{}', 'psql-expiry-2', p_expires_at => now() - interval '1 minute');\n"
     "\\set VERBOSITY default\n"
     "update task_types set retain_succeeded = interval '1 day' where name = 'listing_flyer';\n"
     "select name, expire_after_ms, retain_succeeded, retain_failed, max_snoozes from task_type_settings "
     "where name = 'listing_flyer';\n"
     "update task_types set retain_succeeded = null where name = 'listing_flyer';\n"),
]

HEAD = """# Using the queue from psql

Everything the queue does is a stored function in its own schema, `pgqw`, so a DBA can run it, inspect
it and repair it from `psql` with nothing else installed. This page is written by `docs/tools/make_sql_doc.py`, which installs
the queue into a scratch database with psql alone and runs each step below in one psql session; the
output is that run's, not typed by hand.

Functions, their arguments and the state change each makes:

| function | state change | raises |
|---|---|---|
| `enqueue_job(type, payload, idempotency_key, queue, priority, run_at, max_attempts, unique_for, timeout_ms, expires_at, expire_after_ms)` | → pending (unset queue, priority, max_attempts: the task type's, then the defaults; `timeout_ms`: the job's own timeout, else the task type's at each claim, else none; `expires_at`, or `expire_after_ms` from when it may start, else the type's `expire_after_ms`: not started by then, it ends expired); a type nobody registered is refused unless `queue_settings.accept_unregistered_types` | QV400, QT422, QV413, QI409 |
| `enqueue_jobs(jobs jsonb)` | → pending, many in one call | QV400, QT422, QV413, QI409 |
| `claim_job(worker_id, queues, lease_ms, task_types)` | pending/failed → processing (only `task_types` when given), with a deadline when the job or its type has a timeout (the lease ends there at the latest); returns the job and its `lease_token` | QV400 |
| `claim_jobs(worker_id, limit, queues, lease_ms, task_types)` | the same, up to `limit` jobs | QV400 |
| `heartbeat(job_ids, lease_tokens, lease_ms)` | extends the leases those tokens hold, never past the attempt's deadline; answers `cancel_requested` per job | QV400 |
| `mark_succeeded(job_id, lease_token, result_type, result_value, result_data)` | processing → succeeded, with its result in `job_results` | QV400, QN404, QL409, QK409 (asked to cancel) |
| `mark_jobs_succeeded(job_ids, lease_tokens, results)` | the same for many, JSON results | QV400 |
| `mark_failed(job_id, lease_token, error, retryable, base_ms, max_jitter_ms, max_delay_ms)` | processing → failed (backoff) or dead | QV400, QN404, QL409 |
| `release_job(job_id, lease_token, reason)` | processing → pending (handed back) | QV400, QN404, QL409 |
| `mark_timed_out(job_id, lease_token, base_ms, max_jitter_ms, max_delay_ms)` | processing → failed (backoff) or dead, the attempt `timed_out`, once its deadline has passed (asked to cancel: → cancelled) | QV400, QN404, QL409, QS409 (no deadline, or not passed) |
| `snooze_job(job_id, lease_token, until, delay_ms)` | processing → pending at `until` (or `delay_ms` from now), the attempt `snoozed` and not spent; past the job's `max_snoozes` → dead | QV400, QN404, QL409 |
| `sweep_stuck()` | expired processing → pending, or dead (the server's clock); a lease that ran to the attempt's deadline: → failed (backoff) or dead, the attempt `timed_out`; pending, never started, past its `expires_at` → expired | none |
| `claim_jobs_at(now, ...)`, `sweep_stuck_at(now)` | the same as of another time: the owner's only (tests, repairs) | QV400 |
| `retry_dead(job_id, extra_attempts)` | dead → pending | QV400, QN404, QS409 |
| `cancel_job(job_id)` | pending/failed → cancelled; processing: the cancel is requested (heartbeat answers it) and the attempt's deadline moved to now (its lease is extended no more) | QV400, QN404, QS409 (already finished) |
| `mark_cancelled(job_id, lease_token)` | processing → cancelled, once a cancel was requested (`mark_failed` and `release_job` of such a job, and the sweep, end it cancelled too) | QV400, QN404, QL409, QS409 |
| `watch_job(job_id)`, `unwatch_job(job_id)` | none to the job: this session waits for it to end, or no longer; the functions that end a job notify `pgqw_finished` only for a watched one (`LISTEN`, then `watch_job` twice, as `pgqw.client.wait` does: the second call waits out a completion under way) | QV400, QN404 |
| `register_task_types(types jsonb)` | upserts task types: schema and `code_*` defaults (never a DBA's columns) | QV400 |
| `register_worker(worker_id, task_types, queues, concurrency, hostname, pid, ttl_ms)`, `stop_worker(worker_id)` | a worker's presence | QV400 |
| `pause_queue(queue, create)`, `resume_queue(queue, create)` | claims skip a paused queue (enqueues still land in it); idempotent; returns the `queues` row (a resume wakes listening workers); a queue no job, setting, worker, task type or schedule has named is refused unless `create` | QV400, QU404 |
| `next_run_at(queues, task_types, limit)` | none (reads): the earliest distinct `run_at` times still ahead in unpaused queues, with `due_in_ms` by the server's clock; what a worker that may have missed a `pgqw_jobs_at` notification asks | QV400 |
| `prune_jobs(older_than, statuses, batch)` | deletes one batch of finished jobs older than an age, with their attempts and results (skips locked rows) | QV400 |
| `set_queue_limit(queue, max_running, create)` | at most `max_running` of the queue's jobs processing at once, across all workers (null: no limit); the claim enforces it | QV400, QU404 |
| `set_schedule(name, task_type, cron, payload, queue, priority, catch_up)` | makes or replaces a DBA's schedule (a new cron starts from now; its pause is kept) | QV400, QC400, QT422, QV413 |
| `pause_schedule(name)`, `resume_schedule(name)`, `delete_schedule(name)` | a schedule stops, goes on from its next slot after now, or goes | QV400, QR404 |
| `register_schedules(task_types, schedules jsonb)` | upserts the schedules a worker's code defines (never a DBA's schedule or pause) | QV400, QC400, QT422 |
| `enqueue_schedule_slots(name, slots)` | → pending: one job per due slot its `catch_up` picks, each slot once | QV400, QR404, QV413 |
| `list_schedules()` | none (reads): every schedule, what a worker's scheduler reads each round | none |
| `check_schedule_cron(cron)` | none: what is wrong with a cron expression, or null | none |
| `set_queue_rate(queue, jobs_per_second, create)` | at most `jobs_per_second` of the queue's jobs started per second, across all workers (null: no rate): a bucket of `greatest(1, jobs_per_second)` tokens the claim refills and spends, checked at each claim | QV400, QU404 |
| `backoff_delay(attempt, base_ms, max_jitter_ms, max_delay_ms, jitter)` | none | QV400 |
| `queue_stats()`, `report_timeline(job_id)`, `report_concurrency(prefix)`, `report_double_runs(prefix)`, `report_latest_jobs(limit)` | none (reads) | QV400, QN404 |

Each file in `db/functions/` opens with a comment giving the same facts. What is true of them all is
said once in `db/security/grants.sql`: the functions that change state run as the queue's owner
(`security definer`), and each of the roles `pgqw_api`, `pgqw_worker` and `pgqw_admin` may call only
its own (the last step below).

A function that answers with a job returns its row whole, of type `jobs`: alone (`retry_dead`), or as
the field `job` of a composite beside what the call adds: `claimed_job` (`job`, `lease_token`) from the
claims, `enqueued_job` (`job`, `created`) from the enqueues, `recorded_job` (`job`, `already_recorded`)
from `mark_succeeded`, `mark_failed`, `mark_cancelled`, `mark_timed_out`, `release_job`, `snooze_job` and
`mark_jobs_succeeded`, and
`cancelled_job` (`job`, `cancel_requested_at`) from `cancel_job`. `select * from claim_job('w1')` shows
the row as one value; `select (c.job).*, c.lease_token from claim_job('w1') c` spreads it into its
columns, and `(c.job).id` reads one. A column added to `jobs` is in every answer without a new
signature. `already_recorded` is true when the same call for the same attempt had committed before (its
reply was lost), and nothing changed (`mark_timed_out`'s is true too when a sweep had ended the attempt
timed out). An invalid argument (`QV400`) names itself in the error's column
field (`\\set VERBOSITY verbose` shows it as `COLUMN NAME`).
"""


def main() -> int:
    admin = sys.argv[1] if len(sys.argv) > 1 else "postgresql://postgres@127.0.0.1:5432/postgres"
    name = f"pgqw_sqldoc_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    dsn = make_conninfo(admin, dbname=name)
    try:
        install = ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn,
                   "-c", "create schema pgqw", "-c", "set search_path = pgqw, pg_temp"]
        for _, path in migration_files():
            install += ["-f", str(path)]
        install += ["-c", "set check_function_bodies = off"]
        for path in function_files():
            install += ["-f", str(path)]
        install += ["-f", str(roles_file()), "-f", str(grants_file())]
        subprocess.run(install, check=True, capture_output=True, text=True)

        script = ""
        for i, (_, body) in enumerate(STEPS):
            if "@@SQL@@" in body:
                script += f"\\echo @@STEP {i}@@\n" + body.split("@@SQL@@\n", 1)[1]
        script += "\\echo @@END@@\n"
        # stderr merged into stdout, so each error sits right after its statement.
        merged = subprocess.run(["psql", "-X", "-a", "-d", dsn], input=script, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True).stdout
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))

    parts = re.split(r"^@@STEP (\d+)@@\n", merged, flags=re.M)
    outputs: dict[int, str] = {}
    for k in range(1, len(parts), 2):
        text = parts[k + 1].split("@@END@@")[0]
        text = "\n".join(line for line in text.splitlines() if not line.startswith("\\echo"))
        outputs[int(parts[k])] = text.strip("\n")

    out = [HEAD]
    for i, (title, body) in enumerate(STEPS):
        out.append(f"\n## {i + 1}. {title}\n")
        prose = body.split("@@SQL@@\n", 1)[0].strip()
        if prose:
            out.append(prose + "\n")
        if i in outputs:
            out.append("```\n" + outputs[i] + "\n```\n")
    (ROOT / "docs" / "sql.md").write_text("\n".join(out))
    print(f"wrote docs/sql.md ({len(outputs)} steps)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
