"""The roles migrate makes (db/security): each connects as itself and can do its work, and nothing else.

pgqw_api, pgqw_worker and pgqw_admin are server-wide roles; the grants are this test database's own
(copied from the migrated template). Every connection here logs in *as* the role, the way the API,
a worker or an operator would, on the same server and database as the test's owner connection.
"""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from pgqw import db
from pgqw.migrate import function_files
from tests.helpers import LISTING, SCHEMA, database_copy, job_row, one, rows
from tests.sql import queue_state as states
from tests.sql.queue_state import snapshot

ROLES = ("pgqw_api", "pgqw_worker", "pgqw_admin")
TABLES = ("jobs", "job_attempts", "job_results", "queue_settings", "task_types", "task_type_settings",
          "workers", "queues", "job_cancel_requests", "schedules", "job_waiters", "job_isolation", "job_dependencies",
          "batches", "queue_waiters", "migrations")
TABLE_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")

# The functions that change state run as their owner (security definer).
STATE_CHANGING = (
    "enqueue_job", "enqueue_jobs", "claim_job", "claim_jobs", "claim_jobs_at", "mark_succeeded",
    "mark_jobs_succeeded", "mark_failed", "heartbeat", "sweep_stuck", "sweep_stuck_at", "release_job", "retry_dead",
    "register_task_types", "register_worker", "stop_worker", "prune_jobs", "prune_expired_jobs",
    "pause_queue", "resume_queue", "set_queue_limit", "set_queue_rate", "cancel_job", "mark_cancelled",
    "mark_timed_out", "set_schedule", "pause_schedule", "resume_schedule", "delete_schedule", "register_schedules",
    "enqueue_schedule_slots", "snooze_job",
    # Workflows, batches, limits per key, bulk actions (the reads are definer: they serve workers and the API).
    "enqueue_batch", "batch_status", "workflow_jobs", "parent_results", "set_queue_key_limit", "retry_dead_jobs",
    "cancel_jobs",
    # Who waits for which job (job_waiters), for pgqw.client.wait; which worker waits for jobs (queue_waiters).
    "watch_job", "unwatch_job", "wait_for_jobs",
    # Not a state change, but definer too: it reads jobs for workers, which may read no table.
    "next_run_at",
    # Likewise: the schedules, for the API, and their timing for a worker's scheduler.
    "list_schedules", "schedule_times",
)
# The owner's clock: claims and sweeps as of a time given. No role may execute them.
OWNER_ONLY = {"raise_job_not_held", "raise_unknown_queue", "find_lease_attempt", "notify_watchers", "notify_due",
              "claim_jobs_at", "settle_jobs", "judge_blocked", "serial_turn", "enqueue_jobs_into", "check_bulk_filter",
              "sweep_stuck_at", "time_out_attempt", "has_waiters", "prune_finished"}
# The others run with the caller's rights: the reports need SELECT on what they read.
INVOKER = ("backoff_delay", "raise_job_not_held", "raise_unknown_queue", "find_lease_attempt", "notify_watchers",
           "notify_due", "settle_jobs", "judge_blocked", "serial_turn", "enqueue_jobs_into", "check_bulk_filter",
           "time_out_attempt", "has_waiters", "prune_finished", "finished_types", "waits_settled", "queue_stats",
           "report_concurrency", "report_double_runs", "report_latest_jobs", "report_timeline", "check_schedule_cron",
           "cron_matches", "list_queues", "list_worker_status", "list_task_types", "count_jobs_by_status", "get_job_result",
           "queue_throughput")

