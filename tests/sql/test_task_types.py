"""Task types, workers and results: register_task_types, the precedence of a job's settings, claims by
task type, register_worker / stop_worker and what queue_stats says of them, results stored with a
success, and the pgqw_finished notification.

A setting's effective value: the job's own, else the DBA's column of task_types, else the code's
(code_*, written by every registration), else queue_settings (or 'default' and 0 for queue and
priority). After every test, a job_results row exists only for a succeeded job.
"""
from __future__ import annotations

import threading
import time
import uuid
from datetime import datetime, timedelta
from typing import Any, Callable, Iterator

import psycopg
import pytest
from psycopg.types.json import Jsonb

from pgqw import db
from tests.helpers import job_row, one, rows
from tests.sql.queue_state import results_only_for_succeeded_jobs, snapshot


@pytest.fixture(autouse=True)
def _results_only_with_a_success(conn: psycopg.Connection) -> Iterator[None]:
    yield
    results_only_for_succeeded_jobs(conn)


def register(conn: psycopg.Connection, *types: dict[str, Any]) -> list[dict[str, Any]]:
    return rows(conn, "select * from register_task_types(%s::jsonb)", [Jsonb(list(types))])


def kind(name: str, **settings: Any) -> dict[str, Any]:
    return {"name": name, "payload_schema": {"type": "object"}, **settings}


def effective(conn: psycopg.Connection, name: str) -> dict[str, Any]:
    return one(conn, "select * from task_type_settings where name = %s", [name])


def clock(conn: psycopg.Connection) -> datetime:
    return one(conn, "select clock_timestamp() as t")["t"]


def new_job(conn: psycopg.Connection, type_: str = "listing_flyer", **kwargs: Any) -> db.EnqueuedJob:
    kwargs.setdefault("queue", f"q-{uuid.uuid4().hex[:8]}")
    return db.enqueue_job(conn, type=type_, payload={}, idempotency_key=f"k-{uuid.uuid4()}", **kwargs)


def claimed(conn: psycopg.Connection, job: db.Job, worker_id: str = "w1", **kwargs: Any) -> db.ClaimedJob:
    got = db.claim_job(conn, worker_id=worker_id, queues=[job.queue], **kwargs)
    assert got is not None and got.id == job.id
    return got


# ---- register_task_types ------------------------------------------------------------------------

def test_register_task_types_upserts_and_returns_the_rows(conn: psycopg.Connection) -> None:
    made = register(conn, kind("resize", description="Resizes a photo", queue="images", lease_ms=5000),
                    kind("ping"))
    assert [(r["name"], r["description"], r["code_queue"], r["code_lease_ms"]) for r in made] == [
        ("ping", None, None, None), ("resize", "Resizes a photo", "images", 5000)]
    first = one(conn, "select registered_at from task_types where name = 'resize'")["registered_at"]

    again = register(conn, {"name": "resize", "payload_schema": {"type": "object", "required": ["url"]}})
    assert len(again) == 1
    row = one(conn, "select * from task_types where name = 'resize'")
    # The code's definition is rewritten whole: what the new release leaves out is gone.
    assert (row["payload_schema"], row["description"], row["code_queue"], row["code_lease_ms"]) == (
        {"type": "object", "required": ["url"]}, None, None, None)
    assert row["registered_at"] >= first
    assert one(conn, "select count(*) as n from task_types where name in ('resize', 'ping')")["n"] == 2


def test_register_task_types_never_touches_a_dbas_column(conn: psycopg.Connection) -> None:
    register(conn, kind("report", max_attempts=3))
    assert effective(conn, "report")["max_attempts"] == 3

    conn.execute("update task_types set max_attempts = 7 where name = 'report'")
    assert effective(conn, "report")["max_attempts"] == 7
    # A new release with a new default: the DBA's value survives it, and still wins.
    register(conn, kind("report", max_attempts=4))
    row = one(conn, "select max_attempts, code_max_attempts from task_types where name = 'report'")
    assert (row["max_attempts"], row["code_max_attempts"]) == (7, 4)
    assert effective(conn, "report")["max_attempts"] == 7
    assert new_job(conn, "report").max_attempts == 7

    # The DBA's value set back to null: the code's value again.
    conn.execute("update task_types set max_attempts = null where name = 'report'")
    assert effective(conn, "report")["max_attempts"] == 4
    # A newer code default takes effect at once.
    register(conn, kind("report", max_attempts=2))
    assert effective(conn, "report")["max_attempts"] == 2
    assert new_job(conn, "report").max_attempts == 2
    # No default in code nor from a DBA: queue_settings'.
    register(conn, kind("report"))
    conn.execute("update queue_settings set max_attempts = 9")
    assert effective(conn, "report")["max_attempts"] == 9


