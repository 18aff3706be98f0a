"""cancel_job / mark_cancelled: a waiting job ends cancelled at once, a running one is asked to stop
(heartbeat says so) and its attempt ends cancelled; a finished job is refused (QS409); a success after
the request is refused (QK409); a sweep ends a cancel-requested job cancelled; history is kept. The
races are explicit steps across two sessions."""
from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest

from pgqw import db
from pgqw.errors import CancelRequested, LeaseLost, cancel_requested, from_psycopg
from tests.helpers import enqueue, job_row, one, rows, snapshot


def _claimed(conn: psycopg.Connection, worker: str = "w1") -> db.ClaimedJob:
    enqueue(conn)
    job = db.claim_job(conn, worker_id=worker)
    assert job is not None
    return job


def _failed(conn: psycopg.Connection) -> db.Job:
    job = _claimed(conn)
    return db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token, error="boom")


def _refused(call, sqlstate: str) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as exc:
        call()
    assert exc.value.sqlstate == sqlstate
    return exc.value


def _wait_until_blocked(observer: psycopg.Connection, pid: int, by: int, thread: threading.Thread) -> None:
    """Returns once backend pid waits for a lock held by backend by (read from the server, no sleep)."""
    deadline = time.monotonic() + 30
    while by not in one(observer, "select pg_blocking_pids(%s) as pids", [pid])["pids"]:
        assert thread.is_alive(), "the second call finished without waiting for the first"
        assert time.monotonic() < deadline, "the second call never waited for the first"


def test_cancel_job_pending_ends_cancelled_at_once(conn: psycopg.Connection) -> None:
    job = enqueue(conn)
    conn.execute("listen pgqw_finished")
    db.watch_job(conn, job_id=job.id)
    got = db.cancel_job(conn, job_id=job.id)
    assert (got.status, got.attempts) == ("cancelled", 0)
    assert got.finished_at is not None and got.cancel_requested_at is not None
    assert [n.payload for n in conn.notifies(timeout=0, stop_after=1)] == [str(job.id)]
    assert db.claim_job(conn, worker_id="w1") is None


def test_cancel_job_failed_ends_cancelled_and_keeps_its_history(conn: psycopg.Connection) -> None:
    job = _failed(conn)
    assert job.status == "failed"
    got = db.cancel_job(conn, job_id=job.id)
    assert (got.status, got.attempts, got.last_error) == ("cancelled", 1, "boom")
    assert rows(conn, "select attempt, outcome, error from job_attempts where job_id = %s", [job.id]) == [
        {"attempt": 1, "outcome": "failed", "error": "boom"}]
    assert rows(conn, "select (r.job).*, r.lease_token from claim_jobs_at(now() + interval '10 days', 'w1', 1) r") == []


def test_cancel_job_processing_is_requested_and_heartbeat_answers_it(conn: psycopg.Connection) -> None:
    job = _claimed(conn)
    [lease] = db.heartbeat(conn, leases=[(job.id, job.lease_token)])
    assert lease.cancel_requested is False
    got = db.cancel_job(conn, job_id=job.id)
    assert (got.status, got.locked_by) == ("processing", "w1") and got.cancel_requested_at is not None
    [lease] = db.heartbeat(conn, leases=[(job.id, job.lease_token)])
    assert lease.cancel_requested is True
    # Asked twice: the same answer, the first request's time.
    again = db.cancel_job(conn, job_id=job.id)
    assert (again.status, again.cancel_requested_at) == ("processing", got.cancel_requested_at)


def test_mark_cancelled_ends_the_attempt_and_the_job_cancelled(conn: psycopg.Connection) -> None:
    job = _claimed(conn)
    db.cancel_job(conn, job_id=job.id)
    conn.execute("listen pgqw_finished")
    db.watch_job(conn, job_id=job.id)
    done = db.mark_cancelled(conn, job_id=job.id, lease_token=job.lease_token)
    assert (done.status, done.already_recorded, done.locked_by) == ("cancelled", False, None)
    assert done.finished_at is not None
    assert [n.payload for n in conn.notifies(timeout=0, stop_after=1)] == [str(job.id)]
    attempt = one(conn, "select outcome, error, finished_at from job_attempts where job_id = %s", [job.id])
    assert attempt["outcome"] == "cancelled" and attempt["finished_at"] is not None
    # A retry after a lost reply is answered, not refused.
    again = db.mark_cancelled(conn, job_id=job.id, lease_token=job.lease_token)
    assert (again.status, again.already_recorded) == ("cancelled", True)