# Exactly what each role may do (db/security/grants.sql).
EXECUTE = {
    "pgqw_api": {"enqueue_job", "enqueue_jobs", "retry_dead", "queue_stats", "pause_queue", "resume_queue",
                 "set_queue_limit", "set_queue_rate", "cancel_job", "pause_schedule", "resume_schedule", "list_schedules",
                 "watch_job", "unwatch_job", "list_queues", "list_worker_status", "list_task_types",
                 "count_jobs_by_status", "get_job_result", "queue_throughput", "finished_types", "enqueue_batch",
                 "batch_status", "workflow_jobs", "parent_results", "set_queue_key_limit", "retry_dead_jobs", "cancel_jobs"},
    "pgqw_worker": {"claim_job", "claim_jobs", "heartbeat", "mark_succeeded", "mark_jobs_succeeded",
                    "mark_failed", "release_job", "sweep_stuck", "register_task_types", "register_worker",
                    "stop_worker", "prune_expired_jobs", "mark_cancelled", "mark_timed_out", "enqueue_schedule_slots",
                    "next_run_at", "schedule_times", "snooze_job", "parent_results", "wait_for_jobs", "waits_settled"},
    "pgqw_admin": (set(STATE_CHANGING) | set(INVOKER)) - OWNER_ONLY,
}
GRANTED = {
    "pgqw_api": {(t, "SELECT") for t in ("jobs", "job_attempts", "job_results", "task_types",
                                         "task_type_settings", "workers", "queues",
                                         "job_cancel_requests", "schedules")},
    # Workers read no table: every answer they need comes from the functions.
    "pgqw_worker": set(),
    "pgqw_admin": {(t, "SELECT") for t in TABLES} | {("queue_settings", "UPDATE")},
}
# A DBA's columns of task_types: the only ones an operator may update (never the code_* ones a
# registration writes, nor the name).
DBA_COLUMNS = {"queue", "priority", "max_attempts", "backoff_base_ms", "backoff_max_delay_ms",
               "backoff_max_jitter_ms", "lease_ms", "timeout_ms", "max_snoozes"}

# One call of each function with arguments of the right types (what they point at does not matter:
# a refused call stops before the function runs).
CALLS = {
    "enqueue_job": "select * from enqueue_job('t', '{}'::jsonb, 'k-refused')",
    "enqueue_jobs": "select * from enqueue_jobs('[{\"type\": \"t\", \"payload\": {}, \"idempotency_key\": \"k\"}]')",
    "retry_dead": "select * from retry_dead(gen_random_uuid())",
    "cancel_job": "select * from cancel_job(gen_random_uuid())",
    "watch_job": "select watch_job(gen_random_uuid())",
    "unwatch_job": "select unwatch_job(gen_random_uuid())",
    "mark_cancelled": "select * from mark_cancelled(gen_random_uuid(), gen_random_uuid())",
    "mark_timed_out": "select * from mark_timed_out(gen_random_uuid(), gen_random_uuid())",
    "time_out_attempt": "select time_out_attempt(gen_random_uuid(), 1)",
    "snooze_job": "select * from snooze_job(gen_random_uuid(), gen_random_uuid(), p_delay_ms => 1000)",
    "queue_stats": "select * from queue_stats()",
    "claim_job": "select * from claim_job('w-refused')",
    "claim_jobs": "select * from claim_jobs('w-refused', 10)",
    "claim_jobs_at": "select * from claim_jobs_at(now() + interval '1 day', 'w-refused', 10)",
    "heartbeat": "select * from heartbeat(array[gen_random_uuid()], array[gen_random_uuid()])",
    "mark_succeeded": "select * from mark_succeeded(gen_random_uuid(), gen_random_uuid())",
    "mark_jobs_succeeded": "select * from mark_jobs_succeeded(array[gen_random_uuid()], array[gen_random_uuid()])",
    "mark_failed": "select * from mark_failed(gen_random_uuid(), gen_random_uuid(), 'boom')",
    "release_job": "select * from release_job(gen_random_uuid(), gen_random_uuid())",
    "sweep_stuck": "select * from sweep_stuck()",
    "sweep_stuck_at": "select * from sweep_stuck_at(now() + interval '1 day')",
    "register_task_types": "select * from register_task_types('[{\"name\": \"t-refused\", \"payload_schema\": {}}]')",
    "register_worker": "select * from register_worker('w-refused', array['t'])",
    "stop_worker": "select * from stop_worker('w-refused')",
    "pause_queue": "select * from pause_queue('q-refused', true)",
    "resume_queue": "select * from resume_queue('q-refused', true)",
    "set_queue_limit": "select * from set_queue_limit('q-refused', 1, true)",
    "set_queue_rate": "select * from set_queue_rate('q-refused', 1, true)",
    "prune_jobs": "select prune_jobs(interval '3650 days', p_batch => 1)",
    "prune_expired_jobs": "select prune_expired_jobs(1)",
    "schedule_times": "select * from schedule_times()",
    "cron_matches": "select cron_matches('* * * * *', now())",
    "backoff_delay": "select backoff_delay(1)",
    "raise_job_not_held": "select raise_job_not_held(gen_random_uuid(), 1)",
    "raise_unknown_queue": "select raise_unknown_queue('q-refused', false)",
    "find_lease_attempt": "select * from find_lease_attempt(gen_random_uuid(), gen_random_uuid())",
    "notify_watchers": "select notify_watchers(gen_random_uuid())",
    "notify_due": "select notify_due('q', now())",
    "settle_jobs": "select settle_jobs(array[gen_random_uuid()])",
    "judge_blocked": "select judge_blocked(array[gen_random_uuid()])",
    "serial_turn": "select serial_turn('k', 1)",
    "prune_finished": "select prune_finished('t', 'succeeded', now(), 1)",
    "finished_types": "select finished_types()",
    "enqueue_jobs_into": "select * from enqueue_jobs_into('[]', null)",
    "check_bulk_filter": "select check_bulk_filter(null, null, null, null, null, 1)",
    "enqueue_batch": "select * from enqueue_batch('[{\"type\": \"t\", \"payload\": {}, \"idempotency_key\": \"kb\"}]')",
    "batch_status": "select * from batch_status(gen_random_uuid())",
    "workflow_jobs": "select * from workflow_jobs(gen_random_uuid())",
    "parent_results": "select * from parent_results(gen_random_uuid())",
    "set_queue_key_limit": "select * from set_queue_key_limit('q-refused', 1, true)",
    "retry_dead_jobs": "select retry_dead_jobs(p_type => 'refused')",
    "cancel_jobs": "select cancel_jobs(p_type => 'refused')",
    "report_timeline": "select * from report_timeline(gen_random_uuid())",
    "report_concurrency": "select * from report_concurrency('w')",
    "report_double_runs": "select * from report_double_runs('w')",
    "report_latest_jobs": "select * from report_latest_jobs(5)",
    "check_schedule_cron": "select check_schedule_cron('* * * * *')",
    "set_schedule": "select * from set_schedule('s-refused', 'noop', '* * * * *')",
    "pause_schedule": "select * from pause_schedule('s-refused')",
    "resume_schedule": "select * from resume_schedule('s-refused')",
    "delete_schedule": "select * from delete_schedule('s-refused')",
    "register_schedules": "select * from register_schedules(array['noop'], '[]')",
    "enqueue_schedule_slots": "select * from enqueue_schedule_slots('s-refused', array[now()])",
    "list_schedules": "select * from list_schedules()",
    "next_run_at": "select * from next_run_at()",
    "wait_for_jobs": "select wait_for_jobs('w-refused')",
    "waits_settled": "select waits_settled('3'::xid8)",
    "has_waiters": "select has_waiters('q')",
    "list_queues": "select * from list_queues()",
    "list_worker_status": "select * from list_worker_status()",
    "list_task_types": "select * from list_task_types()",
    "count_jobs_by_status": "select * from count_jobs_by_status()",
    "get_job_result": "select * from get_job_result(gen_random_uuid())",
    "queue_throughput": "select * from queue_throughput(now() - interval '1 hour', now(), 60)",
}

