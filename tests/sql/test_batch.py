"""enqueue_jobs and mark_jobs_succeeded: the batch forms keep the single forms' rules."""
from __future__ import annotations

import psycopg
import pytest

from pgqw import db
from tests.helpers import LISTING, enqueue, job_row, rows, snapshot


def _spec(key: str, **extra) -> dict:
    return {"type": "listing_flyer", "payload": dict(LISTING), "idempotency_key": key, **extra}


def test_enqueue_jobs_inserts_batch_in_order(conn: psycopg.Connection) -> None:
    got = db.enqueue_jobs(conn, jobs=[_spec("b1"), _spec("b2", queue="q2", priority=3, max_attempts=2)])
    assert [j.idempotency_key for j in got] == ["b1", "b2"]
    assert all(j.created for j in got)
    assert (got[1].queue, got[1].priority, got[1].max_attempts) == ("q2", 3, 2)


def test_enqueue_jobs_existing_keys_come_back_not_created(conn: psycopg.Connection) -> None:
    first = enqueue(conn, "b1")
    got = db.enqueue_jobs(conn, jobs=[_spec("b1"), _spec("b3")])
    assert [(j.id == first.id, j.created) for j in got] == [(True, False), (False, True)]
    assert rows(conn, "select count(*) as n from jobs")[0]["n"] == 2


def test_enqueue_jobs_one_notification_per_queue(db_url: str, conn: psycopg.Connection) -> None:
    with psycopg.connect(db_url, autocommit=True) as listener:
        db.listen(listener)
        db.enqueue_jobs(conn, jobs=[_spec(f"n{i}") for i in range(50)] + [_spec("other", queue="q2")])
        got = sorted(n.payload for n in listener.notifies(timeout=1))
    assert got == ["default", "q2"]


def test_enqueue_jobs_empty_array_returns_nothing(conn: psycopg.Connection) -> None:
    assert db.enqueue_jobs(conn, jobs=[]) == []


@pytest.mark.parametrize(
    "jobs, code",
    [
        (None, "QV400"),
        ({"not": "an array"}, "QV400"),
        ([1], "QV400"),
        ([{"payload": {}, "idempotency_key": "x"}], "QV400"),
        ([{"type": "t", "payload": [], "idempotency_key": "x"}], "QV400"),
        ([{"type": "t", "payload": {}}], "QV400"),
        ([{"type": "t", "payload": {}, "idempotency_key": "two words"}], "QV400"),
        ([{"type": {"x": 1}, "payload": {}, "idempotency_key": "x"}], "QV400"),
        ([{"type": "t", "payload": {}, "idempotency_key": 42}], "QV400"),
        ([{"type": "t", "payload": {}, "idempotency_key": "x", "queue": ["a"]}], "QV400"),
        ([{"type": "t", "payload": {}, "idempotency_key": "x", "priority": "7"}], "QV400"),
        ([{"type": "t", "payload": {}, "idempotency_key": "caf\u00e9"}], "QV400"),
        ([{"type": "t", "payload": {}, "idempotency_key": "x", "priority": "high"}], "QV400"),
        ([{"type": "t", "payload": {}, "idempotency_key": "x", "max_attempts": 0}], "QV400"),
        ([{"type": "t", "payload": {}, "idempotency_key": "x"}, {"type": "t", "payload": {}, "idempotency_key": "x"}],
         "QV400"),
        ([{"type": "t", "payload": {"a": "x" * 70000}, "idempotency_key": "x"}], "QV413"),
        ([{"type": "t", "payload": {}, "idempotency_key": "fresh"},
          {"type": "listing_flyer", "payload": {"other": 1}, "idempotency_key": "existing"}], "QI409"),
        ([_spec("existing", queue="other")], "QI409"),
        ([_spec("existing", priority=9)], "QI409"),
    ],
)
def test_enqueue_jobs_bad_batch_raises_and_changes_nothing(conn: psycopg.Connection, jobs, code: str) -> None:
    enqueue(conn, "existing")
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        conn.execute("select * from enqueue_jobs(%s::jsonb)", [psycopg.types.json.Jsonb(jobs)])
    assert exc.value.sqlstate == code
    assert snapshot(conn) == before


def test_mark_jobs_succeeded_changes_only_jobs_still_held(conn: psycopg.Connection) -> None:
    for i in range(3):
        enqueue(conn, f"m{i}")
    lost = db.claim_job(conn, worker_id="w1", lease_ms=1)
    kept = db.claim_jobs(conn, worker_id="w1", limit=2, lease_ms=600_000)
    conn.execute("select * from sweep_stuck(now() + interval '1 second')")  # only `lost` had expired
    retaken = db.claim_job(conn, worker_id="w2")
    assert retaken.id == lost.id
    done = db.mark_jobs_succeeded(conn, worker_id="w1", done=[(j.id, j.attempts) for j in [lost, *kept]])
    assert {j.id for j in done} == {j.id for j in kept}
    assert all(j.status == "succeeded" for j in done)
    assert job_row(conn, lost.id)["status"] == "processing"
    assert job_row(conn, lost.id)["locked_by"] == "w2"
    outcomes = rows(conn, "select job_id, attempt, outcome from job_attempts order by job_id, attempt")
    assert sum(o["outcome"] == "succeeded" for o in outcomes) == 2
    assert {(o["attempt"], o["outcome"]) for o in outcomes if o["job_id"] == lost.id} == {
        (1, "abandoned"), (2, None)}


@pytest.mark.parametrize(
    "call",
    [
        "select * from mark_jobs_succeeded(null, array[]::uuid[], array[]::int[])",
        "select * from mark_jobs_succeeded('w1', null, array[]::int[])",
        "select * from mark_jobs_succeeded('w1', array[gen_random_uuid()], array[1, 2])",
    ],
)
def test_mark_jobs_succeeded_bad_input_raises_qv400(conn: psycopg.Connection, call: str) -> None:
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(call)
    assert exc.value.sqlstate == "QV400"


def test_mark_jobs_succeeded_repeated_answers_already_recorded(conn: psycopg.Connection) -> None:
    for i in range(3):
        enqueue(conn, f"r{i}")
    held = db.claim_jobs(conn, worker_id="w1", limit=3)
    first = db.mark_jobs_succeeded(conn, worker_id="w1", done=[(j.id, j.attempts) for j in held[:2]])
    assert sorted((j.id, j.already_recorded) for j in first) == sorted((j.id, False) for j in held[:2])
    # A retry after a lost reply, with one more job that is still held: that one is recorded now.
    again = db.mark_jobs_succeeded(conn, worker_id="w1", done=[(j.id, j.attempts) for j in held])
    assert sorted((j.id, j.already_recorded) for j in again) == sorted(
        [(held[0].id, True), (held[1].id, True), (held[2].id, False)])
    assert all(j.status == "succeeded" for j in again)
    before = snapshot(conn)
    # Another worker's, or another attempt's, result for the same jobs: missing, nothing changes.
    assert db.mark_jobs_succeeded(conn, worker_id="w2", done=[(j.id, j.attempts) for j in held]) == []
    assert db.mark_jobs_succeeded(conn, worker_id="w1", done=[(j.id, 2) for j in held]) == []
    assert snapshot(conn) == before
