"""claim_job / claim_jobs: atomic, ordered, queue-filtered, recorded, never the same job twice."""
from __future__ import annotations

import hashlib
import threading
import uuid
from collections import Counter

import psycopg
import pytest

from pgqw import db
from tests.helpers import enqueue, job_row, one, rows, snapshot


def test_claim_job_takes_pending_job_and_records_attempt(conn: psycopg.Connection) -> None:
    job = enqueue(conn)
    claimed = db.claim_job(conn, worker_id="w1")
    assert claimed is not None and claimed.id == job.id
    assert claimed.status == "processing"
    assert claimed.attempts == 1
    assert claimed.locked_by == "w1"
    assert claimed.started_at is not None
    assert claimed.lease_expires_at is not None and claimed.lease_expires_at > claimed.started_at
    attempt = one(conn, "select * from job_attempts where job_id = %s", [job.id])
    assert (attempt["attempt"], attempt["worker_id"], attempt["outcome"]) == (1, "w1", None)
    assert attempt["started_at"] == claimed.started_at
    # The claimer alone gets the token; the attempt keeps its SHA-256.
    assert isinstance(claimed.lease_token, uuid.UUID)
    assert bytes(attempt["lease_token_hash"]) == hashlib.sha256(claimed.lease_token.bytes).digest()


def test_claim_job_returns_no_row_when_nothing_is_ready(conn: psycopg.Connection) -> None:
    assert db.claim_job(conn, worker_id="w1") is None
    conn.execute("select enqueue_job('t', '{}', 'later', p_run_at => now() + interval '1 hour')")
    assert rows(conn, "select (r.job).*, r.lease_token from claim_job('w1') r") == []


def test_claim_job_from_psql_gives_two_workers_different_jobs(conn: psycopg.Connection) -> None:
    a, b = enqueue(conn), enqueue(conn)
    first = one(conn, "select (r.job).*, r.lease_token from claim_job('w1') r")
    second = one(conn, "select (r.job).*, r.lease_token from claim_job('w2') r")
    assert {first["id"], second["id"]} == {a.id, b.id}
    assert (first["locked_by"], second["locked_by"]) == ("w1", "w2")
    assert first["lease_token"] != second["lease_token"]


def test_claim_job_orders_by_priority_then_run_at(conn: psycopg.Connection) -> None:
    old = enqueue(conn, run_at=None)
    conn.execute("update jobs set run_at = now() - interval '1 hour' where id = %s", [old.id])
    newer = enqueue(conn)
    urgent = enqueue(conn, priority=10)
    order = [db.claim_job(conn, worker_id="w").id for _ in range(3)]
    assert order == [urgent.id, old.id, newer.id]


def test_claim_job_takes_failed_job_once_its_run_at_passes(conn: psycopg.Connection) -> None:
    job = enqueue(conn)
    claimed = db.claim_job(conn, worker_id="w1")
    db.mark_failed(conn, job_id=job.id, lease_token=claimed.lease_token, error="boom", base_ms=60_000)
    assert db.claim_job(conn, worker_id="w2") is None
    later = one(conn, "select (r.job).*, r.lease_token from claim_jobs_at(now() + interval '2 minutes', 'w2', 1) r")
    assert later["id"] == claimed.id and later["attempts"] == 2
    assert later["lease_token"] != claimed.lease_token


def test_claim_job_only_from_given_queues(conn: psycopg.Connection) -> None:
    enqueue(conn, queue="emails")
    flyer = enqueue(conn, queue="flyers")
    got = one(conn, "select (r.job).*, r.lease_token from claim_job('w1', array['flyers', 'reports']) r")
    assert got["id"] == flyer.id
    assert rows(conn, "select (r.job).*, r.lease_token from claim_job('w1', array['reports']) r") == []


def test_claim_jobs_takes_a_batch_in_one_call(conn: psycopg.Connection) -> None:
    jobs = [enqueue(conn) for _ in range(5)]
    got = db.claim_jobs(conn, worker_id="w1", limit=3)
    assert len(got) == 3
    assert {j.id for j in got} <= {j.id for j in jobs}
    assert rows(conn, "select count(*) as n from job_attempts")[0]["n"] == 3
    rest = db.claim_jobs(conn, worker_id="w1", limit=10)
    assert len(rest) == 2
    # One token per attempt, each hashed in its own attempt's row.
    tokens = {j.id: j.lease_token for j in got + rest}
    assert len(set(tokens.values())) == 5
    assert {r["job_id"]: bytes(r["h"]) for r in rows(conn, "select job_id, lease_token_hash as h from job_attempts")} \
        == {i: hashlib.sha256(t.bytes).digest() for i, t in tokens.items()}


def test_claim_job_uses_the_lease_from_settings_or_argument(conn: psycopg.Connection) -> None:
    enqueue(conn)
    enqueue(conn)
    conn.execute("update queue_settings set lease_ms = 5000")
    a = one(conn, "select (r.job).lease_expires_at - (r.job).started_at as lease from claim_job('w1') r")
    b = one(conn, "select (r.job).lease_expires_at - (r.job).started_at as lease from claim_job('w1', p_lease_ms => 250) r")
    assert a["lease"].total_seconds() == 5
    assert b["lease"].total_seconds() == 0.25


