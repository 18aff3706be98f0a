"""Batches (enqueue_batch, batch_status): the callback job is enqueued exactly once, when every job of the
batch has reached a final state, with the batch's counts in its payload; a replay with the same idempotency
key returns the batch made before; the last two jobs ending at the same moment in two sessions enqueue one
callback, not two and not none."""
from __future__ import annotations

import threading
import uuid
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.helpers import one, rows


def batch(conn: psycopg.Connection, jobs: list[dict[str, Any]], callback: dict[str, Any] | None = None,
          key: str | None = None) -> list[dict[str, Any]]:
    """enqueue_batch; each element's type, payload, key and queue (one of its own) made up unless given."""
    for n, job in enumerate(jobs):
        job.setdefault("type", "t")
        job.setdefault("payload", {"n": n})
        job.setdefault("idempotency_key", f"k-{uuid.uuid4()}")
        job.setdefault("queue", f"q-{uuid.uuid4().hex[:12]}")
    return rows(conn, "select e.batch_id, (e.job).*, e.created from enqueue_batch(%s::jsonb, %s::jsonb, %s::text) e",
                [Jsonb(jobs), Jsonb(callback) if callback is not None else None, key])


def batch_status(conn: psycopg.Connection, batch_id: Any) -> dict[str, Any]:
    return one(conn, "select * from batch_status(%s)", [batch_id])


def claim(conn: psycopg.Connection, job: dict[str, Any]) -> dict[str, Any]:
    """Claims the job from its queue of its own."""
    [got] = rows(conn, "select (c.job).*, c.lease_token from claim_jobs('w', 1, array[%s]) c", [job["queue"]])
    assert got["id"] == job["id"]
    return got


def succeed(conn: psycopg.Connection, claimed: dict[str, Any]) -> None:
    conn.execute("select * from mark_succeeded(%s, %s)", [claimed["id"], claimed["lease_token"]])


def fail(conn: psycopg.Connection, claimed: dict[str, Any], retryable: bool) -> None:
    conn.execute("select * from mark_failed(%s, %s, 'boom', %s, 0, 0)",
                 [claimed["id"], claimed["lease_token"], retryable])


def callbacks(conn: psycopg.Connection, batch_id: Any) -> list[dict[str, Any]]:
    return rows(conn, "select * from jobs where idempotency_key = %s", [f"batch:{batch_id}"])


def test_batches_callback_is_enqueued_once_every_job_is_final_with_the_counts(conn: psycopg.Connection) -> None:
    made = batch(conn, [{}, {"max_attempts": 2}, {}, {"expire_after_ms": 1000}, {}],
                 callback={"type": "report", "payload": {"x": 1}, "queue": "callbacks", "priority": 5,
                           "max_attempts": 3})
    assert len(made) == 5 and all(r["created"] for r in made)
    batch_id = made[0]["batch_id"]
    assert {r["batch_id"] for r in made} == {batch_id}
    assert all(r["batch_id"] == batch_id for r in rows(conn, "select batch_id from jobs where id = any (%s)",
                                                       [[r["id"] for r in made]]))
    ok, flaky, dropped, lapsed, last = made
    got = batch_status(conn, batch_id)
    assert (got["total"], got["pending"], got["callback_job_id"], got["finished_at"]) == (5, 5, None, None)

    succeed(conn, claim(conn, ok))
    fail(conn, claim(conn, flaky), retryable=True)  # failed, waiting for its retry: not final
    conn.execute("select * from cancel_job(%s)", [dropped["id"]])
    conn.execute("select * from sweep_stuck_at(now() + interval '1 minute')")
    running = claim(conn, last)
    got = batch_status(conn, batch_id)
    assert {k: got[k] for k in ("blocked", "pending", "processing", "failed", "succeeded", "dead", "cancelled",
                                "expired")} == {"blocked": 0, "pending": 0, "processing": 1, "failed": 1,
                                                "succeeded": 1, "dead": 0, "cancelled": 1, "expired": 1}
    assert callbacks(conn, batch_id) == []
    fail(conn, claim(conn, flaky), retryable=False)
    assert callbacks(conn, batch_id) == [] and batch_status(conn, batch_id)["finished_at"] is None
    succeed(conn, running)

    [callback] = callbacks(conn, batch_id)
    assert (callback["type"], callback["queue"], callback["priority"], callback["max_attempts"],
            callback["status"]) == ("report", "callbacks", 5, 3, "pending")
    assert callback["payload"] == {"x": 1, "batch": {"id": str(batch_id), "total": 5, "succeeded": 2, "dead": 1,
                                                     "cancelled": 1, "expired": 1}}
    assert callback["batch_id"] is None  # the callback is not a job of the batch it reports
    got = batch_status(conn, batch_id)
    assert got["callback_job_id"] == callback["id"] and got["finished_at"] is not None
    assert (got["total"], got["succeeded"], got["dead"]) == (5, 2, 1)
    assert one(conn, "select callback_job_id from batches where id = %s", [batch_id])["callback_job_id"] \
        == callback["id"]


