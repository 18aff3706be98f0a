"""Recovery that loses nothing and blames no bystander.

  - a cancel committed while the sweep runs is honoured: 2,000 jobs whose worker died, swept while four
    sessions cancel them; every cancel answered "requested" (the job was processing) ends cancelled
  - a claim does not start a job that has a cancel request; retry_dead drops an old request
  - a worker that stopped responding while it held several jobs: each gets its lost attempt back and runs
    alone (job_isolation); a lapse while a job ran alone counts
  - max_attempts stays within 1..1000 through hand-backs, sweeps and retries
  - a claim refuses a transaction that is not read committed
"""
from __future__ import annotations

import threading
import uuid

import psycopg
import pytest

from pgqw import db
from tests.helpers import enqueue, job_row


def _stuck(conn: psycopg.Connection, n: int, worker: str = "gone") -> list[uuid.UUID]:
    """n jobs held by a worker whose leases already ran out."""
    conn.execute("insert into jobs (type, payload, idempotency_key, max_attempts) "
                 "select 'listing_flyer', '{}', 'stuck-' || g, 3 from generate_series(1, %s) g", [n])
    ids: list[uuid.UUID] = []
    while len(ids) < n:
        ids += [j.id for j in db.claim_jobs(conn, worker_id=worker, limit=min(1000, n - len(ids)), lease_ms=1)]
    return ids


def test_sweep_cancel_race_loses_no_cancel(db_url: str, conn: psycopg.Connection) -> None:
    ids = _stuck(conn, 2000)
    answers: dict[uuid.UUID, str] = {}
    start = threading.Barrier(5)
    errors: list[BaseException] = []

    def cancel(part: list[uuid.UUID]) -> None:
        try:
            with psycopg.connect(db_url, autocommit=True) as c:
                start.wait()
                for job_id in part:
                    try:
                        answers[job_id] = db.cancel_job(c, job_id=job_id).status
                    except psycopg.Error as exc:  # swept to dead first: already final
                        assert exc.sqlstate == "QS409", exc
                        answers[job_id] = "final"
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=cancel, args=(ids[n::4],)) for n in range(4)]
    for t in threads:
        t.start()
    swept: list[db.Swept] = []
    with psycopg.connect(db_url, autocommit=True) as sweeper:
        start.wait()
        # As the periodic sweep does while the cancels come in: a job a cancel holds is skipped, and taken
        # by a later round.
        while any(t.is_alive() for t in threads) or not swept:
            swept += db.sweep_stuck(sweeper)
        for t in threads:
            t.join()
        swept += db.sweep_stuck(sweeper)
    assert errors == []
    assert len(swept) == len(ids)
    rows = dict(conn.execute("select id, status from jobs where id = any(%s)", [ids]).fetchall())
    requested = [i for i, a in answers.items() if a == "processing"]
    lost = [i for i in requested if rows[i] != "cancelled"]
    assert lost == [], f"{len(lost)} of {len(requested)} cancels answered 'requested' were lost"
    assert all(rows[i] == "cancelled" for i, a in answers.items() if a == "cancelled")
    # Nothing a cancel reached is left to run again.
    assert [i for i, a in answers.items() if a != "final" and rows[i] in ("pending", "failed")] == []


def test_sweep_cancel_request_committed_before_the_sweep_is_honoured(conn: psycopg.Connection) -> None:
    [job_id] = _stuck(conn, 1)
    assert db.cancel_job(conn, job_id=job_id).status == "processing"
    [swept] = db.sweep_stuck(conn)
    assert swept.status == "cancelled" and job_row(conn, job_id)["status"] == "cancelled"


def test_claim_does_not_start_a_job_asked_to_cancel(conn: psycopg.Connection) -> None:
    job = enqueue(conn)
    conn.execute("insert into job_cancel_requests (job_id) values (%s)", [job.id])  # left from before
    assert db.claim_job(conn, worker_id="w1") is None
    row = job_row(conn, job.id)
    assert row["status"] == "cancelled" and row["finished_at"] is not None and row["attempts"] == 0


def test_retry_dead_drops_an_old_cancel_request(conn: psycopg.Connection) -> None:
    job = enqueue(conn, max_attempts=1)
    claimed = db.claim_job(conn, worker_id="w1")
    assert claimed is not None
    conn.execute("insert into job_cancel_requests (job_id) values (%s)", [job.id])
    db.mark_failed(conn, job_id=job.id, lease_token=claimed.lease_token, error="boom", retryable=False)
    assert job_row(conn, job.id)["status"] == "cancelled"  # asked to cancel: the failure ends it cancelled
    other = enqueue(conn, max_attempts=1)
    c = db.claim_job(conn, worker_id="w1")
    assert c is not None and c.id == other.id
    db.mark_failed(conn, job_id=other.id, lease_token=c.lease_token, error="boom", retryable=False)
    conn.execute("insert into job_cancel_requests (job_id) values (%s)", [other.id])  # dead, then asked
    db.retry_dead(conn, job_id=other.id)
    assert conn.execute("select count(*) from job_cancel_requests where job_id = %s", [other.id]).fetchone() == (0,)
    again = db.claim_job(conn, worker_id="w1")
    assert again is not None and again.id == other.id  # a person wants it run: it runs


def _expire(conn: psycopg.Connection) -> list[db.Swept]:
    return db.sweep_stuck_at(conn, now=conn.execute("select now() + interval '1 hour'").fetchone()[0])