@pytest.mark.parametrize("types, why", [
    (None, "null"),
    ({"name": "t", "payload_schema": {}}, "not an array"),
    ([kind("t"), "u"], "an element not an object"),
    ([kind("t"), {"payload_schema": {}}], "no name"),
    ([kind("t"), kind("   ")], "a blank name"),
    ([kind("t"), kind("x" * 101)], "a name too long"),
    ([{"name": "t", "payload_schema": "object"}], "a schema not an object"),
    ([kind("t", priority="high")], "a setting not a number"),
    ([kind("t", max_attempts=2.5)], "a setting not whole"),
    ([kind("t", max_attempts=0)], "max_attempts out of range"),
    ([kind("t", lease_ms=0)], "lease out of range"),
    ([kind("t", backoff_base_ms=-1)], "negative backoff"),
    ([kind("t", queue=" ")], "a blank queue"),
    ([kind("listing_flyer", max_attempts=2), kind("t", max_attempts=2), kind("t")], "a name twice"),
])
def test_register_task_types_bad_input_raises_qv400_and_changes_nothing(
    conn: psycopg.Connection, types: Any, why: str
) -> None:
    conn.execute("update task_types set lease_ms = 1234 where name = 'listing_flyer'")  # a DBA's value
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        conn.execute("select * from register_task_types(%s::jsonb)", [None if types is None else Jsonb(types)])
    assert exc.value.sqlstate == "QV400", why
    assert snapshot(conn) == before


def _wait_until_blocked(observer: psycopg.Connection, pid: int, by: int, thread: threading.Thread) -> None:
    """Returns once the backend pid waits for a lock held by the backend by (a condition polled, as
    PostgreSQL's isolation tester does: no fixed sleep decides the order of the steps)."""
    deadline = time.monotonic() + 30
    while by not in one(observer, "select pg_blocking_pids(%s) as pids", [pid])["pids"]:
        assert thread.is_alive(), "the second registration finished without waiting for the first"
        assert time.monotonic() < deadline, "the second registration never waited for the first"
        observer.execute("select pg_sleep(0.01)")


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any], list[BaseException]]:
    results: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(fn())
        except BaseException as exc:  # noqa: BLE001 - asserted by the caller
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, results, errors


def test_register_task_types_two_sessions_at_once_both_succeed_with_one_row_each(connect) -> None:
    """Two workers start together and register the same new types: A in an open transaction, B waits for
    it, then updates the rows A made. Both succeed; one row per type, with B's (the later) definition."""
    a, b, observer = connect(autocommit=False), connect(), connect()
    register(a, kind("alpha", priority=1), kind("beta", priority=1))
    thread, results, errors = _in_thread(lambda: register(b, kind("beta", priority=2), kind("alpha", priority=2)))
    _wait_until_blocked(observer, b.info.backend_pid, a.info.backend_pid, thread)
    a.commit()
    thread.join(30)
    assert errors == [] and not thread.is_alive()
    assert sorted(r["name"] for r in results[0]) == ["alpha", "beta"]
    assert rows(observer, "select name, code_priority from task_types where name in ('alpha', 'beta') order by name") \
        == [{"name": "alpha", "code_priority": 2}, {"name": "beta", "code_priority": 2}]