# Direct writes to the two tables of the state machine: nobody but the owner.
DIRECT_WRITES = (
    "insert into jobs (type, idempotency_key, max_attempts) values ('t', 'k-direct', 1)",
    "update jobs set status = 'succeeded', attempts = 1, finished_at = now()",
    "delete from jobs",
    "truncate jobs cascade",
    "insert into job_attempts (job_id, attempt, worker_id, started_at) values (gen_random_uuid(), 1, 'w', now())",
    "update job_attempts set outcome = 'succeeded', finished_at = now()",
    "delete from job_attempts",
    "truncate job_attempts",
)
# Everything else a role may not touch, per role.
# Results are written only with a success (mark_succeeded), task types only by a registration (and a
# DBA's columns by an operator), workers only by register_worker / stop_worker.
RESULT_WRITES = (
    "insert into job_results (job_id, content_type, value) select id, 'application/json', '1' from jobs"
    " where status = 'pending' limit 1",
    "update job_results set data = '%PDF-forged'::bytea where data is not null",
    "delete from job_results",
)
TASK_TYPE_AND_WORKER_WRITES = (
    "insert into task_types (name) values ('forged')",
    "delete from task_types",
    "update task_types set code_max_attempts = 1",
    "insert into workers (id, expires_at) values ('forged', now() + interval '1 day')",
    "update workers set expires_at = now() + interval '1 day'",
    "delete from workers",
)
OTHER_REFUSALS = {
    "pgqw_api": RESULT_WRITES + TASK_TYPE_AND_WORKER_WRITES + (
        "update task_types set max_attempts = 1",
        "select * from queue_settings",
        "update queue_settings set max_payload_bytes = 100000000",
        "select * from migrations",
    ),
    "pgqw_worker": RESULT_WRITES + TASK_TYPE_AND_WORKER_WRITES + (
        "update task_types set lease_ms = 1",
        "select * from jobs",
        "select * from job_attempts",
        "select * from job_results",
        "select * from task_types",
        "select * from task_type_settings",
        "select * from workers",
        "select * from queue_settings",
        "update queue_settings set lease_ms = 999999999",
        "select * from migrations",
    ),
    "pgqw_admin": RESULT_WRITES + TASK_TYPE_AND_WORKER_WRITES + (
        "update task_types set name = 'renamed'",
        "update task_types set payload_schema = '{}'",
        "delete from queue_settings",
        "insert into queue_settings (id) values (true)",
        "delete from migrations",
    ),
}