def test_batches_callback_is_not_enqueued_again_when_a_dead_job_is_retried(conn: psycopg.Connection) -> None:
    [only] = batch(conn, [{"max_attempts": 1}], callback={"type": "report"})
    fail(conn, claim(conn, only), retryable=False)
    [callback] = callbacks(conn, only["batch_id"])
    assert callback["payload"] == {"batch": {"id": str(only["batch_id"]), "total": 1, "succeeded": 0, "dead": 1,
                                             "cancelled": 0, "expired": 0}}
    finished = batch_status(conn, only["batch_id"])["finished_at"]
    conn.execute("select * from retry_dead(%s)", [only["id"]])
    succeed(conn, claim(conn, only))
    assert [c["id"] for c in callbacks(conn, only["batch_id"])] == [callback["id"]]
    assert one(conn, "select count(*) as n from jobs where type = 'report'")["n"] == 1
    got = batch_status(conn, only["batch_id"])
    assert (got["succeeded"], got["dead"], got["finished_at"]) == (1, 0, finished)  # when it first ended


def test_batches_without_a_callback_record_when_they_finish(conn: psycopg.Connection) -> None:
    a, b = batch(conn, [{}, {}])
    succeed(conn, claim(conn, a))
    assert batch_status(conn, a["batch_id"])["finished_at"] is None
    succeed(conn, claim(conn, b))
    got = batch_status(conn, a["batch_id"])
    assert got["finished_at"] is not None and got["callback_job_id"] is None
    assert one(conn, "select count(*) as n from jobs")["n"] == 2


def test_batches_jobs_may_depend_on_earlier_elements(conn: psycopg.Connection) -> None:
    first, second = batch(conn, [{}, {"depends_on": [1]}], callback={"type": "report"})
    assert (first["status"], second["status"]) == ("pending", "blocked")
    assert batch_status(conn, first["batch_id"])["blocked"] == 1
    conn.execute("select * from cancel_job(%s)", [first["id"]])  # the child is cancelled with it
    [callback] = callbacks(conn, first["batch_id"])
    assert callback["payload"]["batch"]["cancelled"] == 2


def test_batches_replay_with_the_same_key_returns_the_batch_made_before(conn: psycopg.Connection) -> None:
    elements = [{"idempotency_key": f"job-{n}"} for n in range(10)]
    made = batch(conn, [dict(e) for e in elements], callback={"type": "report"}, key="nightly")
    jobs_before = rows(conn, "select * from jobs order by id")
    batches_before = rows(conn, "select * from batches")
    again = batch(conn, [dict(e) for e in elements], callback={"type": "report"}, key="nightly")
    assert sorted((r["batch_id"], r["id"], r["created"]) for r in again) == \
        sorted((r["batch_id"], r["id"], False) for r in made)
    assert rows(conn, "select * from jobs order by id") == jobs_before
    assert rows(conn, "select * from batches") == batches_before
    assert one(conn, "select idempotency_key from batches where id = %s", [made[0]["batch_id"]])[
        "idempotency_key"] == "nightly"


def test_batches_replay_returns_one_row_per_element_in_order(conn: psycopg.Connection) -> None:
    """As the first call does: the rows in the elements' order (ten, made in one statement, so one created_at)."""
    elements = [{"idempotency_key": f"job-{n}"} for n in range(10)]
    made = batch(conn, [dict(e) for e in elements], key="nightly")
    assert [r["idempotency_key"] for r in made] == [f"job-{n}" for n in range(10)]
    again = batch(conn, [dict(e) for e in elements], key="nightly")
    assert [r["idempotency_key"] for r in again] == [f"job-{n}" for n in range(10)]