def test_mark_cancelled_without_a_request_is_refused(conn: psycopg.Connection) -> None:
    job = _claimed(conn)
    before = snapshot(conn)
    _refused(lambda: db.mark_cancelled(conn, job_id=job.id, lease_token=job.lease_token), "QS409")
    _refused(lambda: db.mark_cancelled(conn, job_id=job.id, lease_token=uuid.uuid4()), "QL409")
    assert snapshot(conn) == before


def test_mark_failed_after_a_request_ends_the_job_cancelled(conn: psycopg.Connection) -> None:
    job = _claimed(conn)
    db.cancel_job(conn, job_id=job.id)
    done = db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token, error="stopped: cancelled")
    assert (done.status, done.last_error) == ("cancelled", "stopped: cancelled")
    assert done.finished_at is not None
    assert one(conn, "select outcome, error from job_attempts where job_id = %s", [job.id]) == {
        "outcome": "cancelled", "error": "stopped: cancelled"}
    again = db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token, error="stopped: cancelled")
    assert (again.status, again.already_recorded) == ("cancelled", True)


def test_release_job_after_a_request_ends_the_job_cancelled(conn: psycopg.Connection) -> None:
    job = _claimed(conn)
    db.cancel_job(conn, job_id=job.id)
    done = db.release_job(conn, job_id=job.id, lease_token=job.lease_token, reason="shutting down")
    assert (done.status, done.max_attempts) == ("cancelled", job.max_attempts)
    assert one(conn, "select outcome, abandon_reason from job_attempts where job_id = %s", [job.id]) == {
        "outcome": "cancelled", "abandon_reason": None}


def test_mark_succeeded_after_a_request_is_refused_and_stores_nothing(conn: psycopg.Connection) -> None:
    job = _claimed(conn)
    db.cancel_job(conn, job_id=job.id)
    before = snapshot(conn)
    exc = _refused(lambda: db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token,
                                             result=("application/json", "late", None)), "QK409")
    assert exc.diag.table_name == "job_cancel_requests"  # the refusal still names the table
    assert cancel_requested(exc)
    refusal = from_psycopg(exc)
    assert isinstance(refusal, CancelRequested) and isinstance(refusal, LeaseLost)
    assert refusal.table_name == "job_cancel_requests"
    lost = _refused(lambda: db.mark_succeeded(conn, job_id=job.id, lease_token=uuid.uuid4()), "QL409")
    assert not cancel_requested(lost)  # a lost lease is not a cancel
    done = db.mark_jobs_succeeded(conn, done=[(job.id, job.lease_token)])
    assert done == []
    assert snapshot(conn) == before
    assert rows(conn, "select * from job_results") == []
    assert job_row(conn, job.id)["status"] == "processing"


def test_sweep_of_a_cancel_requested_job_ends_it_cancelled(conn: psycopg.Connection) -> None:
    job = _claimed(conn)
    db.cancel_job(conn, job_id=job.id)
    [swept] = db.sweep_stuck_at(conn, now=job.lease_expires_at + (job.lease_expires_at - job.started_at))
    assert (swept.job_id, swept.status) == (job.id, "cancelled")
    row = job_row(conn, job.id)
    assert row["status"] == "cancelled" and row["finished_at"] is not None and row["locked_by"] is None
    # Its lease, extended no more after the request, ran out: the attempt was stopped by the cancel.
    assert one(conn, "select outcome, abandon_reason from job_attempts where job_id = %s", [job.id]) == {
        "outcome": "cancelled", "abandon_reason": None}


@pytest.mark.parametrize("end", ["succeeded", "cancelled"])
def test_cancel_job_finished_is_refused_with_qs409(conn: psycopg.Connection, end: str) -> None:
    job = _claimed(conn)
    if end == "succeeded":
        db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token)
    else:
        db.cancel_job(conn, job_id=job.id)
        db.mark_cancelled(conn, job_id=job.id, lease_token=job.lease_token)
    before = snapshot(conn)
    exc = _refused(lambda: db.cancel_job(conn, job_id=job.id), "QS409")
    assert end in exc.diag.message_primary
    assert snapshot(conn) == before


