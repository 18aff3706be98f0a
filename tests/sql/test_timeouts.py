"""Timeouts in the database: a claim gives an attempt with a timeout its deadline (the job's own timeout,
else its task type's: a DBA's over the code's), heartbeat never extends the lease past it, the sweep
ends an attempt whose lease ran to it `timed_out` (a failure: retried with backoff, then dead with the
error), mark_timed_out ends it at once but never before it, and cancel_job of a running job moves the
deadline to now, so its lease is not extended and the sweep ends it cancelled.

Time is the functions' own argument where a test needs it (claim_jobs_at, sweep_stuck_at): no sleeps."""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from pgqw import db
from pgqw.client.options import Enqueue, spec
from tests.helpers import enqueue, job_row, one, rows, snapshot


def _now(conn: psycopg.Connection) -> datetime:
    return conn.execute("select now()").fetchone()[0]


def _register(conn: psycopg.Connection, name: str, **code: Any) -> None:
    db.register_task_types(conn, types=[{"name": name, "payload_schema": {}, **code}])


def _claim_at(conn: psycopg.Connection, at: datetime, **job: Any) -> db.ClaimedJob:
    """A job of type t (or job's) claimed as of `at` (ready since an hour before it)."""
    job.setdefault("type", "t")
    job.setdefault("payload", {})
    enqueue(conn, run_at=at - timedelta(hours=1), **job)
    claimed = db.claim_job_at(conn, worker_id="w1", now=at)
    assert claimed is not None
    return claimed


def _attempts(conn: psycopg.Connection, job_id: uuid.UUID) -> list[dict[str, Any]]:
    return rows(conn, "select attempt, outcome, error, deadline_at from job_attempts where job_id = %s"
                      " order by attempt", [job_id])


def _refused(call: Any, code: str) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as exc:
        call()
    assert exc.value.sqlstate == code
    return exc.value


def test_claim_gives_the_attempt_its_deadline_and_a_lease_that_ends_there(conn: psycopg.Connection) -> None:
    enqueue(conn, type="t", payload={}, timeout_ms=1500)
    job = db.claim_job(conn, worker_id="w1", lease_ms=60_000)
    assert job is not None and job.timeout_ms == 1500 and job.started_at is not None
    assert job.deadline_at == job.started_at + timedelta(milliseconds=1500)
    assert job.lease_expires_at == job.deadline_at
    assert _attempts(conn, job.id) == [{"attempt": 1, "outcome": None, "error": None, "deadline_at": job.deadline_at}]


def test_heartbeat_never_extends_a_lease_past_the_deadline(conn: psycopg.Connection) -> None:
    enqueue(conn, type="t", payload={}, timeout_ms=1500)
    capped = db.claim_job(conn, worker_id="w1", lease_ms=1000)
    assert capped is not None and capped.lease_expires_at < capped.deadline_at  # the lease first: 1 s of 1.5 s
    enqueue(conn, type="t", payload={}, timeout_ms=600_000)
    far = db.claim_job(conn, worker_id="w1", lease_ms=1000)
    assert far is not None
    leases = {lease.job_id: lease for lease in db.heartbeat(
        conn, leases=[(capped.id, capped.lease_token), (far.id, far.lease_token)], lease_ms=60_000)}
    assert leases[capped.id].lease_expires_at == capped.deadline_at      # a minute asked: the deadline given
    assert far.started_at is not None and far.deadline_at is not None
    extended = leases[far.id].lease_expires_at - far.started_at                   # far from its own: a minute
    assert timedelta(minutes=1) <= extended < far.deadline_at - far.started_at
    again = db.heartbeat(conn, leases=[(capped.id, capped.lease_token)], lease_ms=60_000)
    assert [lease.lease_expires_at for lease in again] == [capped.deadline_at]  # still held, still not extended
    assert job_row(conn, capped.id)["lease_expires_at"] == capped.deadline_at


