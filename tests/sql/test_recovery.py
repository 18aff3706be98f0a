"""heartbeat, sweep_stuck, release_job and retry_dead: nothing is lost when workers die or stop."""
from __future__ import annotations

import uuid
from datetime import timedelta

import psycopg
import pytest

from pgqw import db
from tests.helpers import enqueue, job_row, one, rows
from tests.sql.queue_state import results_only_for_succeeded_jobs, snapshot


def test_heartbeat_extends_lease_of_held_jobs_only(conn: psycopg.Connection) -> None:
    enqueue(conn)
    enqueue(conn)
    mine = db.claim_job(conn, worker_id="w1", lease_ms=1000)
    other = db.claim_job(conn, worker_id="w2", lease_ms=1000)
    # Its own job with its token; the other job with a made-up token, and with this job's token.
    leases = db.heartbeat(conn, leases=[(mine.id, mine.lease_token), (other.id, uuid.uuid4()),
                                        (other.id, mine.lease_token)], lease_ms=600_000)
    assert [lease.job_id for lease in leases] == [mine.id]
    assert job_row(conn, mine.id)["lease_expires_at"] > mine.lease_expires_at
    assert job_row(conn, other.id)["lease_expires_at"] == other.lease_expires_at
    assert db.heartbeat(conn, leases=[]) == []


def test_sweep_stuck_requeues_expired_job_and_abandons_attempt(conn: psycopg.Connection) -> None:
    job = enqueue(conn)
    db.claim_job(conn, worker_id="w-crash", lease_ms=1)
    swept = one(conn, "select * from sweep_stuck_at(now() + interval '1 second')")
    assert (swept["job_id"], swept["attempt"], swept["worker_id"], swept["status"]) == (
        job.id, 1, "w-crash", "pending")
    row = job_row(conn, job.id)
    assert row["status"] == "pending" and row["locked_by"] is None
    assert "w-crash" in row["last_error"] and "stopped responding" in row["last_error"]
    attempt = one(conn, "select * from job_attempts where job_id = %s", [job.id])
    assert attempt["outcome"] == "abandoned" and "w-crash" in attempt["error"]
    retaken = db.claim_job(conn, worker_id="w-new")
    assert retaken.id == job.id and retaken.attempts == 2


def test_sweep_stuck_leaves_live_leases_alone(conn: psycopg.Connection) -> None:
    enqueue(conn)
    db.claim_job(conn, worker_id="w1", lease_ms=60_000)
    before = snapshot(conn)
    assert db.sweep_stuck(conn) == []
    assert snapshot(conn) == before


def test_sweep_stuck_after_heartbeat_does_not_take_the_job(conn: psycopg.Connection) -> None:
    enqueue(conn)
    job = db.claim_job(conn, worker_id="w1", lease_ms=1)
    db.heartbeat(conn, leases=[(job.id, job.lease_token)], lease_ms=60_000)
    assert db.sweep_stuck_at(conn, now=job.lease_expires_at + timedelta(seconds=1)) == []
    assert db.sweep_stuck(conn) == []
    assert job_row(conn, job.id)["status"] == "processing"


def test_sweep_stuck_last_attempt_goes_dead(conn: psycopg.Connection) -> None:
    job = enqueue(conn, max_attempts=1)
    conn.execute("insert into job_isolation (job_id) values (%s)", [job.id])  # it ran alone: its attempt counts
    db.claim_job(conn, worker_id="w-crash", lease_ms=1)
    swept = one(conn, "select * from sweep_stuck_at(now() + interval '1 second')")
    assert swept["status"] == "dead"
    row = job_row(conn, job.id)
    assert row["status"] == "dead" and row["finished_at"] is not None and row["last_error"]
    assert "while it ran alone" in row["last_error"]


def test_sweep_stuck_notifies_workers(db_url: str, conn: psycopg.Connection) -> None:
    enqueue(conn)
    db.claim_job(conn, worker_id="w-crash", lease_ms=1)
    with psycopg.connect(db_url, autocommit=True) as listener:
        db.listen(listener)
        conn.execute("select * from sweep_stuck_at(now() + interval '1 second')")
        assert [n.payload for n in listener.notifies(timeout=2, stop_after=1)] == ["*"]