def role_dsn(dsn: str, role: str) -> str:
    return make_conninfo(dsn, user=role)


@pytest.fixture
def as_role(db_url: str) -> Iterator[Callable[[str], psycopg.Connection]]:
    """as_role("pgqw_api") → an autocommit connection logged in as that role, closed at the end."""
    opened: list[psycopg.Connection] = []

    def connect(role: str) -> psycopg.Connection:
        c = psycopg.connect(role_dsn(db_url, role), autocommit=True)
        opened.append(c)
        return c

    yield connect
    for c in opened:
        c.close()


# ---- the catalog: who holds what ----

def test_roles_are_login_roles_without_special_powers(conn: psycopg.Connection) -> None:
    found = {r["rolname"]: r for r in rows(
        conn, "select rolname, rolcanlogin, rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls"
              " from pg_roles where rolname = any(%s)", [list(ROLES)])}
    assert sorted(found) == sorted(ROLES)
    for role in ROLES:
        r = found[role]
        assert r["rolcanlogin"], role
        assert not any(r[a] for a in ("rolsuper", "rolcreaterole", "rolcreatedb", "rolreplication",
                                      "rolbypassrls")), r


def test_roles_every_function_is_classified_in_these_tests() -> None:
    stems = {p.stem for p in function_files()}
    assert set(STATE_CHANGING) | set(INVOKER) == stems
    assert not set(STATE_CHANGING) & set(INVOKER)
    assert set(CALLS) == stems


@pytest.mark.parametrize("role", ROLES)
def test_roles_execute_exactly_their_functions(conn: psycopg.Connection, role: str) -> None:
    allowed = {
        r["proname"] for r in rows(
            conn, "select p.proname from pg_proc p where p.pronamespace = current_schema()::regnamespace"
                  " and has_function_privilege(%s, p.oid, 'execute')", [role])
    }
    assert allowed == EXECUTE[role]


@pytest.mark.parametrize("role", ROLES)
def test_roles_hold_exactly_their_table_privileges(conn: psycopg.Connection, role: str) -> None:
    held = {
        (table, privilege)
        for table in TABLES for privilege in TABLE_PRIVILEGES
        if one(conn, "select has_table_privilege(%s, %s, %s) as ok", [role, f"{SCHEMA}.{table}", privilege])["ok"]
    }
    assert held == GRANTED[role]


@pytest.mark.parametrize("role", ROLES)
def test_roles_update_only_a_dbas_columns_of_task_types(conn: psycopg.Connection, role: str) -> None:
    columns = {r["attname"] for r in rows(
        conn, "select attname from pg_attribute where attrelid = 'task_types'::regclass and attnum > 0"
              " and not attisdropped")}
    assert DBA_COLUMNS < columns
    updatable = {c for c in columns
                 if one(conn, "select has_column_privilege(%s, 'task_types', %s, 'UPDATE') as ok", [role, c])["ok"]}
    assert updatable == (DBA_COLUMNS if role == "pgqw_admin" else set())


def test_roles_nothing_of_the_queue_is_granted_to_public(conn: psycopg.Connection) -> None:
    # A null ACL means the defaults, which for a function include EXECUTE for PUBLIC (grantee 0).
    open_functions = rows(
        conn, "select p.proname from pg_proc p where p.pronamespace = current_schema()::regnamespace"
              " and (p.proacl is null or exists (select 1 from aclexplode(p.proacl) a where a.grantee = 0))")
    assert open_functions == []
    open_tables = rows(
        conn, "select c.relname from pg_class c where c.relnamespace = current_schema()::regnamespace"
              " and c.relname = any(%s)"
              " and exists (select 1 from aclexplode(c.relacl) a where a.grantee = 0)", [list(TABLES)])
    assert open_tables == []