def test_sweep_ends_a_timed_out_attempt_retried_then_dead_with_the_error(conn: psycopg.Connection) -> None:
    now = _now(conn)
    first = _claim_at(conn, now, max_attempts=2, timeout_ms=1000)
    assert first.deadline_at == now + timedelta(seconds=1) == first.lease_expires_at
    # Before the deadline the lease still holds: nothing to sweep.
    assert db.sweep_stuck_at(conn, now=now + timedelta(milliseconds=999)) == []

    [swept] = db.sweep_stuck_at(conn, now=now + timedelta(milliseconds=1001))
    assert (swept.job_id, swept.attempt, swept.worker_id, swept.status) == (first.id, 1, "w1", "failed")
    row = job_row(conn, first.id)
    assert row["status"] == "failed" and row["locked_by"] is None and row["lease_expires_at"] is None
    assert row["max_attempts"] == 2  # a failure spends its try (not given back, as an abandoned one is)
    assert row["run_at"] >= _now(conn) + timedelta(seconds=2)  # queue_settings' backoff: 2 s and jitter
    assert row["last_error"].startswith("timed out after 1000 ms (its deadline was ")
    [attempt] = _attempts(conn, first.id)
    assert attempt["outcome"] == "timed_out" and attempt["error"] == row["last_error"]
    assert rows(conn, "select * from job_isolation") == []

    later = row["run_at"] + timedelta(seconds=1)
    second = db.claim_job_at(conn, worker_id="w2", now=later)
    assert second is not None and second.attempts == 2 and second.deadline_at == later + timedelta(seconds=1)
    [swept] = db.sweep_stuck_at(conn, now=later + timedelta(seconds=2))
    assert (swept.attempt, swept.worker_id, swept.status) == (2, "w2", "dead")
    row = job_row(conn, first.id)
    assert row["status"] == "dead" and row["finished_at"] is not None
    assert row["last_error"].startswith("timed out after 1000 ms")
    assert [a["outcome"] for a in _attempts(conn, first.id)] == ["timed_out", "timed_out"]


def test_sweep_of_a_lease_that_expired_before_the_deadline_is_abandoned(conn: psycopg.Connection) -> None:
    """A worker that stopped heartbeating before its deadline stopped responding: not a timeout."""
    now = _now(conn)
    enqueue(conn, type="t", payload={}, run_at=now - timedelta(hours=1), timeout_ms=600_000)
    job = db.claim_job_at(conn, worker_id="w1", now=now, lease_ms=1000)
    assert job is not None and job.lease_expires_at < job.deadline_at
    [swept] = db.sweep_stuck_at(conn, now=now + timedelta(seconds=2))
    assert swept.status == "pending"
    assert [a["outcome"] for a in _attempts(conn, job.id)] == ["abandoned"]


def test_timeout_of_the_job_wins_over_the_type_which_wins_over_the_code(conn: psycopg.Connection) -> None:
    _register(conn, "tmo", timeout_ms=3000)
    assert one(conn, "select timeout_ms from task_type_settings where name = 'tmo'") == {"timeout_ms": 3000}

    def timeout_of(**job: Any) -> timedelta | None:
        enqueue(conn, type="tmo", payload={}, **job)
        claimed = db.claim_job(conn, worker_id="w1", task_types=["tmo"])
        assert claimed is not None and claimed.started_at is not None
        return None if claimed.deadline_at is None else claimed.deadline_at - claimed.started_at

    assert timeout_of() == timedelta(seconds=3)                       # the code's
    conn.execute("update task_types set timeout_ms = 2000 where name = 'tmo'")  # a DBA's
    assert timeout_of() == timedelta(seconds=2)
    _register(conn, "tmo", timeout_ms=4000)                           # a new release: the DBA's stays
    assert one(conn, "select code_timeout_ms, timeout_ms from task_types where name = 'tmo'") == {
        "code_timeout_ms": 4000, "timeout_ms": 2000}
    assert timeout_of() == timedelta(seconds=2)
    assert timeout_of(timeout_ms=1000) == timedelta(seconds=1)        # the job's own
    [made] = db.enqueue_jobs(conn, jobs=[{"type": "tmo", "payload": {}, "idempotency_key": "b1", "timeout_ms": 500}])
    assert made.timeout_ms == 500
    assert timeout_of() == timedelta(milliseconds=500)  # the batch's job, claimed first (older run_at)
    # Null everywhere: no deadline, and the lease is the claim's.
    conn.execute("update task_types set timeout_ms = null where name = 'tmo'")
    _register(conn, "tmo")
    enqueue(conn, type="tmo", payload={})
    plain = db.claim_job(conn, worker_id="w1", task_types=["tmo"], lease_ms=5000)
    assert plain is not None and plain.deadline_at is None and plain.timeout_ms is None
    assert plain.lease_expires_at - plain.started_at == timedelta(seconds=5)
    assert _attempts(conn, plain.id)[0]["deadline_at"] is None


