"""enqueue_jobs and mark_jobs_succeeded: the batch forms keep the single forms' rules."""
from __future__ import annotations

import uuid

import psycopg
import pytest

from pgqw import db
from tests.helpers import LISTING, enqueue, job_row, listen_waiting, rows, snapshot


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
        listen_waiting(listener)
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
        conn.execute("select (r.job).*, r.created from enqueue_jobs(%s::jsonb) r", [psycopg.types.json.Jsonb(jobs)])
    assert exc.value.sqlstate == code
    assert snapshot(conn) == before


def test_mark_jobs_succeeded_changes_only_jobs_still_held(conn: psycopg.Connection) -> None:
    for i in range(3):
        enqueue(conn, f"m{i}")
    lost = db.claim_job(conn, worker_id="w1", lease_ms=1)
    kept = db.claim_jobs(conn, worker_id="w1", limit=2, lease_ms=600_000)
    conn.execute("select * from sweep_stuck_at(now() + interval '1 second')")  # only `lost` had expired
    retaken = db.claim_job(conn, worker_id="w2")
    assert retaken.id == lost.id
    done = db.mark_jobs_succeeded(conn, done=[(j.id, j.lease_token) for j in [lost, *kept]])
    assert {j.id for j in done} == {j.id for j in kept}
    assert all(j.status == "succeeded" for j in done)
    assert job_row(conn, lost.id)["status"] == "processing"
    assert job_row(conn, lost.id)["locked_by"] == "w2"
    outcomes = rows(conn, "select job_id, attempt, outcome from job_attempts order by job_id, attempt")
    assert sum(o["outcome"] == "succeeded" for o in outcomes) == 2
    assert {(o["attempt"], o["outcome"]) for o in outcomes if o["job_id"] == lost.id} == {
        (1, "abandoned"), (2, None)}


def test_mark_jobs_succeeded_a_stale_pair_listed_first_does_not_hide_the_live_one(conn: psycopg.Connection) -> None:
    """The same job twice, first with its swept attempt's token, then with its current one (one worker
    swept and given the job again): the live pair succeeds, with its own result, and the stale one
    is left alone."""
    job = enqueue(conn)
    first = db.claim_job(conn, worker_id="w1", lease_ms=1)
    conn.execute("select * from sweep_stuck_at(now() + interval '1 second')")
    second = db.claim_job(conn, worker_id="w1")
    assert (first.id, second.id, second.attempts) == (job.id, job.id, 2)
    done = db.mark_jobs_succeeded(conn, done=[(job.id, first.lease_token), (job.id, second.lease_token)],
                                  results=[{"stale": True}, {"live": True}])
    assert [(j.id, j.attempts, j.already_recorded) for j in done] == [(job.id, 2, False)]
    assert rows(conn, "select attempt, outcome from job_attempts order by attempt") == [
        {"attempt": 1, "outcome": "abandoned"}, {"attempt": 2, "outcome": "succeeded"}]
    assert rows(conn, "select value from job_results") == [{"value": {"live": True}}]
    # Asked again in the other order (a retry after a lost reply): answered, nothing changes.
    before = snapshot(conn)
    again = db.mark_jobs_succeeded(conn, done=[(job.id, second.lease_token), (job.id, first.lease_token)])
    assert [(j.id, j.already_recorded) for j in again] == [(job.id, True)]
    assert snapshot(conn) == before


@pytest.mark.parametrize(
    "call",
    [
        "select (r.job).*, r.already_recorded from mark_jobs_succeeded(null, array[]::uuid[]) r",
        "select (r.job).*, r.already_recorded from mark_jobs_succeeded(array[]::uuid[], null) r",
        "select (r.job).*, r.already_recorded from mark_jobs_succeeded(array[gen_random_uuid()], array[gen_random_uuid(), gen_random_uuid()]) r",
        "select (r.job).*, r.already_recorded from mark_jobs_succeeded(array[gen_random_uuid(), gen_random_uuid()], array[gen_random_uuid()]) r",
        "select (r.job).*, r.already_recorded from mark_jobs_succeeded(array[gen_random_uuid()], array[]::uuid[]) r",
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
    first = db.mark_jobs_succeeded(conn, done=[(j.id, j.lease_token) for j in held[:2]])
    assert sorted((j.id, j.already_recorded) for j in first) == sorted((j.id, False) for j in held[:2])
    # A retry after a lost reply, with one more job that is still held: that one is recorded now.
    again = db.mark_jobs_succeeded(conn, done=[(j.id, j.lease_token) for j in held])
    assert sorted((j.id, j.already_recorded) for j in again) == sorted(
        [(held[0].id, True), (held[1].id, True), (held[2].id, False)])
    assert all(j.status == "succeeded" for j in again)
    before = snapshot(conn)
    # Made-up tokens, or each job with another job's token, for the same jobs: missing, nothing changes.
    assert db.mark_jobs_succeeded(conn, done=[(j.id, uuid.uuid4()) for j in held]) == []
    rotated = [j.lease_token for j in held[1:] + held[:1]]
    assert db.mark_jobs_succeeded(conn, done=[(j.id, t) for j, t in zip(held, rotated)]) == []
    assert snapshot(conn) == before


def test_mark_jobs_succeeded_a_pair_listed_twice_keeps_the_first_result_given(conn: psycopg.Connection) -> None:
    """The same (job, token) twice, first with no result (null), then with one: one success, and the
    result that was given is stored (a result exists exactly when the success carried one)."""
    jobs = [enqueue(conn, f"t{i}") for i in range(2)]
    held = db.claim_jobs(conn, worker_id="w1", limit=2)
    by_id = {j.id: j.lease_token for j in held}
    a, b = (j.id for j in jobs)
    done = db.mark_jobs_succeeded(conn, done=[(a, by_id[a]), (b, by_id[b]), (a, by_id[a]), (b, by_id[b])],
                                  results=[None, {"b": 1}, {"a": 2}, {"b": 2}])
    assert sorted((j.id, j.already_recorded) for j in done) == sorted([(a, False), (b, False)])
    stored = {r["job_id"]: r["value"] for r in rows(conn, "select job_id, value from job_results")}
    assert stored == {a: {"a": 2}, b: {"b": 1}}