def test_isolation_a_dead_workers_jobs_get_their_attempt_back_and_run_alone(conn: psycopg.Connection) -> None:
    jobs = [enqueue(conn, max_attempts=2) for _ in range(3)]
    held = db.claim_jobs(conn, worker_id="crashed", limit=3, lease_ms=1)
    assert len(held) == 3
    swept = _expire(conn)
    assert sorted(s.status for s in swept) == ["pending"] * 3
    for job in jobs:
        row = job_row(conn, job.id)
        assert (row["attempts"], row["max_attempts"]) == (1, 3)  # the lost attempt is given back
        assert "given back" in row["last_error"]
    assert conn.execute("select count(*) from job_isolation").fetchone() == (3,)

    busy = enqueue(conn, queue="other")
    ordinary = db.claim_job(conn, worker_id="busy", queues=["other"])
    assert ordinary is not None and ordinary.id == busy.id
    # A worker that holds another job takes no isolated job, and nothing else, while one is ready.
    assert db.claim_jobs(conn, worker_id="busy", limit=10) == []
    # One that holds none takes exactly one, even asked for ten, then nothing while it runs it.
    [alone] = db.claim_jobs(conn, worker_id="w2", limit=10)
    assert alone.id in {j.id for j in jobs}
    assert db.claim_jobs(conn, worker_id="w2", limit=10) == []
    db.mark_succeeded(conn, job_id=alone.id, lease_token=alone.lease_token)
    [second] = db.claim_jobs(conn, worker_id="w2", limit=10)
    assert second.id in {j.id for j in jobs} and second.id != alone.id
    # Its lapse counts now: it ran alone. Back with its one try left spent... 2 of 3 used.
    swept = [s for s in _expire(conn) if s.job_id == second.id]
    assert [s.status for s in swept] == ["pending"]
    row = job_row(conn, second.id)
    assert (row["attempts"], row["max_attempts"]) == (2, 3) and "while it ran alone" in row["last_error"]
    third = db.claim_jobs(conn, worker_id="w3", limit=1)
    assert len(third) == 1
    [again] = [s for s in _expire(conn) if s.job_id == third[0].id]
    if third[0].id == second.id:
        assert again.status == "dead"  # its last try, alone: the crash is its own
    # Finished jobs leave the list (the next sweep clears them).
    db.sweep_stuck(conn)
    assert conn.execute("select count(*) from job_isolation i join jobs j on j.id = i.job_id "
                        "where j.status in ('succeeded', 'dead', 'cancelled')").fetchone() == (0,)


def test_isolation_an_isolated_job_in_a_paused_queue_does_not_hold_workers_back(conn: psycopg.Connection) -> None:
    job = enqueue(conn, queue="held")
    db.claim_job(conn, worker_id="crashed", queues=["held"], lease_ms=1)
    _expire(conn)
    db.pause_queue(conn, queue="held")
    other = enqueue(conn)
    busy = db.claim_job(conn, worker_id="w1")
    assert busy is not None and busy.id == other.id
    more = enqueue(conn)
    got = db.claim_job(conn, worker_id="w1")
    assert got is not None and got.id == more.id  # the isolated job cannot run: nobody waits for it
    assert job_row(conn, job.id)["status"] == "pending"


def test_max_attempts_stays_in_range_through_hand_backs_and_retries(conn: psycopg.Connection) -> None:
    job = enqueue(conn, max_attempts=999)
    conn.execute("update jobs set attempts = 998 where id = %s", [job.id])
    first = db.claim_job(conn, worker_id="w1")
    assert first is not None and first.attempts == 999
    assert db.release_job(conn, job_id=job.id, lease_token=first.lease_token, reason="deploy").max_attempts == 1000
    second = db.claim_job(conn, worker_id="w1")
    assert second is not None and second.attempts == 1000
    released = db.release_job(conn, job_id=job.id, lease_token=second.lease_token, reason="deploy")
    assert (released.status, released.max_attempts) == ("dead", 1000)  # no try left to give back
    with pytest.raises(psycopg.Error) as refused:
        db.retry_dead(conn, job_id=job.id)
    assert refused.value.sqlstate == "QS409" and "1000 attempts" in str(refused.value)
    near = enqueue(conn, max_attempts=995)
    c = db.claim_job(conn, worker_id="w1")
    assert c is not None and c.id == near.id
    db.mark_failed(conn, job_id=near.id, lease_token=c.lease_token, error="x", retryable=False)
    assert db.retry_dead(conn, job_id=near.id, extra_attempts=1000).max_attempts == 1000


def test_max_attempts_a_sweep_at_the_cap_counts_the_attempt(conn: psycopg.Connection) -> None:
    job = enqueue(conn, max_attempts=1000)
    conn.execute("update jobs set attempts = 999 where id = %s", [job.id])
    db.claim_job(conn, worker_id="crashed", lease_ms=1)
    [swept] = _expire(conn)
    assert swept.status == "dead" and job_row(conn, job.id)["max_attempts"] == 1000


@pytest.mark.parametrize("level", ["repeatable read", "serializable"])
def test_claim_refuses_a_transaction_not_in_read_committed(db_url: str, conn: psycopg.Connection, level: str) -> None:
    enqueue(conn)
    with psycopg.connect(db_url) as c:
        c.execute(f"set transaction isolation level {level}")
        with pytest.raises(psycopg.Error) as refused:
            db.claim_job(c, worker_id="w1")
        assert refused.value.sqlstate == "QV400" and "read committed" in str(refused.value)