def test_register_task_types_in_another_order_waits_instead_of_deadlocking(connect) -> None:
    """A has registered alpha and will register beta in the same transaction (as one registration of
    both would, one row at a time); B registers beta and alpha. Taken in name order, B waits at alpha
    without holding beta, so A goes on: no deadlock (40P01), both succeed."""
    a, b, observer = connect(autocommit=False), connect(), connect()
    register(a, kind("alpha"))
    thread, results, errors = _in_thread(lambda: register(b, kind("beta", priority=2), kind("alpha", priority=2)))
    _wait_until_blocked(observer, b.info.backend_pid, a.info.backend_pid, thread)
    register(a, kind("beta"))  # would wait for B's beta, and B for A's alpha, were B not in name order
    a.commit()
    thread.join(30)
    assert errors == [] and not thread.is_alive()
    assert len(results[0]) == 2
    assert one(observer, "select count(*) as n from task_types where name in ('alpha', 'beta')")["n"] == 2


# ---- precedence: the job's own value, the DBA's, the code's, the defaults ------------------------

@pytest.mark.parametrize("batch", [False, True], ids=["enqueue_job", "enqueue_jobs"])
def test_enqueue_takes_the_jobs_value_then_the_types_then_the_defaults(conn: psycopg.Connection, batch: bool) -> None:
    def enqueue(type_: str, **own: Any) -> tuple[str, int, int]:
        key = f"k-{uuid.uuid4()}"
        if batch:
            made = db.enqueue_jobs(conn, jobs=[{"type": type_, "payload": {}, "idempotency_key": key, **own}])[0]
        else:
            made = db.enqueue_job(conn, type=type_, payload={}, idempotency_key=key, **own)
        return made.queue, made.priority, made.max_attempts

    conn.execute("update queue_settings set accept_unregistered_types = true")  # never-registered: accepted
    conn.execute("update queue_settings set max_attempts = 9")
    register(conn, kind("tuned", queue="code-q", priority=1, max_attempts=2), kind("plain"))
    assert enqueue("never-registered") == ("default", 0, 9)
    assert enqueue("plain") == ("default", 0, 9)
    assert enqueue("tuned") == ("code-q", 1, 2)
    conn.execute("update task_types set queue = 'dba-q', priority = 5, max_attempts = 6 where name = 'tuned'")
    assert enqueue("tuned") == ("dba-q", 5, 6)
    assert enqueue("tuned", queue="own-q", priority=-3, max_attempts=8) == ("own-q", -3, 8)
    # One setting of the job's own, the others the type's.
    assert enqueue("tuned", priority=0) == ("dba-q", 0, 6)


def test_enqueue_same_request_after_a_type_changed_returns_the_job(conn: psycopg.Connection) -> None:
    """A request repeated (a lost reply) after a DBA changed its type's queue is the same request: the
    job it made comes back, in the queue it was given then, not QI409."""
    register(conn, kind("moving", queue="first", priority=1))
    made = db.enqueue_job(conn, type="moving", payload={"a": 1}, idempotency_key="moving-1")
    conn.execute("update task_types set queue = 'second', priority = 2 where name = 'moving'")
    again = db.enqueue_job(conn, type="moving", payload={"a": 1}, idempotency_key="moving-1")
    assert (again.id, again.created, again.queue, again.priority) == (made.id, False, "first", 1)
    batch = db.enqueue_jobs(conn, jobs=[{"type": "moving", "payload": {"a": 1}, "idempotency_key": "moving-1"}])
    assert [(j.id, j.created) for j in batch] == [(made.id, False)]
    # A queue the request does give is still compared.
    with pytest.raises(psycopg.Error) as exc:
        db.enqueue_job(conn, type="moving", payload={"a": 1}, idempotency_key="moving-1", queue="second")
    assert exc.value.sqlstate == "QI409"


def test_claim_lease_is_the_claims_then_the_types_then_queue_settings(conn: psycopg.Connection) -> None:
    def lease(type_: str, **kwargs: Any) -> timedelta:
        got = claimed(conn, new_job(conn, type_), **kwargs)
        assert got.lease_expires_at is not None and got.started_at is not None
        return got.lease_expires_at - got.started_at

    conn.execute("update queue_settings set accept_unregistered_types = true")  # never-registered: accepted
    conn.execute("update queue_settings set lease_ms = 45000")
    register(conn, kind("leased", lease_ms=120_000), kind("plain"))
    assert lease("never-registered") == timedelta(seconds=45)
    assert lease("plain") == timedelta(seconds=45)
    assert lease("leased") == timedelta(minutes=2)
    conn.execute("update task_types set lease_ms = 300000 where name = 'leased'")
    assert lease("leased") == timedelta(minutes=5)
    assert lease("leased", lease_ms=10_000) == timedelta(seconds=10)