def test_timeout_client_options_reach_the_job(conn: psycopg.Connection) -> None:
    assert spec(Enqueue("t", {}, timeout=1.5))["timeout_ms"] == 1500
    assert spec(Enqueue("t", {}, timeout=timedelta(seconds=2)))["timeout_ms"] == 2000
    assert spec(Enqueue("t", {}, timeout_ms=700))["timeout_ms"] == 700
    with pytest.raises(ValueError):
        spec(Enqueue("t", {}, timeout=1, timeout_ms=1000))
    with pytest.raises(TypeError):
        spec(Enqueue("t", {}, timeout_ms="1000"))  # type: ignore[arg-type]
    from pgqw import client

    made = client.enqueue(conn, "t", {}, timeout=0.25)
    assert made.timeout_ms == 250
    [batch] = client.enqueue_many(conn, [Enqueue("t", {}, timeout_ms=125)])
    assert batch.timeout_ms == 125


@pytest.mark.parametrize("statement, column", [
    ("select * from enqueue_job('t', '{}', 'k-0', p_timeout_ms => 0)", "timeout_ms"),
    ("select * from enqueue_job('t', '{}', 'k-neg', p_timeout_ms => -1)", "timeout_ms"),
    ("select * from enqueue_jobs('[{\"type\": \"t\", \"payload\": {}, \"idempotency_key\": \"b\", \"timeout_ms\": 0}]')",
     "jobs"),
    ("select * from enqueue_jobs('[{\"type\": \"t\", \"payload\": {}, \"idempotency_key\": \"b\", \"timeout_ms\": \"1\"}]')",
     "jobs"),
    ("select * from enqueue_jobs('[{\"type\": \"t\", \"payload\": {}, \"idempotency_key\": \"b\", \"timeout_ms\": 1.5}]')",
     "jobs"),
    ("select * from register_task_types('[{\"name\": \"t\", \"payload_schema\": {}, \"timeout_ms\": 0}]')", "types"),
    ("select * from register_task_types('[{\"name\": \"t\", \"payload_schema\": {}, \"timeout_ms\": \"1\"}]')", "types"),
])
def test_timeout_out_of_range_is_qv400_and_changes_nothing(conn: psycopg.Connection, statement: str,
                                                           column: str) -> None:
    before = snapshot(conn)
    exc = _refused(lambda: conn.execute(statement), "QV400")
    assert exc.diag.column_name == column
    assert snapshot(conn) == before


def test_mark_timed_out_refuses_before_the_deadline_and_without_one(conn: psycopg.Connection) -> None:
    enqueue(conn, type="t", payload={}, timeout_ms=600_000)
    job = db.claim_job(conn, worker_id="w1")
    assert job is not None
    before = snapshot(conn)
    exc = _refused(lambda: db.mark_timed_out(conn, job_id=job.id, lease_token=job.lease_token), "QS409")
    assert exc.diag.message_detail.endswith("ms left")
    enqueue(conn, type="t", payload={})
    plain = db.claim_job(conn, worker_id="w1")
    assert plain is not None and plain.deadline_at is None
    before = snapshot(conn)
    _refused(lambda: db.mark_timed_out(conn, job_id=plain.id, lease_token=plain.lease_token), "QS409")
    _refused(lambda: db.mark_timed_out(conn, job_id=job.id, lease_token=uuid.uuid4()), "QL409")
    _refused(lambda: db.mark_timed_out(conn, job_id=uuid.uuid4(), lease_token=job.lease_token), "QN404")
    _refused(lambda: conn.execute("select * from mark_timed_out(null, gen_random_uuid())"), "QV400")
    _refused(lambda: db.mark_timed_out(conn, job_id=job.id, lease_token=job.lease_token, base_ms=-1), "QV400")
    assert snapshot(conn) == before
    assert job_row(conn, job.id)["status"] == "processing"


