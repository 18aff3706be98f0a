"""Progress: heartbeat writes a job's progress (p_progress, one per job id, null: unchanged) under the
attempt's lease token, so a token that no longer holds the job writes nothing; a value over 8192 bytes
is refused (QV400) and nothing changes. A claim keeps the progress: the next attempt's first report
replaces it.

Time is the functions' own argument (claim_job_at, sweep_stuck_at): no sleeps."""
from __future__ import annotations

import json
from datetime import datetime, timedelta

import psycopg
import pytest

from pgqw import db
from tests.helpers import enqueue, one, snapshot


def _now(conn: psycopg.Connection) -> datetime:
    return conn.execute("select now()").fetchone()[0]


def _progress(conn: psycopg.Connection, job_id: object) -> object:
    return one(conn, "select progress from jobs where id = %s", [job_id])["progress"]


def test_heartbeat_progress_is_written_under_the_lease_token(conn: psycopg.Connection) -> None:
    first = enqueue(conn, type="t", payload={})
    second = enqueue(conn, type="t", payload={})
    a = db.claim_job(conn, worker_id="w1")
    b = db.claim_job(conn, worker_id="w1")
    assert a is not None and b is not None and _progress(conn, first.id) is None
    leases = db.heartbeat(conn, leases=[(a.id, a.lease_token), (b.id, b.lease_token)],
                          progress=[json.dumps({"done": 3, "of": 10}), None])
    assert {lease.job_id for lease in leases} == {first.id, second.id}
    assert _progress(conn, a.id) == {"done": 3, "of": 10}
    assert _progress(conn, b.id) is None  # null: unchanged
    # Without p_progress, and with a null for it, the progress stays.
    db.heartbeat(conn, leases=[(a.id, a.lease_token)])
    db.heartbeat(conn, leases=[(a.id, a.lease_token)], progress=[None])
    assert _progress(conn, a.id) == {"done": 3, "of": 10}
    db.heartbeat(conn, leases=[(a.id, a.lease_token)], progress=['"almost"'])
    assert _progress(conn, a.id) == "almost"


def test_heartbeat_progress_of_a_stale_token_writes_nothing(conn: psycopg.Connection) -> None:
    now = _now(conn)
    job = enqueue(conn, type="t", payload={}, run_at=now - timedelta(hours=1))
    late = db.claim_job_at(conn, worker_id="w1", now=now, lease_ms=1000)
    assert late is not None
    db.heartbeat(conn, leases=[(late.id, late.lease_token)], progress=['{"step": 1}'])
    # Its lease runs out, a sweep hands the job on, and a second claim holds it.
    db.sweep_stuck_at(conn, now=now + timedelta(minutes=5))
    holder = db.claim_job_at(conn, worker_id="w2", now=now + timedelta(minutes=10))
    assert holder is not None and holder.id == job.id and holder.attempts == 2
    assert _progress(conn, job.id) == {"step": 1}  # kept by the claim: the new attempt's first report replaces it
    assert db.heartbeat(conn, leases=[(late.id, late.lease_token)], progress=['{"step": 99}']) == []
    assert _progress(conn, job.id) == {"step": 1}
    db.heartbeat(conn, leases=[(holder.id, holder.lease_token)], progress=['{"step": 2}'])
    assert _progress(conn, job.id) == {"step": 2}


def test_heartbeat_progress_of_a_finished_attempt_writes_nothing(conn: psycopg.Connection) -> None:
    enqueue(conn, type="t", payload={})
    job = db.claim_job(conn, worker_id="w1")
    assert job is not None
    db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token)
    assert db.heartbeat(conn, leases=[(job.id, job.lease_token)], progress=['{"late": true}']) == []
    assert _progress(conn, job.id) is None


@pytest.mark.parametrize("progress", [
    json.dumps({"text": "x" * 8200}),                          # over 8192 bytes as JSON text
    json.dumps("é" * 4100),                                    # 8200 bytes of UTF-8 (with the quotes)
])
def test_heartbeat_progress_over_size_is_refused_and_changes_nothing(conn: psycopg.Connection, progress: str) -> None:
    enqueue(conn, type="t", payload={})
    job = db.claim_job(conn, worker_id="w1")
    assert job is not None
    db.heartbeat(conn, leases=[(job.id, job.lease_token)], progress=['{"step": 1}'])
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        db.heartbeat(conn, leases=[(job.id, job.lease_token)], lease_ms=600_000, progress=[progress])
    assert exc.value.sqlstate == "QV400" and exc.value.diag.column_name == "progress"
    assert snapshot(conn) == before
    assert _progress(conn, job.id) == {"step": 1}


def test_heartbeat_progress_at_the_limit_is_written(conn: psycopg.Connection) -> None:
    enqueue(conn, type="t", payload={})
    job = db.claim_job(conn, worker_id="w1")
    assert job is not None
    value = "x" * 8190  # 8192 bytes with its quotes
    db.heartbeat(conn, leases=[(job.id, job.lease_token)], progress=[json.dumps(value)])
    assert _progress(conn, job.id) == value


def test_heartbeat_progress_of_another_length_is_refused(conn: psycopg.Connection) -> None:
    enqueue(conn, type="t", payload={})
    job = db.claim_job(conn, worker_id="w1")
    assert job is not None
    with pytest.raises(psycopg.Error) as exc:
        db.heartbeat(conn, leases=[(job.id, job.lease_token)], progress=["1", "2"])
    assert exc.value.sqlstate == "QV400" and exc.value.diag.column_name == "progress"


def test_jobs_progress_over_size_written_by_hand_is_refused(conn: psycopg.Connection) -> None:
    job = enqueue(conn, type="t", payload={})
    with pytest.raises(psycopg.Error) as exc:
        conn.execute("update jobs set progress = to_jsonb(repeat('x', 9000)) where id = %s", [job.id])
    assert exc.value.sqlstate == "23514" and exc.value.diag.constraint_name == "jobs_progress_size"