def test_heartbeat_without_a_lease_renews_the_types_lease(conn: psycopg.Connection) -> None:
    """A heartbeat that names no lease renews the one a claim grants (the type's), not queue_settings':
    a job of a long-lease type is not cut short by it."""
    register(conn, kind("leased", lease_ms=600_000))
    long_job = claimed(conn, new_job(conn, "leased"))
    plain_job = claimed(conn, new_job(conn, "listing_flyer"))
    before = clock(conn)
    leases = {lease.job_id: lease.lease_expires_at
              for lease in db.heartbeat(conn, leases=[(j.id, j.lease_token) for j in (long_job, plain_job)])}
    after = clock(conn)
    assert before + timedelta(minutes=10) <= leases[long_job.id] <= after + timedelta(minutes=10)
    assert before + timedelta(minutes=1) <= leases[plain_job.id] <= after + timedelta(minutes=1)


def test_mark_failed_backoff_is_the_calls_then_the_types_then_queue_settings(conn: psycopg.Connection) -> None:
    def delay(type_: str, **backoff: Any) -> tuple[datetime, datetime, datetime]:
        got = claimed(conn, new_job(conn, type_, max_attempts=3))
        before = clock(conn)
        failed = db.mark_failed(conn, job_id=got.id, lease_token=got.lease_token, error="boom", **backoff)
        after = clock(conn)
        assert failed.status == "failed"
        return before, failed.run_at, after

    def assert_delay(got: tuple[datetime, datetime, datetime], expected: timedelta) -> None:
        before, run_at, after = got
        assert before + expected <= run_at <= after + expected, (run_at - before, expected)

    conn.execute("update queue_settings set accept_unregistered_types = true")  # never-registered: accepted
    conn.execute("update queue_settings set backoff_base_ms = 10000, backoff_max_jitter_ms = 0")
    register(conn, kind("slow", backoff_base_ms=60_000, backoff_max_jitter_ms=0), kind("plain"))
    assert_delay(delay("never-registered"), timedelta(seconds=10))
    assert_delay(delay("plain"), timedelta(seconds=10))
    assert_delay(delay("slow"), timedelta(minutes=1))
    conn.execute("update task_types set backoff_base_ms = 120000 where name = 'slow'")
    assert_delay(delay("slow"), timedelta(minutes=2))
    conn.execute("update task_types set backoff_max_delay_ms = 5000 where name = 'slow'")
    assert_delay(delay("slow"), timedelta(seconds=5))  # the DBA's cap
    assert_delay(delay("slow", base_ms=1000, max_delay_ms=60_000), timedelta(seconds=1))  # the call's own


# ---- claims by task type ---------------------------------------------------------------------------

def test_claim_jobs_with_task_types_claims_only_those_and_leaves_the_others_pending(conn: psycopg.Connection) -> None:
    queue = "mixed"
    flyers = [new_job(conn, "listing_flyer", queue=queue) for _ in range(2)]
    noops = [new_job(conn, "noop", queue=queue, priority=5) for _ in range(2)]  # first in line for anyone
    other = new_job(conn, "other", queue=queue, priority=9)

    got = db.claim_jobs(conn, worker_id="w1", limit=10, queues=[queue], task_types=["listing_flyer"])
    assert sorted(j.id for j in got) == sorted(j.id for j in flyers)
    for job in noops + [other]:
        row = job_row(conn, job.id)
        assert (row["status"], row["attempts"], row["locked_by"]) == ("pending", 0, None)
    assert rows(conn, "select job_id from job_attempts where job_id = any(%s)", [[j.id for j in noops + [other]]]) == []

    got = db.claim_job(conn, worker_id="w2", queues=[queue], task_types=["noop", "other"])
    assert got is not None and got.id == other.id  # the highest priority of its types
    assert {j.id for j in db.claim_jobs(conn, worker_id="w2", limit=10, queues=[queue], task_types=["noop"])} \
        == {j.id for j in noops}


# ---- workers --------------------------------------------------------------------------------------