def test_mark_timed_out_after_the_deadline_records_it_as_the_sweep_would(conn: psycopg.Connection) -> None:
    now = _now(conn)
    job = _claim_at(conn, now - timedelta(seconds=5), max_attempts=2, timeout_ms=1000)  # its deadline 4 s ago
    done = db.mark_timed_out(conn, job_id=job.id, lease_token=job.lease_token, base_ms=0, max_jitter_ms=0)
    assert (done.status, done.already_recorded, done.attempts) == ("failed", False, 1)
    assert done.last_error.startswith("timed out after 1000 ms") and done.run_at <= _now(conn)
    again = db.mark_timed_out(conn, job_id=job.id, lease_token=job.lease_token)  # its reply was lost
    assert (again.status, again.already_recorded) == ("failed", True)
    assert [a["outcome"] for a in _attempts(conn, job.id)] == ["timed_out"]
    # The late result of the attempt is refused: its token no longer holds the job.
    _refused(lambda: db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token), "QL409")
    # Its last attempt: the job ends dead, with the timeout as its error.
    last = _claim_at(conn, now - timedelta(seconds=5), max_attempts=1, timeout_ms=2000)
    dead = db.mark_timed_out(conn, job_id=last.id, lease_token=last.lease_token)
    assert dead.status == "dead" and dead.finished_at is not None
    assert dead.last_error.startswith("timed out after 2000 ms")


def test_mark_timed_out_of_a_job_asked_to_cancel_ends_it_cancelled(conn: psycopg.Connection) -> None:
    now = _now(conn)
    job = _claim_at(conn, now - timedelta(seconds=5), timeout_ms=1000)
    db.cancel_job(conn, job_id=job.id)
    done = db.mark_timed_out(conn, job_id=job.id, lease_token=job.lease_token)
    assert (done.status, done.already_recorded) == ("cancelled", False)
    assert [a["outcome"] for a in _attempts(conn, job.id)] == ["cancelled"]
    assert db.mark_timed_out(conn, job_id=job.id, lease_token=job.lease_token).already_recorded


def test_cancel_of_a_running_job_caps_its_deadline_and_the_sweep_ends_it_cancelled(conn: psycopg.Connection) -> None:
    enqueue(conn, type="t", payload={})  # no timeout: no deadline until the cancel
    job = db.claim_job(conn, worker_id="w1", lease_ms=60_000)
    assert job is not None and job.deadline_at is None and job.lease_expires_at is not None
    asked = db.cancel_job(conn, job_id=job.id)
    assert asked.status == "processing"
    assert asked.deadline_at == asked.cancel_requested_at  # now: the request's own time
    assert asked.lease_expires_at == job.lease_expires_at  # what is left of the lease is the worker's
    assert _attempts(conn, job.id)[0]["deadline_at"] == asked.deadline_at
    # The lease is extended no more (nor cut short): the worker that does not look is stopped at its end.
    [lease] = db.heartbeat(conn, leases=[(job.id, job.lease_token)], lease_ms=60_000)
    assert lease.cancel_requested and lease.lease_expires_at == job.lease_expires_at
    assert db.sweep_stuck_at(conn, now=job.lease_expires_at - timedelta(milliseconds=1)) == []
    [swept] = db.sweep_stuck_at(conn, now=job.lease_expires_at + timedelta(milliseconds=1))
    assert swept.status == "cancelled"
    row = job_row(conn, job.id)
    assert row["status"] == "cancelled" and row["finished_at"] is not None
    assert row["last_error"].startswith("cancelled on request")
    # The attempt ended by its cancel, as a worker's mark_cancelled would have ended it.
    [attempt] = rows(conn, "select outcome, abandon_reason, error from job_attempts where job_id = %s", [job.id])
    assert (attempt["outcome"], attempt["abandon_reason"]) == ("cancelled", None)
    assert attempt["error"].startswith("cancelled on request")


def test_cancel_asked_after_the_lease_ran_out_leaves_the_attempt_abandoned(conn: psycopg.Connection) -> None:
    # The worker stopped responding before the request: its attempt was not stopped by the cancel.
    now = _now(conn)
    job = _claim_at(conn, now - timedelta(hours=1))
    assert job.lease_expires_at is not None
    asked = db.cancel_job(conn, job_id=job.id)
    assert asked.status == "processing" and job.lease_expires_at < asked.deadline_at
    [swept] = db.sweep_stuck_at(conn, now=now)
    assert swept.status == "cancelled"
    [attempt] = rows(conn, "select outcome, abandon_reason from job_attempts where job_id = %s", [job.id])
    assert (attempt["outcome"], attempt["abandon_reason"]) == ("abandoned", "lease_expired")
    assert job_row(conn, job.id)["last_error"].startswith("worker w1 stopped responding")