@pytest.mark.parametrize(
    "call",
    [
        "select (r.job).*, r.lease_token from claim_job(null) r",
        "select (r.job).*, r.lease_token from claim_job('') r",
        "select (r.job).*, r.lease_token from claim_job('  ') r",
        "select (r.job).*, r.lease_token from claim_job(repeat('w', 201)) r",
        "select (r.job).*, r.lease_token from claim_job('w1', array[]::text[]) r",
        "select (r.job).*, r.lease_token from claim_job('w1', p_lease_ms => 0) r",
        "select (r.job).*, r.lease_token from claim_job('w1', p_lease_ms => -5) r",
        "select (r.job).*, r.lease_token from claim_jobs('w1', 0) r",
        "select (r.job).*, r.lease_token from claim_jobs('w1', -1) r",
        "select (r.job).*, r.lease_token from claim_jobs('w1', null) r",
        "select (r.job).*, r.lease_token from claim_jobs('w1', 1001) r",
        "select (r.job).*, r.lease_token from claim_jobs_at(null, 'w1', 1) r",
        "select (r.job).*, r.lease_token from claim_jobs_at('infinity', 'w1', 1) r",
        "select (r.job).*, r.lease_token from claim_jobs_at(now(), null, 1) r",
        "select (r.job).*, r.lease_token from claim_jobs_at(now(), 'w1', 0) r",
    ],
)
def test_claim_job_bad_input_raises_qv400_and_changes_nothing(conn: psycopg.Connection, call: str) -> None:
    enqueue(conn)
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(call)
    assert exc.value.sqlstate == "QV400"
    assert snapshot(conn) == before


def test_claim_job_skips_a_row_another_transaction_has_locked(connect) -> None:
    """Step by step: A claims inside an open transaction; B does not wait, it takes the next job."""
    a, b = connect(autocommit=False), connect()
    first, second = enqueue(b, "first"), enqueue(b, "second")
    got_a = db.claim_job(a, worker_id="A")
    got_b = db.claim_job(b, worker_id="B")  # would block here without skip locked
    assert got_a.id == first.id and got_b.id == second.id
    assert db.claim_job(b, worker_id="B") is None  # A's row is still locked, and nothing else is ready
    a.commit()
    assert job_row(b, first.id)["locked_by"] == "A"


def test_claim_job_many_threads_never_take_the_same_job(connect) -> None:
    setup = connect()
    total = 300
    setup.execute(
        "select enqueue_job('t', jsonb_build_object('i', i), 'race-' || i) from generate_series(1, %s) i", [total]
    )
    workers = 8
    claimed: list[tuple[str, object]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(workers)
    errors: list[BaseException] = []

    def run(name: str) -> None:
        c = connect()
        try:
            barrier.wait()
            while True:
                got = db.claim_jobs(c, worker_id=name, limit=2) if name.endswith(("1", "3")) else (
                    [j] if (j := db.claim_job(c, worker_id=name)) else [])
                if not got:
                    return
                with lock:
                    claimed.extend((name, j.id) for j in got)
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(f"w{i}",)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    counts = Counter(job_id for _, job_id in claimed)
    assert len(counts) == total
    assert max(counts.values()) == 1
    assert rows(setup, "select count(*) as n from job_attempts")[0]["n"] == total
    assert rows(setup, "select count(*) as n from jobs where status <> 'processing'")[0]["n"] == 0
    assert len({name for name, _ in claimed}) > 1


@pytest.mark.parametrize("call", [
    "select (r.job).*, r.lease_token from claim_job('w1', null, null, now()) r",
    "select (r.job).*, r.lease_token from claim_job('w1', p_now => now()) r",
    "select (r.job).*, r.lease_token from claim_jobs('w1', 1, null, null, now()) r",
    "select (r.job).*, r.lease_token from claim_jobs('w1', 1, p_now => now() + interval '1 day') r",
])
def test_claim_job_takes_no_time_argument(conn: psycopg.Connection, call: str) -> None:
    """A claim uses the server's clock: claiming as of another time is the owner's claim_jobs_at."""
    enqueue(conn)
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(call)
    assert exc.value.sqlstate == "42883"
    assert snapshot(conn) == before


def test_claim_jobs_at_claims_as_of_the_time_given(conn: psycopg.Connection) -> None:
    conn.execute("select enqueue_job('t', '{}', 'in-an-hour', p_run_at => now() + interval '1 hour')")
    assert rows(conn, "select (r.job).*, r.lease_token from claim_jobs_at(now() + interval '59 minutes', 'w1', 5) r") == []
    got = one(conn, "select (r.job).*, r.lease_token, (r.job).lease_expires_at - (r.job).started_at as lease,"
                    " now() + interval '2 hours' as at"
                    " from claim_jobs_at(now() + interval '2 hours', 'w1', 5, p_lease_ms => 1000) r")
    assert (got["started_at"], got["lease"].total_seconds()) == (got["at"], 1)
    assert got["lease_token"] is not None