def test_register_worker_then_refresh_then_stop_then_back(conn: psycopg.Connection) -> None:
    first = db.register_worker(conn, worker_id="w1", task_types=["listing_flyer"], queues=["default"],
                               concurrency=4, hostname="box", pid=123, ttl_ms=30_000)
    assert (first.task_types, first.queues, first.concurrency, first.hostname, first.pid) == (
        ["listing_flyer"], ["default"], 4, "box", 123)
    assert first.expires_at - first.last_seen_at == timedelta(seconds=30) and first.stopped_at is None

    again = db.register_worker(conn, worker_id="w1", task_types=["listing_flyer", "noop"], ttl_ms=60_000)
    assert again.started_at == first.started_at  # the same run, seen again
    assert again.last_seen_at >= first.last_seen_at
    assert again.expires_at - again.last_seen_at == timedelta(minutes=1)
    assert (again.task_types, again.queues, again.hostname, again.pid, again.concurrency) == (
        ["listing_flyer", "noop"], None, "box", 123, 4)

    stopped = db.stop_worker(conn, worker_id="w1")
    assert stopped is not None and stopped.stopped_at is not None and stopped.expires_at <= stopped.last_seen_at
    assert db.stop_worker(conn, worker_id="nobody") is None

    back = db.register_worker(conn, worker_id="w1", task_types=["noop"])
    assert back.stopped_at is None and back.started_at > first.started_at  # a new run
    assert one(conn, "select count(*) as n from workers")["n"] == 1


@pytest.mark.parametrize("call", [
    "select * from register_worker(null, array['t'])",
    "select * from register_worker('  ', array['t'])",
    "select * from register_worker('w1', null)",
    "select * from register_worker('w1', array['t', null])",
    "select * from register_worker('w1', array['t'], p_ttl_ms => 0)",
    "select * from register_worker('w1', array['t'], p_concurrency => 0)",
    "select * from stop_worker(null)",
])
def test_register_worker_and_stop_worker_bad_input_raise_qv400_and_change_nothing(
    conn: psycopg.Connection, call: str
) -> None:
    db.register_worker(conn, worker_id="w1", task_types=["listing_flyer"])
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(call)
    assert exc.value.sqlstate == "QV400"
    assert snapshot(conn) == before


def _stats(conn: psycopg.Connection) -> tuple[dict[tuple[str | None, str | None], float], float]:
    stats = db.queue_stats(conn)
    waiting = {(s.queue, s.label): s.value for s in stats if s.metric == "waiting_without_worker"}
    alive = [s.value for s in stats if s.metric == "workers_alive"]
    assert len(alive) == 1
    return waiting, alive[0]


def test_queue_stats_counts_ready_jobs_no_live_worker_can_take_and_live_workers(conn: psycopg.Connection) -> None:
    assert _stats(conn) == ({}, 0)
    # Jobs of types nobody registered ('orphan', 'resize', 'report') are accepted here, as a DBA can allow.
    conn.execute("update queue_settings set accept_unregistered_types = true")
    # Live: w-flyers takes listing_flyer in every queue; w-mail takes noop in 'mail' only.
    db.register_worker(conn, worker_id="w-flyers", task_types=["listing_flyer"])
    db.register_worker(conn, worker_id="w-mail", task_types=["noop"], queues=["mail"])
    # Not live: w-gone's registration expired an hour ago (its heartbeats stopped); w-stopped exited.
    db.register_worker(conn, worker_id="w-gone", task_types=["resize"])
    conn.execute("update workers set last_seen_at = now() - interval '2 hours', expires_at = now() - interval '1 hour'"
                 " where id = 'w-gone'")
    db.register_worker(conn, worker_id="w-stopped", task_types=["report"])
    db.stop_worker(conn, worker_id="w-stopped")

    new_job(conn, "listing_flyer", queue="a")  # a live worker takes it
    new_job(conn, "noop", queue="mail")  # a live worker takes it
    new_job(conn, "noop", queue="a")  # noop's worker does not take queue a
    new_job(conn, "orphan", queue="a")  # a type no worker ever registered
    new_job(conn, "orphan", queue="a")
    new_job(conn, "resize", queue="a")  # its only worker expired
    new_job(conn, "report", queue="a")  # its only worker stopped
    new_job(conn, "orphan", queue="later", run_at=datetime.now().astimezone() + timedelta(days=1))  # not ready
    dead = new_job(conn, "orphan", queue="done", max_attempts=1)
    got = claimed(conn, dead, worker_id="w-x")
    db.mark_failed(conn, job_id=got.id, lease_token=got.lease_token, error="boom")  # dead: waits for nobody
    running = claimed(conn, new_job(conn, "orphan", queue="running"), worker_id="w-x")  # taken already
    assert running.status == "processing"

    waiting, alive = _stats(conn)
    assert waiting == {("a", "noop"): 1, ("a", "orphan"): 2, ("a", "resize"): 1, ("a", "report"): 1}
    assert alive == 2

    # The expired worker comes back: its jobs are no longer stranded.
    db.register_worker(conn, worker_id="w-gone", task_types=["resize"])
    waiting, alive = _stats(conn)
    assert ("a", "resize") not in waiting and alive == 3