def test_batches_status_of_an_unknown_batch_is_qn404(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as exc:
        conn.execute("select * from batch_status(%s)", [uuid.uuid4()])
    assert exc.value.sqlstate == "QN404"


def test_batches_last_two_jobs_ending_at_once_enqueue_one_callback(connect) -> None:
    """20 batches of two jobs, both claimed; for each, two sessions (each its own connection) mark one job
    each succeeded at the same moment (a barrier). Each batch gets exactly one callback, with both counted."""
    setup = connect()
    sessions = [connect(), connect()]
    rounds = 20
    made = [batch(setup, [{}, {}], callback={"type": "report", "payload": {"round": i}}) for i in range(rounds)]
    claimed = [[claim(setup, job) for job in pair] for pair in made]
    errors: list[BaseException] = []

    def run(side: int, barrier: threading.Barrier, job: dict[str, Any]) -> None:
        try:
            barrier.wait(timeout=30)
            succeed(sessions[side], job)
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    for pair in claimed:
        barrier = threading.Barrier(2)
        threads = [threading.Thread(target=run, args=(side, barrier, pair[side])) for side in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert errors == [] and not any(t.is_alive() for t in threads)
    for i, pair in enumerate(made):
        found = callbacks(setup, pair[0]["batch_id"])
        assert len(found) == 1, f"batch {i}: {len(found)} callbacks"
        assert found[0]["payload"]["batch"] == {"id": str(pair[0]["batch_id"]), "total": 2, "succeeded": 2,
                                                "dead": 0, "cancelled": 0, "expired": 0}
    assert one(setup, "select count(*) as n from jobs where type = 'report'")["n"] == rounds


@pytest.mark.parametrize("first", ["a", "b"])
def test_batches_last_two_jobs_ending_in_open_transactions_enqueue_one_callback(connect, first: str) -> None:
    """Step by step: A and B each mark one of the batch's last two jobs succeeded and hold their transactions
    open; neither sees the other's success. B may wait for A; else they commit in either order. One callback."""
    watcher = connect()
    pair = batch(watcher, [{}, {}], callback={"type": "report"})
    claimed = [claim(watcher, job) for job in pair]
    a, b = connect(autocommit=False), connect(autocommit=False)
    succeed(a, claimed[0])
    done: dict[str, bool] = {}

    def finish_b() -> None:
        succeed(b, claimed[1])
        done["b"] = True

    t = threading.Thread(target=finish_b, daemon=True)
    t.start()
    waited = False
    while t.is_alive() and not waited:
        waited = one(watcher, "select cardinality(pg_blocking_pids(%s)) > 0 as w", [b.info.backend_pid])["w"]
        t.join(0.005)
    if waited or first == "a":
        a.commit()
        t.join(30)
        b.commit()
    else:
        t.join(30)
        b.commit()
        a.commit()
    assert done == {"b": True}
    assert len(callbacks(watcher, pair[0]["batch_id"])) == 1
    assert batch_status(watcher, pair[0]["batch_id"])["succeeded"] == 2


def test_batches_a_batch_final_when_made_enqueues_its_callback_at_once(conn: psycopg.Connection) -> None:
    """Its one job depends on a job cancelled before: it is made cancelled, so the batch is final at once."""
    gone = one(conn, "select (e.job).id from enqueue_job('t', '{}', 'gone') e")["id"]
    conn.execute("select * from cancel_job(%s)", [gone])
    [only] = batch(conn, [{"depends_on": [str(gone)]}], callback={"type": "report"})
    assert only["status"] == "cancelled"
    [callback] = callbacks(conn, only["batch_id"])
    assert callback["payload"]["batch"]["cancelled"] == 1
    assert batch_status(conn, only["batch_id"])["finished_at"] is not None


@pytest.mark.parametrize("jobs, code", [
    ([{}, {"depends_on": [str(uuid.UUID(int=9))]}], "QW422"),
    ([{"depends_on": [1]}], "QW422"),
    ([], "QV400"),
])
def test_batches_a_refused_batch_changes_nothing(conn: psycopg.Connection, jobs: list[dict[str, Any]],
                                                 code: str) -> None:
    batch(conn, [{}], callback={"type": "report"})
    before = [rows(conn, "select * from jobs order by id"), rows(conn, "select * from batches order by id"),
              rows(conn, "select * from job_dependencies order by job_id")]
    with pytest.raises(psycopg.Error) as exc:
        batch(conn, jobs, callback={"type": "report"}, key="refused")
    assert exc.value.sqlstate == code
    assert [rows(conn, "select * from jobs order by id"), rows(conn, "select * from batches order by id"),
            rows(conn, "select * from job_dependencies order by job_id")] == before