def test_roles_cannot_create_objects_in_the_queues_schema(conn: psycopg.Connection) -> None:
    """Pinning search_path to the queue's schema only protects the functions while nobody but the owner
    can put objects there: each role may name what is in it (USAGE), and create nothing in it; PUBLIC
    holds nothing on it."""
    for role in ROLES:
        assert not one(conn, "select has_schema_privilege(%s, %s, 'create') as ok", [role, SCHEMA])["ok"], role
        assert one(conn, "select has_schema_privilege(%s, %s, 'usage') as ok", [role, SCHEMA])["ok"], role
    acl = one(conn, "select coalesce(nspacl, '{}')::text[] as acl from pg_namespace where nspname = %s", [SCHEMA])["acl"]
    assert not [a for a in acl if a.startswith("=")], acl  # "=U/owner" would be PUBLIC's


def test_state_changing_functions_are_security_definer_with_a_pinned_search_path(conn: psycopg.Connection) -> None:
    found = {r["proname"]: r for r in rows(
        conn, "select proname, prosecdef, coalesce(proconfig, '{}') as config from pg_proc"
              " where pronamespace = current_schema()::regnamespace")}
    for name in STATE_CHANGING:
        assert found[name]["prosecdef"], f"{name} is not security definer"
        assert f"search_path={SCHEMA}, pg_temp" in found[name]["config"], (name, found[name]["config"])
    for name in INVOKER:
        assert not found[name]["prosecdef"], f"{name} should run with the caller's rights"
        assert f"search_path={SCHEMA}, pg_temp" in found[name]["config"], (name, found[name]["config"])


# ---- what each role can do ----

def test_api_role_enqueues_lists_reads_and_retries(conn: psycopg.Connection, as_role) -> None:
    api = as_role("pgqw_api")
    assert one(api, "select current_user as u")["u"] == "pgqw_api"

    job = db.enqueue_job(api, type="listing_flyer", payload=dict(LISTING), idempotency_key="api-1")
    assert job.created and job.status == "pending"
    again = db.enqueue_job(api, type="listing_flyer", payload=dict(LISTING), idempotency_key="api-1")
    assert (again.id, again.created) == (job.id, False)
    batch = db.enqueue_jobs(api, jobs=[
        {"type": "listing_flyer", "payload": dict(LISTING), "idempotency_key": f"api-batch-{n}"} for n in range(2)])
    assert [b.created for b in batch] == [True, True]
    assert {r["id"] for r in rows(conn, "select id from jobs")} == {job.id, *(b.id for b in batch)}

    got = db.get_job(api, job_id=job.id)
    assert got is not None and got.id == job.id
    first = db.list_jobs(api, limit=2)
    assert len(first.jobs) == 2 and first.next_cursor is not None
    rest = db.list_jobs(api, limit=2, after=first.next_cursor)
    assert {j.id for j in first.jobs + rest.jobs} == {job.id, *(b.id for b in batch)}
    assert [j.id for j in db.list_jobs(api, status="pending").jobs] == [j.id for j in first.jobs + rest.jobs]
    assert db.count_by_status(api)["pending"] == 3

    done = states.succeeded(conn)
    result = db.get_result(api, job_id=done.id)
    assert result is not None and bytes(result.data or b"") == states.PDF
    assert [a.outcome for a in db.get_attempts(api, job_id=done.id)] == ["succeeded"]

    dead = states.dead(conn, errors=("a", "b"))
    retried = db.retry_dead(api, job_id=dead.id)
    assert (retried.status, retried.attempts) == ("pending", 2)
    assert job_row(conn, dead.id)["status"] == "pending"

    stats = {(s.metric, s.queue, s.label): s.value for s in db.queue_stats(api)}
    assert stats[("jobs", "default", "pending")] == 3
    assert stats[("attempts", None, "succeeded")] == 1