# ---- results --------------------------------------------------------------------------------------

def test_mark_succeeded_stores_a_json_result_with_the_success(conn: psycopg.Connection) -> None:
    job = claimed(conn, new_job(conn, "noop"))
    done = db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token,
                             result=("application/json", {"rows": [1, 2], "ok": True}, None))
    assert done.status == "succeeded"
    result = db.get_result(conn, job_id=job.id)
    assert result is not None
    assert (result.content_type, result.value, result.data) == ("application/json", {"rows": [1, 2], "ok": True}, None)
    # The same statement, the same transaction: the result is no older than the success.
    assert result.created_at == job_row(conn, job.id)["finished_at"]


def test_mark_succeeded_stores_a_bytes_result(conn: psycopg.Connection) -> None:
    flyer_job = claimed(conn, new_job(conn, "listing_flyer"))
    db.mark_succeeded(conn, job_id=flyer_job.id, lease_token=flyer_job.lease_token,
                      result=("application/pdf", None, b"%PDF-1.7"))
    other = claimed(conn, new_job(conn, "noop"))
    db.mark_succeeded(conn, job_id=other.id, lease_token=other.lease_token,
                      result=("image/png", None, b"\x89PNG\x00\xff"))
    result = db.get_result(conn, job_id=other.id)
    assert result is not None and (result.content_type, result.value, bytes(result.data or b"")) == (
        "image/png", None, b"\x89PNG\x00\xff")
    flyer = db.get_result(conn, job_id=flyer_job.id)
    assert flyer is not None and (flyer.content_type, bytes(flyer.data or b"")) == ("application/pdf", b"%PDF-1.7")


def test_mark_succeeded_without_a_result_stores_none(conn: psycopg.Connection) -> None:
    job = claimed(conn, new_job(conn, "noop"))
    assert db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token).status == "succeeded"
    assert db.get_result(conn, job_id=job.id) is None


@pytest.mark.parametrize("result_sql", [
    "'application/json', null, null",
    "null, '{\"a\": 1}', null",
    "null, null, '%%PDF-1'",
    "'application/json', '1', '%%PDF-1'",
    "'text/plain', '\"text\"', null",
    "'pdf', null, '%%PDF-1'",
    "'application/ pdf', null, '%%PDF-1'",
    "'a/' || repeat('b', 199), null, '%%PDF-1'",
])
def test_mark_succeeded_refuses_a_malformed_result_with_qv400_and_changes_nothing(
    conn: psycopg.Connection, result_sql: str
) -> None:
    job = claimed(conn, new_job(conn, "noop"))
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(f"select (r.job).*, r.already_recorded from mark_succeeded(%s, %s, {result_sql}) r", [job.id, job.lease_token])
    assert exc.value.sqlstate == "QV400"
    assert snapshot(conn) == before
    assert job_row(conn, job.id)["status"] == "processing"