def test_cancel_moves_an_attempts_later_deadline_to_now_and_keeps_an_earlier_one(conn: psycopg.Connection) -> None:
    enqueue(conn, type="t", payload={}, timeout_ms=600_000)
    job = db.claim_job(conn, worker_id="w1")
    assert job is not None
    asked = db.cancel_job(conn, job_id=job.id)
    assert asked.deadline_at == asked.cancel_requested_at < job.deadline_at
    now = _now(conn)
    past = _claim_at(conn, now - timedelta(seconds=5), timeout_ms=1000)
    assert db.cancel_job(conn, job_id=past.id).deadline_at == past.deadline_at  # passed already: kept
    # Its lease ran to its deadline, and a cancel was asked: the sweep ends it cancelled, not timed out.
    [swept] = db.sweep_stuck_at(conn, now=now)
    assert (swept.job_id, swept.status) == (past.id, "cancelled")
    assert [a["outcome"] for a in _attempts(conn, past.id)] == ["cancelled"]


def test_report_timeline_shows_the_deadline_and_the_timeout(conn: psycopg.Connection) -> None:
    now = _now(conn)
    job = _claim_at(conn, now - timedelta(seconds=5), timeout_ms=1000)
    db.mark_timed_out(conn, job_id=job.id, lease_token=job.lease_token)
    [line] = db.report_timeline(conn, job_id=job.id)
    assert line.outcome == "timed_out" and line.deadline_at == job.deadline_at
    assert line.error is not None and line.error.startswith("timed out after 1000 ms")


def test_register_task_types_writes_the_code_timeout(conn: psycopg.Connection) -> None:
    conn.execute("select register_task_types(%s)", [Jsonb([{"name": "r", "payload_schema": {}, "timeout_ms": 90}])])
    assert one(conn, "select code_timeout_ms, timeout_ms from task_types where name = 'r'") == {
        "code_timeout_ms": 90, "timeout_ms": None}


def test_task_timeout_ms_is_the_code_default_registered_with_the_type(conn: psycopg.Connection) -> None:
    from pgqw import tasks

    registry = tasks.Registry()

    @registry.task("timed", model=dict, timeout_ms=2500)
    def timed(payload: dict, ctx: Any) -> None:
        return None

    assert timed.timeout_ms == 2500 and timed.registration()["timeout_ms"] == 2500
    tasks.register(conn, registry)
    assert one(conn, "select code_timeout_ms, timeout_ms from task_types where name = 'timed'") == {
        "code_timeout_ms": 2500, "timeout_ms": None}
    assert one(conn, "select timeout_ms from task_type_settings where name = 'timed'") == {"timeout_ms": 2500}
    for bad in (0, -5, 1.5, True):
        with pytest.raises(tasks.TaskDefinitionError):
            registry.task(f"bad_{bad}", model=dict, timeout_ms=bad)(timed.fn)  # type: ignore[arg-type]


def test_sweep_timeout_backoff_counts_only_the_tries_that_failed(conn: psycopg.Connection) -> None:
    """A snoozed or handed-back attempt spends no try, so the backoff of a later timeout is that of its
    first failure (backoff_delay(1)), as mark_failed counts it."""
    conn.execute("update queue_settings set backoff_base_ms = 1000, backoff_max_jitter_ms = 0")
    now = _now(conn)
    job = _claim_at(conn, now, max_attempts=3, timeout_ms=1000)
    db.snooze_job(conn, job_id=job.id, lease_token=job.lease_token, until=now - timedelta(hours=1))
    again = db.claim_job_at(conn, worker_id="w1", now=now + timedelta(seconds=1))
    assert again is not None and again.attempts == 2
    db.release_job(conn, job_id=job.id, lease_token=again.lease_token, reason="shutdown")
    last = db.claim_job_at(conn, worker_id="w1", now=now + timedelta(seconds=2))
    assert last is not None and last.attempts == 3
    [swept] = db.sweep_stuck_at(conn, now=now + timedelta(seconds=3, milliseconds=1))
    assert (swept.attempt, swept.status) == (3, "failed")
    row = job_row(conn, job.id)
    # backoff_delay(1) from the sweep's now(): 1 s, where backoff_delay(3) would be 4 s.
    assert timedelta(0) < row["run_at"] - _now(conn) <= timedelta(seconds=1)
    assert [a["outcome"] for a in _attempts(conn, job.id)] == ["snoozed", "abandoned", "timed_out"]