def test_cancel_job_of_a_dead_job_gives_it_up(conn: psycopg.Connection) -> None:
    # A person gives up on a dead job: it ends cancelled, its error and attempts kept.
    job = _claimed(conn)
    db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token, error="x", retryable=False)
    cancelled = db.cancel_job(conn, job_id=job.id)
    assert cancelled.status == "cancelled" and cancelled.last_error == "x" and cancelled.attempts == 1
    assert cancelled.finished_at is not None


def test_cancel_job_unknown_is_qn404_and_null_is_qv400(conn: psycopg.Connection) -> None:
    enqueue(conn)
    before = snapshot(conn)
    _refused(lambda: db.cancel_job(conn, job_id=uuid.uuid4()), "QN404")
    _refused(lambda: conn.execute("select (r.job).*, r.cancel_requested_at from cancel_job(null) r"), "QV400")
    assert snapshot(conn) == before


def test_retry_dead_refuses_a_cancelled_job(conn: psycopg.Connection) -> None:
    job = enqueue(conn)
    db.cancel_job(conn, job_id=job.id)
    _refused(lambda: db.retry_dead(conn, job_id=job.id), "QS409")


# ---- two sessions ------------------------------------------------------------------------------------

def test_cancel_job_holding_the_row_makes_a_claim_skip_it(connect) -> None:
    """A cancels inside an open transaction; B's claim does not wait and finds nothing; A commits:
    the job is cancelled and never claimed."""
    a, b = connect(autocommit=False), connect()
    job = enqueue(b)
    assert db.cancel_job(a, job_id=job.id).status == "cancelled"
    assert db.claim_job(b, worker_id="B") is None
    a.commit()
    assert db.claim_job(b, worker_id="B") is None
    assert job_row(b, job.id)["status"] == "cancelled"


def test_cancel_job_after_a_claim_in_flight_waits_and_requests(connect) -> None:
    """A claims inside an open transaction; B's cancel waits for A's row lock; A commits: B sees the
    job processing and records the request."""
    a, b, observer = connect(autocommit=False), connect(), connect()
    job = enqueue(observer)
    claimed = db.claim_job(a, worker_id="A")
    answers: list[db.CancelledJob] = []
    errors: list[BaseException] = []

    def cancel() -> None:
        try:
            answers.append(db.cancel_job(b, job_id=job.id))
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    thread = threading.Thread(target=cancel)
    thread.start()
    _wait_until_blocked(observer, b.info.backend_pid, a.info.backend_pid, thread)
    a.commit()
    thread.join(30)
    assert not thread.is_alive() and errors == []
    assert (answers[0].status, answers[0].locked_by) == ("processing", "A")
    [lease] = db.heartbeat(observer, leases=[(claimed.id, claimed.lease_token)])
    assert lease.cancel_requested is True


@pytest.mark.parametrize("first", ["cancel", "success"])
def test_cancel_job_racing_mark_succeeded_one_wins(connect, first: str) -> None:
    """Whichever of cancel_job and mark_succeeded takes the job's row first wins; the other waits and
    then sees its result: a success after the request is refused (QK409, no result stored), a cancel
    after the success is refused (QS409)."""
    a, b, observer = connect(autocommit=False), connect(), connect()
    job = _claimed(observer)
    errors: list[BaseException] = []
    if first == "cancel":
        db.cancel_job(a, job_id=job.id)
        second = lambda: db.mark_succeeded(b, job_id=job.id, lease_token=job.lease_token,  # noqa: E731
                                           result=("application/json", "late", None))
    else:
        db.mark_succeeded(a, job_id=job.id, lease_token=job.lease_token, result=("application/json", "ok", None))
        second = lambda: db.cancel_job(b, job_id=job.id)  # noqa: E731

    def run() -> None:
        try:
            second()
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    _wait_until_blocked(observer, b.info.backend_pid, a.info.backend_pid, thread)
    a.commit()
    thread.join(30)
    assert not thread.is_alive()
    [error] = errors
    assert isinstance(error, psycopg.Error)
    if first == "cancel":
        assert error.sqlstate == "QK409"
        assert rows(observer, "select * from job_results") == []
        assert job_row(observer, job.id)["status"] == "processing"
        assert db.mark_cancelled(observer, job_id=job.id, lease_token=job.lease_token).status == "cancelled"
    else:
        assert error.sqlstate == "QS409"
        assert job_row(observer, job.id)["status"] == "succeeded"
        assert rows(observer, "select value from job_results") == [{"value": "ok"}]