def test_mark_succeeded_refused_with_ql409_stores_no_result(conn: psycopg.Connection) -> None:
    job = claimed(conn, new_job(conn, "noop"))
    other = claimed(conn, new_job(conn, "noop"), worker_id="w2")
    before = snapshot(conn)
    for token in (uuid.uuid4(), other.lease_token):  # a made-up token, another job's
        with pytest.raises(psycopg.Error) as exc:
            db.mark_succeeded(conn, job_id=job.id, lease_token=token,
                              result=("application/json", {"forged": True}, None))
        assert exc.value.sqlstate == "QL409"
    assert snapshot(conn) == before
    # Swept and retaken by another worker: the first one's late success is refused, and stores nothing.
    db.sweep_stuck_at(conn, now=job.lease_expires_at + timedelta(seconds=1))
    claimed(conn, job, worker_id="w2")
    with pytest.raises(psycopg.Error) as exc:
        db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token, result=("application/json", "late", None))
    assert exc.value.sqlstate == "QL409"
    assert db.get_result(conn, job_id=job.id) is None


def test_mark_succeeded_again_after_a_lost_reply_keeps_the_first_result(conn: psycopg.Connection) -> None:
    job = claimed(conn, new_job(conn, "noop"))
    db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token, result=("application/json", 1, None))
    before = snapshot(conn)
    again = db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token, result=("application/json", 2, None))
    assert again.already_recorded is True
    assert snapshot(conn) == before


def test_mark_jobs_succeeded_stores_json_results_per_job(conn: psycopg.Connection) -> None:
    jobs = [claimed(conn, new_job(conn, "noop")) for _ in range(4)]
    stale = claimed(conn, new_job(conn, "noop"), worker_id="w2")  # presented with a made-up token: no result
    done = db.mark_jobs_succeeded(conn, done=[(j.id, j.lease_token) for j in jobs] + [(stale.id, uuid.uuid4())],
                                  results=[{"n": 0}, None, [1, "two"], "text", {"forged": True}])
    assert sorted(j.id for j in done) == sorted(j.id for j in jobs)
    stored = {r["job_id"]: (r["content_type"], r["value"]) for r in rows(conn, "select * from job_results")}
    assert stored == {jobs[0].id: ("application/json", {"n": 0}), jobs[2].id: ("application/json", [1, "two"]),
                      jobs[3].id: ("application/json", "text")}

    # Fewer results than jobs: the ones left out have none.
    more = [claimed(conn, new_job(conn, "noop")) for _ in range(2)]
    conn.execute("select (r.job).*, r.already_recorded from mark_jobs_succeeded(%s::uuid[], %s::uuid[], '[{\"only\": \"first\"}]') r",
                 [[j.id for j in more], [j.lease_token for j in more]])
    assert db.get_result(conn, job_id=more[0].id).value == {"only": "first"}  # type: ignore[union-attr]
    assert db.get_result(conn, job_id=more[1].id) is None


# ---- pgqw_finished ---------------------------------------------------------------------------------

def test_pgqw_finished_is_notified_when_a_watched_job_succeeds_and_when_it_goes_dead(
        conn: psycopg.Connection, connect) -> None:
    listener = connect()
    db.listen_finished(listener)

    def watched(job):
        assert db.watch_job(listener, job_id=job.id) == "processing"
        return job

    def next_payload() -> str:
        got = list(listener.notifies(timeout=5, stop_after=1))
        assert len(got) == 1, "no pgqw_finished notification"
        return got[0].payload

    succeeded = watched(claimed(conn, new_job(conn, "noop")))
    db.mark_succeeded(conn, job_id=succeeded.id, lease_token=succeeded.lease_token,
                      result=("application/json", 1, None))
    assert next_payload() == str(succeeded.id)

    # A failure with tries left is not the end: no notification for it. The next one (notifications
    # arrive in commit order) is the job's death.
    job = watched(claimed(conn, new_job(conn, "noop", max_attempts=2)))
    db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token, error="boom", base_ms=0, max_jitter_ms=0)
    again = claimed(conn, job, worker_id="w2")
    db.mark_failed(conn, job_id=job.id, lease_token=again.lease_token, error="boom again")
    assert job_row(conn, job.id)["status"] == "dead"
    assert next_payload() == str(job.id)

    permanent = watched(claimed(conn, new_job(conn, "noop", max_attempts=5)))
    db.mark_failed(conn, job_id=permanent.id, lease_token=permanent.lease_token, error="bad payload", retryable=False)
    assert next_payload() == str(permanent.id)

    # A batch success and a sweep that kills a job say '*' (some jobs ended).
    batch = watched(claimed(conn, new_job(conn, "noop")))
    db.mark_jobs_succeeded(conn, done=[(batch.id, batch.lease_token)])
    assert next_payload() == "*"
    lone = new_job(conn, "noop", max_attempts=1)
    conn.execute("insert into job_isolation (job_id) values (%s)", [lone.id])  # ran alone: the lapse counts
    swept = watched(claimed(conn, lone, lease_ms=1))
    assert [s.status for s in db.sweep_stuck_at(conn, now=swept.lease_expires_at + timedelta(seconds=1))] == ["dead"]
    assert next_payload() == "*"