def test_worker_role_registers_claims_heartbeats_marks_with_results_releases_sweeps_and_stops(
    conn: psycopg.Connection, as_role
) -> None:
    worker = as_role("pgqw_worker")
    db.listen(worker)

    # what a worker does at start: its code's task types, then its presence
    assert db.register_task_types(worker, types=[
        {"name": "role-test", "payload_schema": {"type": "object"}, "lease_ms": 120_000}]) == ["role-test"]
    seen = db.register_worker(worker, worker_id="w1", task_types=["listing_flyer", "role-test"])
    assert seen.expires_at > seen.last_seen_at and seen.stopped_at is None

    def queue_of(n: int, **kwargs) -> str:
        queue = f"wq-{uuid.uuid4().hex[:8]}"
        for _ in range(n):
            states.pending(conn, queue=queue, **kwargs)
        return queue

    # claim (only its task types), heartbeat, success with its result
    q = queue_of(1)
    states.pending(conn, queue=q, type="noop")
    job = db.claim_job(worker, worker_id="w1", queues=[q], task_types=["listing_flyer"])
    assert job is not None and job.type == "listing_flyer" and job.locked_by == "w1"
    # The lease it was granted comes back with the claim: no table read needed.
    assert job.lease_expires_at - job.started_at == timedelta(minutes=1)
    assert db.claim_job(worker, worker_id="w1", queues=[q], task_types=["listing_flyer"]) is None
    leases = db.heartbeat(worker, leases=[(job.id, job.lease_token)], lease_ms=600_000)
    assert [lease.job_id for lease in leases] == [job.id]
    assert leases[0].lease_expires_at > job.lease_expires_at
    done = db.mark_succeeded(worker, job_id=job.id, lease_token=job.lease_token,
                             result=("application/pdf", None, states.PDF))
    assert (done.status, done.already_recorded) == ("succeeded", False)
    # A lost reply, asked again: answered from the function, not from a table read.
    again = db.mark_succeeded(worker, job_id=job.id, lease_token=job.lease_token,
                              result=("application/pdf", None, states.PDF))
    assert (again.status, again.already_recorded) == ("succeeded", True)
    result = db.get_result(conn, job_id=job.id)
    assert result is not None and bytes(result.data or b"") == states.PDF

    # the type's lease, batch claim and batch success with JSON results
    q = queue_of(2, type="role-test")
    batch = db.claim_jobs(worker, worker_id="w1", limit=5, queues=[q])
    assert len(batch) == 2
    assert {j.lease_expires_at - j.started_at for j in batch} == {timedelta(minutes=2)}
    done_batch = db.mark_jobs_succeeded(worker, done=[(j.id, j.lease_token) for j in batch],
                                        results=[{"n": 1}, None])
    assert sorted(j.id for j in done_batch) == sorted(j.id for j in batch)
    assert [r["value"] for r in rows(conn, "select value from job_results where job_id = any(%s)",
                                     [[j.id for j in batch]])] == [{"n": 1}]

    # a retryable failure
    q = queue_of(1)
    job = db.claim_job(worker, worker_id="w1", queues=[q])
    assert job is not None
    failed = db.mark_failed(worker, job_id=job.id, lease_token=job.lease_token, error="renderer timed out",
                            base_ms=3_600_000, max_jitter_ms=0)
    assert failed.status == "failed" and failed.run_at > datetime.now(timezone.utc) + timedelta(minutes=50)

    # handed back on shutdown
    q = queue_of(1)
    job = db.claim_job(worker, worker_id="w1", queues=[q])
    assert job is not None
    assert db.release_job(worker, job_id=job.id, lease_token=job.lease_token, reason="stopping").status == "pending"

    # put off by its handler (Snooze)
    q = queue_of(1)
    job = db.claim_job(worker, worker_id="w1", queues=[q])
    assert job is not None
    assert db.snooze_job(worker, job_id=job.id, lease_token=job.lease_token, delay_ms=60_000).status == "pending"

    # a stuck job swept, by the server's clock: a worker that is gone claimed it an hour ago (the
    # owner's claim_jobs_at sets the time), so its lease has expired with no waiting
    q = queue_of(1, run_at=datetime.now(timezone.utc) - timedelta(hours=2))
    job = db.ClaimedJob(**one(conn, "select (r.job).*, r.lease_token from claim_jobs_at(now() - interval '1 hour', 'w-gone', 1, %s) r", [[q]]))
    swept = db.sweep_stuck(worker)
    assert [(s.job_id, s.status) for s in swept] == [(job.id, "pending")]
    after = job_row(conn, job.id)
    assert after["status"] == "pending" and after["locked_by"] is None
    assert [a["outcome"] for a in rows(conn, "select outcome from job_attempts where job_id = %s", [job.id])] \
        == ["abandoned"]

    # a clean exit
    stopped = db.stop_worker(worker, worker_id="w1")
    assert stopped is not None and stopped.stopped_at is not None
    assert one(conn, "select expires_at <= now() as gone from workers where id = 'w1'")["gone"]