def test_sweep_stuck_at_null_now_raises_qv400(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as exc:
        conn.execute("select * from sweep_stuck_at(null)")
    assert exc.value.sqlstate == "QV400"


def test_sweep_stuck_takes_no_time_argument(conn: psycopg.Connection) -> None:
    """sweep_stuck uses the server's clock: sweeping as of another time is the owner's sweep_stuck_at."""
    for call in ("select * from sweep_stuck(null)", "select * from sweep_stuck(now() + interval '1 day')"):
        with pytest.raises(psycopg.Error) as exc:
            conn.execute(call)
        assert exc.value.sqlstate == "42883"


def test_sweep_stuck_skips_rows_locked_by_a_finishing_worker(connect) -> None:
    """Step by step: the owner is marking the job in an open transaction; the sweep must not wait or take it."""
    owner, sweeper = connect(autocommit=False), connect()
    enqueue(sweeper)
    job = db.claim_job(sweeper, worker_id="w1", lease_ms=1)
    db.mark_succeeded(owner, job_id=job.id, lease_token=job.lease_token)  # row locked, not committed
    assert rows(sweeper, "select * from sweep_stuck_at(now() + interval '1 second')") == []
    owner.commit()
    assert job_row(sweeper, job.id)["status"] == "succeeded"


def test_release_job_hands_back_without_spending_an_attempt(conn: psycopg.Connection) -> None:
    job = enqueue(conn, max_attempts=1)
    claimed = db.claim_job(conn, worker_id="w1")
    released = db.release_job(conn, job_id=job.id, lease_token=claimed.lease_token, reason="worker w1 shutting down")
    assert released.status == "pending" and released.locked_by is None
    assert released.max_attempts == 2  # the handed-back attempt is not one of the job's tries
    attempt = one(conn, "select * from job_attempts where job_id = %s", [job.id])
    assert attempt["outcome"] == "abandoned" and "shutting down" in attempt["error"]
    again = db.claim_job(conn, worker_id="w2")
    assert again.id == job.id and again.attempts == 2
    assert again.lease_token != claimed.lease_token


def test_release_job_not_held_raises_ql409(conn: psycopg.Connection) -> None:
    job = enqueue(conn)
    db.claim_job(conn, worker_id="w1")
    enqueue(conn)
    other = db.claim_job(conn, worker_id="w2")
    before = snapshot(conn)
    for token in (uuid.uuid4(), other.lease_token):  # a made-up token, another job's
        with pytest.raises(psycopg.Error) as exc:
            db.release_job(conn, job_id=job.id, lease_token=token, reason="x")
        assert exc.value.sqlstate == "QL409"
    assert snapshot(conn) == before


def _dead(conn: psycopg.Connection, max_attempts: int = 2) -> db.Job:
    job = enqueue(conn, max_attempts=max_attempts)
    for _ in range(max_attempts):
        claimed = one(conn, "select (r.job).*, r.lease_token from claim_jobs_at(now() + interval '1 day', 'w1', 1) r")
        conn.execute("select mark_failed(%s, %s, 'broken')", [job.id, claimed["lease_token"]])
    assert job_row(conn, job.id)["status"] == "dead"
    return job


def test_retry_dead_puts_job_back_with_attempts_continuing(conn: psycopg.Connection) -> None:
    job = _dead(conn)
    retried = one(conn, "select * from retry_dead(%s)", [job.id])
    assert retried["status"] == "pending"
    assert retried["attempts"] == 2 and retried["max_attempts"] == 7
    assert retried["finished_at"] is None
    again = one(conn, "select (r.job).*, r.lease_token from claim_job('w9') r")
    assert again["id"] == job.id and again["attempts"] == 3
    assert [r["attempt"] for r in rows(conn, "select attempt from job_attempts where job_id = %s"
                                             " order by attempt", [job.id])] == [1, 2, 3]


def test_retry_dead_extra_attempts_argument(conn: psycopg.Connection) -> None:
    job = _dead(conn)
    assert db.retry_dead(conn, job_id=job.id, extra_attempts=1).max_attempts == 3


@pytest.mark.parametrize(
    "call, code",
    [
        ("select retry_dead(null)", "QV400"),
        ("select retry_dead({dead}, 0)", "QV400"),
        ("select retry_dead({dead}, -1)", "QV400"),
        ("select retry_dead('00000000-0000-0000-0000-000000000000')", "QN404"),
        ("select retry_dead({pending})", "QS409"),
        ("select retry_dead('not-a-uuid')", "22P02"),
    ],
)
def test_retry_dead_bad_input_raises_and_changes_nothing(conn: psycopg.Connection, call: str, code: str) -> None:
    dead = _dead(conn)
    pending = enqueue(conn)
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(call.format(dead=f"'{dead.id}'", pending=f"'{pending.id}'"))
    assert exc.value.sqlstate == code
    assert snapshot(conn) == before


@pytest.mark.parametrize(
    "call",
    [
        "select * from heartbeat(null, array[]::uuid[])",
        "select * from heartbeat(array[]::uuid[], null)",
        "select * from heartbeat(array[gen_random_uuid()], array[]::uuid[])",
        "select * from heartbeat(array[]::uuid[], array[gen_random_uuid()])",
        "select * from heartbeat(array[]::uuid[], array[]::uuid[], 0)",
        "select release_job(null, gen_random_uuid())",
        "select release_job(gen_random_uuid(), null)",
        "select * from register_worker(null, array['listing_flyer'])",
        "select * from register_worker('w1', null)",
        "select * from stop_worker(null)",
    ],
)
def test_recovery_functions_bad_input_raises_qv400(conn: psycopg.Connection, call: str) -> None:
    enqueue(conn)
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(call)
    assert exc.value.sqlstate == "QV400"
    assert snapshot(conn) == before


def test_sweep_stuck_then_a_rerun_stores_one_result_and_the_crashed_attempt_none(conn: psycopg.Connection) -> None:
    """What save_flyer's "one flyer however many runs" guaranteed, now that a result is stored with its
    success: the worker that lost its lease cannot store its result late, the re-run's is the one."""
    job = enqueue(conn)
    crashed = db.claim_job(conn, worker_id="w-crash", lease_ms=1)
    assert one(conn, "select status from sweep_stuck_at(now() + interval '1 second')")["status"] == "pending"
    assert db.get_result(conn, job_id=job.id) is None  # an abandoned attempt leaves no result
    retaken = db.claim_job(conn, worker_id="w-new")
    assert retaken is not None and (retaken.id, retaken.attempts) == (job.id, 2)
    db.mark_succeeded(conn, job_id=job.id, lease_token=retaken.lease_token, result=("application/pdf", None, b"%PDF-2"))

    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        db.mark_succeeded(conn, job_id=job.id, lease_token=crashed.lease_token,
                          result=("application/pdf", None, b"%PDF-late"))
    assert exc.value.sqlstate == "QL409"
    assert snapshot(conn) == before
    result = db.get_result(conn, job_id=job.id)
    assert result is not None and bytes(result.data or b"") == b"%PDF-2"
    results_only_for_succeeded_jobs(conn)


def test_retry_dead_job_succeeds_with_its_one_result(conn: psycopg.Connection) -> None:
    job = enqueue(conn, max_attempts=1)
    claimed = db.claim_job(conn, worker_id="w1")
    db.mark_failed(conn, job_id=job.id, lease_token=claimed.lease_token, error="boom", retryable=False)
    assert db.get_result(conn, job_id=job.id) is None  # dead: no result
    db.retry_dead(conn, job_id=job.id)
    again = db.claim_job(conn, worker_id="w2")
    # The dead attempt's token does not speak for the retry's.
    with pytest.raises(psycopg.Error) as exc:
        db.mark_succeeded(conn, job_id=job.id, lease_token=claimed.lease_token, result=("application/json", [0], None))
    assert exc.value.sqlstate == "QL409"
    db.mark_succeeded(conn, job_id=job.id, lease_token=again.lease_token, result=("application/json", [1], None))
    result = db.get_result(conn, job_id=job.id)
    assert result is not None and (result.content_type, result.value) == ("application/json", [1])
    results_only_for_succeeded_jobs(conn)