def test_pgqw_finished_is_silent_for_a_job_nobody_watches(conn: psycopg.Connection, connect) -> None:
    listener = connect()
    db.listen_finished(listener)
    quiet = [claimed(conn, new_job(conn, "noop")) for _ in range(3)]
    db.mark_succeeded(conn, job_id=quiet[0].id, lease_token=quiet[0].lease_token)
    db.mark_jobs_succeeded(conn, done=[(quiet[1].id, quiet[1].lease_token)])
    db.mark_failed(conn, job_id=quiet[2].id, lease_token=quiet[2].lease_token, error="bad", retryable=False)
    # Watched, then no longer: silent too. Then a watched one: its notification is the first to arrive.
    unwatched = claimed(conn, new_job(conn, "noop"))
    assert db.watch_job(listener, job_id=unwatched.id) == "processing"
    assert db.unwatch_job(listener, job_id=unwatched.id) is True
    assert db.unwatch_job(listener, job_id=unwatched.id) is False
    db.mark_succeeded(conn, job_id=unwatched.id, lease_token=unwatched.lease_token)
    last = claimed(conn, new_job(conn, "noop"))
    db.watch_job(listener, job_id=last.id)
    db.mark_succeeded(conn, job_id=last.id, lease_token=last.lease_token)
    assert [n.payload for n in listener.notifies(timeout=5, stop_after=1)] == [str(last.id)]


def test_watch_job_refuses_a_missing_job_and_a_null_id(conn: psycopg.Connection) -> None:
    before = rows(conn, "select * from job_waiters")
    with pytest.raises(psycopg.Error) as missing:
        db.watch_job(conn, job_id=uuid.uuid4())
    assert missing.value.sqlstate == "QN404" and "does not exist" in str(missing.value)
    for fn in ("watch_job", "unwatch_job"):
        with pytest.raises(psycopg.Error) as null:
            conn.execute(f"select {fn}(null)")
        assert null.value.sqlstate == "QV400" and "job id" in str(null.value)
    assert rows(conn, "select * from job_waiters") == before


def test_watch_job_of_a_ready_job_does_not_hide_it_from_a_claim(conn: psycopg.Connection, connect) -> None:
    """A client starts waiting right after its enqueue, when workers race to claim the job: claims skip
    locked rows, so the watch must lock nothing a claim reads."""
    job = new_job(conn, "noop")
    waiter = connect(autocommit=False)
    assert db.watch_job(waiter, job_id=job.id) == "pending"  # its transaction still open
    got = db.claim_job(conn, worker_id="w1")
    assert got is not None and got.id == job.id
    waiter.commit()


def test_watch_job_during_a_completion_waits_for_it_and_sees_the_end(conn: psycopg.Connection, connect) -> None:
    """The race a conditional notification must not lose: a waiter that registers while a completion is
    under way. watch_job waits for the completion's row lock, so it answers with the end."""
    job = claimed(conn, new_job(conn, "noop"))
    marker, waiter, observer = connect(autocommit=False), connect(), connect()
    db.mark_succeeded(marker, job_id=job.id, lease_token=job.lease_token)  # not committed yet
    pid = one(waiter, "select pg_backend_pid() as pid")["pid"]
    answer: list[str] = []
    thread = threading.Thread(target=lambda: answer.append(db.watch_job(waiter, job_id=job.id)))
    thread.start()
    deadline = time.monotonic() + 10
    while marker.info.backend_pid not in one(observer, "select pg_blocking_pids(%s) as pids", [pid])["pids"]:
        assert thread.is_alive() and time.monotonic() < deadline, "watch_job did not wait for the completion"
    marker.commit()
    thread.join(10)
    assert answer == ["succeeded"]