def test_admin_role_reports_changes_settings_and_repairs(conn: psycopg.Connection, as_role) -> None:
    admin = as_role("pgqw_admin")
    dead = states.dead(conn, errors=("a", "b"))
    done = states.succeeded(conn, worker_id="w-admin-test")

    assert [r.attempt for r in db.report_timeline(admin, job_id=dead.id)] == [1, 2]
    assert [r.worker_id for r in db.report_concurrency(admin, prefix="w-admin")] == ["w-admin-test"]
    assert db.report_double_runs(admin, prefix="w-admin").results == 1
    assert {r.id for r in db.report_latest_jobs(admin, limit=10)} == {dead.id, done.id}
    assert db.count_by_status(admin)["dead"] == 1
    assert one(admin, "select count(*) as n from job_results where job_id = any(%s)", [[dead.id, done.id]])["n"] == 1
    assert any(s.metric == "jobs" for s in db.queue_stats(admin))
    assert one(admin, "select backoff_delay(3, 1000, 0, 3600000, 0) as d")["d"] == timedelta(seconds=4)
    assert len(rows(admin, "select * from migrations")) >= 1
    result = db.get_result(admin, job_id=done.id)
    assert result is not None and bytes(result.data or b"") == states.PDF

    admin.execute("update queue_settings set lease_ms = 30000, retry_extra_attempts = 2")
    assert db.get_queue_settings(conn).lease_ms == 30_000
    # A DBA's override of a task type, read back through task_type_settings.
    admin.execute("update task_types set max_attempts = 9 where name = 'noop'")
    noop = db.get_task_type(admin, name="noop")
    assert noop is not None and noop.max_attempts == 9

    retried = db.retry_dead(admin, job_id=dead.id)
    assert retried.max_attempts == dead.max_attempts + 2  # the setting it just changed
    claimed = db.claim_job(admin, worker_id="w-admin", queues=[dead.queue])
    assert claimed is not None and claimed.lease_expires_at - claimed.started_at == timedelta(seconds=30)
    assert db.mark_succeeded(admin, job_id=dead.id, lease_token=claimed.lease_token).status == "succeeded"
    made = db.enqueue_job(admin, type="listing_flyer", payload=dict(LISTING), idempotency_key="admin-1")
    assert made.created
    assert db.sweep_stuck(admin) == []


# ---- what each role cannot do (refused calls change nothing: one database for the module) ----

@pytest.fixture(scope="module")
def shared_db(pg_server: str, template_db: str) -> Iterator[str]:
    with database_copy(pg_server, template_db, "pgqw_r_") as dsn:
        with psycopg.connect(dsn, autocommit=True) as owner:
            # Something in every table, so a refused write would have rows to change.
            done = states.succeeded(owner)
            states.dead(owner)
            states.processing(owner)
            assert done.status == "succeeded"
        yield dsn


@pytest.fixture(scope="module")
def role_conns(shared_db: str) -> Iterator[dict[str, psycopg.Connection]]:
    conns = {role: psycopg.connect(role_dsn(shared_db, role), autocommit=True) for role in ROLES}
    yield conns
    for c in conns.values():
        c.close()


@pytest.fixture
def unchanged(shared_db: str) -> Iterator[None]:
    with psycopg.connect(shared_db, autocommit=True) as owner:
        before = snapshot(owner)
        yield
        assert snapshot(owner) == before, "a refused statement changed the database"


def refused(conn: psycopg.Connection, statement: str) -> str:
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(statement)
    return exc.value.sqlstate or ""


@pytest.mark.parametrize("statement", DIRECT_WRITES)
@pytest.mark.parametrize("role", ROLES)
def test_roles_cannot_write_jobs_or_attempts_directly(role_conns, unchanged, role: str, statement: str) -> None:
    assert refused(role_conns[role], statement) == "42501"


@pytest.mark.parametrize("role,statement", [(r, s) for r, ss in OTHER_REFUSALS.items() for s in ss])
def test_roles_cannot_touch_tables_outside_their_grants(role_conns, unchanged, role: str, statement: str) -> None:
    assert refused(role_conns[role], statement) == "42501"


@pytest.mark.parametrize("role,function", [
    (role, name) for role in ROLES for name in sorted(CALLS) if name not in EXECUTE[role]])
def test_roles_cannot_call_other_roles_functions(role_conns, unchanged, role: str, function: str) -> None:
    assert refused(role_conns[role], CALLS[function]) == "42501"


# ---- a caller's own objects cannot stand in for the queue's ----

def test_definer_functions_ignore_a_callers_temp_tables(conn: psycopg.Connection, as_role) -> None:
    states.pending(conn)  # one row in the queue's jobs
    api = as_role("pgqw_api")
    api.execute(f"create temp table jobs (like {SCHEMA}.jobs including all)")
    api.execute("create temp table queue_settings as select true as id, 1 as max_attempts,"
                " 0 as backoff_base_ms, 0 as backoff_max_jitter_ms, 0 as backoff_max_delay_ms,"
                " 1 as lease_ms, 1 as retry_extra_attempts, 2 as max_payload_bytes")
    # The trap works: in the caller's own statements, its temp tables come first.
    assert one(api, "select count(*) as n from jobs")["n"] == 0
    assert one(api, "select max_payload_bytes from queue_settings")["max_payload_bytes"] == 2

    made = db.enqueue_job(api, type="listing_flyer", payload=dict(LISTING), idempotency_key="temp-trap")
    assert made.created and made.max_attempts == 5  # the queue's queue_settings, not the temp one
    assert one(conn, "select count(*) as n from jobs where id = %s", [made.id])["n"] == 1
    assert one(api, "select count(*) as n from pg_temp.jobs")["n"] == 0

    worker = as_role("pgqw_worker")
    worker.execute("create temp table queue_settings as select 1 as lease_ms")
    assert one(worker, "select lease_ms from queue_settings")["lease_ms"] == 1
    job = db.claim_job(worker, worker_id="w-temp", queues=[made.queue])
    assert job is not None and job.id == made.id
    assert job.lease_expires_at - job.started_at == timedelta(minutes=1)  # the queue's lease_ms, not 1 ms


def test_definer_functions_ignore_functions_in_a_schema_first_on_the_callers_path(
    conn: psycopg.Connection, as_role
) -> None:
    conn.execute("create schema hostile authorization pgqw_worker")
    worker = as_role("pgqw_worker")
    worker.execute(
        "create function hostile.claim_jobs_at(p_now timestamptz, p_worker_id text, p_limit integer,"
        f" p_queues text[], p_lease_ms integer, p_task_types text[]) returns setof {SCHEMA}.jobs language plpgsql as"
        " $$ begin raise exception using errcode = 'HJ001', message = 'hijacked claim_jobs_at'; end $$")
    worker.execute(
        "create function hostile.backoff_delay(p_attempt integer, p_base_ms integer, p_max_jitter_ms integer,"
        " p_max_delay_ms integer, p_jitter double precision) returns interval language sql"
        " as $$ select interval '0' $$")
    worker.execute(
        "create function hostile.raise_job_not_held(p_job_id uuid, p_attempt integer)"
        " returns void language plpgsql as $$ begin end $$")
    # Workers read no table, so the stand-ins are made from literals.
    worker.execute("create table hostile.queue_settings as select true as id, 1 as max_attempts,"
                   " 0 as backoff_base_ms, 0 as backoff_max_jitter_ms, 0 as backoff_max_delay_ms,"
                   " 1 as lease_ms, 1 as retry_extra_attempts, 2 as max_payload_bytes")
    worker.execute("create table hostile.task_type_settings as select 'listing_flyer'::text as name,"
                   " 1 as lease_ms, 0 as backoff_base_ms, 0 as backoff_max_jitter_ms, 0 as backoff_max_delay_ms")
    worker.execute(f"set search_path = hostile, {SCHEMA}, public")
    # The trap works: unqualified names in the caller's own statements find the hostile objects.
    with pytest.raises(psycopg.Error) as exc:
        worker.execute("select * from claim_jobs_at(now(), 'w', 1, null::text[], null::integer, null::text[])")
    assert exc.value.sqlstate == "HJ001"
    assert one(worker, "select backoff_delay(1, 60000, 0, 3600000, 0) as d")["d"] == timedelta(0)
    assert one(worker, "select lease_ms from task_type_settings")["lease_ms"] == 1

    job = states.pending(conn)
    claimed = db.claim_job(worker, worker_id="w-h", queues=[job.queue])  # claim_job calls claim_jobs_at
    assert claimed is not None and claimed.id == job.id
    assert claimed.lease_expires_at - claimed.started_at == timedelta(minutes=1)
    # The task type's backoff (null arguments): the queue's task_type_settings and backoff_delay.
    conn.execute("update task_types set backoff_base_ms = 60000, backoff_max_jitter_ms = 0"
                 " where name = 'listing_flyer'")
    failed = db.mark_failed(worker, job_id=job.id, lease_token=claimed.lease_token, error="boom")
    assert failed.run_at - datetime.now(timezone.utc) > timedelta(seconds=50)
    with pytest.raises(psycopg.Error) as exc:
        db.mark_succeeded(worker, job_id=job.id, lease_token=claimed.lease_token)
    assert exc.value.sqlstate == "QL409"  # the queue's raise_job_not_held explained and raised
