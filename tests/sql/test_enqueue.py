"""enqueue_job: one insert, idempotent by key, refuses bad input with a stable SQLSTATE."""
from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from pgqw import db
from tests.helpers import LISTING, enqueue, job_row, one, rows
from tests.sql.queue_state import snapshot


def test_enqueue_job_creates_pending_job(conn: psycopg.Connection) -> None:
    job = enqueue(conn, "k1")
    assert job.created is True
    assert job.status == "pending"
    assert job.attempts == 0
    assert job.max_attempts == 5
    assert job.queue == "default" and job.priority == 0
    assert job.payload == LISTING
    assert job_row(conn, job.id)["idempotency_key"] == "k1"


def test_enqueue_job_same_key_returns_existing_job(conn: psycopg.Connection) -> None:
    first = enqueue(conn, "same")
    second = enqueue(conn, "same")
    assert second.id == first.id
    assert second.created is False
    assert rows(conn, "select count(*) as n from jobs")[0]["n"] == 1


def test_enqueue_job_same_key_different_payload_raises_qi409(conn: psycopg.Connection) -> None:
    enqueue(conn, "reused")
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        enqueue(conn, "reused", payload={**LISTING, "bedrooms": 4})
    assert exc.value.sqlstate == "QI409"
    assert "reused" in exc.value.diag.message_primary
    for different in ({"type": "other_type"}, {"queue": "other"}, {"priority": 5}):
        with pytest.raises(psycopg.Error) as exc:
            enqueue(conn, "reused", **different)
        assert exc.value.sqlstate == "QI409", different
    assert snapshot(conn) == before


def test_enqueue_job_from_sql_with_positional_arguments(conn: psycopg.Connection) -> None:
    row = one(conn, "select (r.job).*, r.created from enqueue_job('listing_flyer', '{\"a\": 1}', 'psql-key') r")
    assert row["created"] is True and row["status"] == "pending"
    row = one(conn, "select (r.job).*, r.created from enqueue_job('listing_flyer', '{\"a\": 1}', 'psql-key') r")
    assert row["created"] is False


def test_enqueue_job_options_are_stored(conn: psycopg.Connection) -> None:
    row = one(
        conn,
        "select (r.job).*, r.created from enqueue_job('t', '{}', 'opt', p_queue => 'emails', p_priority => 7,"
        " p_run_at => now() + interval '1 hour', p_max_attempts => 2) r",
    )
    assert (row["queue"], row["priority"], row["max_attempts"]) == ("emails", 7, 2)
    assert one(conn, "select run_at > now() + interval '59 minutes' as later from jobs")["later"]


def test_enqueue_job_max_attempts_comes_from_settings(conn: psycopg.Connection) -> None:
    conn.execute("update queue_settings set max_attempts = 9")
    assert enqueue(conn).max_attempts == 9


@pytest.mark.parametrize("type_", ["listing_flyer", "never-registered"])
def test_enqueue_job_null_queue_and_priority_mean_the_types_or_the_default(
    conn: psycopg.Connection, type_: str
) -> None:
    """p_queue => null and p_priority => null are not errors: they mean "unset", so the task type's value
    applies (none here: the demo's types set neither, and an unregistered type, accepted where a DBA lets
    them in, has none), then the defaults 'default' and 0."""
    conn.execute("update queue_settings set accept_unregistered_types = true")
    row = one(conn, "select (r.job).*, r.created from enqueue_job(%s, '{}', 'nulls', p_queue => null,"
                    " p_priority => null, p_max_attempts => null) r", [type_])
    assert (row["created"], row["queue"], row["priority"], row["max_attempts"]) == (True, "default", 0, 5)
    conn.execute("update task_types set queue = 'typed', priority = 4, max_attempts = 2 where name = %s", [type_])
    row = one(conn, "select (r.job).*, r.created from enqueue_job(%s, '{}', 'nulls-typed', p_queue => null, p_priority => null) r",
              [type_])
    expected = ("typed", 4, 2) if type_ == "listing_flyer" else ("default", 0, 5)
    assert (row["queue"], row["priority"], row["max_attempts"]) == expected


def test_enqueue_job_notifies_when_ready_now(db_url: str, conn: psycopg.Connection) -> None:
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("listen pgqw_jobs")
        db.wait_for_jobs(listener, worker_id="test-listener")  # producers notify while a worker waits
        enqueue(conn, queue="emails")
        got = list(listener.notifies(timeout=2, stop_after=1))
        assert [n.payload for n in got] == ["emails"]
        enqueue(conn, run_at=None, key="later", **{})  # ready now too
        assert len(list(listener.notifies(timeout=2, stop_after=1))) == 1
        conn.execute("select enqueue_job('t', '{}', 'future', p_run_at => now() + interval '1 hour')")
        assert list(listener.notifies(timeout=0.5)) == []


@pytest.mark.parametrize(
    "call, code",
    [
        ("select enqueue_job(null, '{}', 'k')", "QV400"),
        ("select enqueue_job('', '{}', 'k')", "QV400"),
        ("select enqueue_job('   ', '{}', 'k')", "QV400"),
        ("select enqueue_job(repeat('t', 101), '{}', 'k')", "QV400"),
        ("select enqueue_job('t', null, 'k')", "QV400"),
        ("select enqueue_job('t', '[1, 2]', 'k')", "QV400"),
        ("select enqueue_job('t', '\"text\"', 'k')", "QV400"),
        ("select enqueue_job('t', '{}', null)", "QV400"),
        ("select enqueue_job('t', '{}', '')", "QV400"),
        ("select enqueue_job('t', '{}', repeat('k', 256))", "QV400"),
        ("select enqueue_job('t', '{}', 'has space')", "QV400"),
        ("select enqueue_job('t', '{}', ' ')", "QV400"),
        ("select enqueue_job('t', '{}', 'café')", "QV400"),
        ("select enqueue_job('t', '{}', e'tab\\there')", "QV400"),
        ("select enqueue_job('t', '{}', 'k', p_queue => '')", "QV400"),
        ("select enqueue_job('t', '{}', 'k', p_queue => repeat('q', 101))", "QV400"),
        ("select enqueue_job('t', '{}', 'k', p_queue => '   ')", "QV400"),
        ("select enqueue_job('t', '{}', 'k', p_max_attempts => 0)", "QV400"),
        ("select enqueue_job('t', '{}', 'k', p_max_attempts => -3)", "QV400"),
        ("select enqueue_job('t', '{}', 'k', p_max_attempts => 1001)", "QV400"),
        ("select enqueue_job('t', '{}', 'k', p_run_at => '1969-12-31 23:59:59.999999+00')", "QV400"),
        ("select enqueue_job('t', '{}', 'k', p_run_at => now() + interval '366 days 1 second')", "QV400"),
        ("select enqueue_job('t', '{}', 'k', p_run_at => '9999-01-01T00:00:00Z')", "QV400"),
        ("select enqueue_job('t', '{}', 'k', p_run_at => 'infinity')", "QV400"),
        ("select enqueue_job('t', '{}', 'k', p_run_at => '-infinity')", "QV400"),
        ("select enqueue_job('t', jsonb_build_object('x', repeat('a', 70000)), 'k')", "QV413"),
    ],
)
def test_enqueue_job_bad_input_raises_and_changes_nothing(conn: psycopg.Connection, call: str, code: str) -> None:
    enqueue(conn, "existing")
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(call)
    assert exc.value.sqlstate == code
    assert exc.value.diag.message_primary
    assert snapshot(conn) == before


def test_enqueue_job_same_key_at_the_same_moment_makes_one_row(connect) -> None:
    """Many connections enqueue one key together: the unique constraint decides, one row results."""
    conns = [connect() for _ in range(12)]
    barrier = threading.Barrier(len(conns))
    results: list[db.EnqueuedJob] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def go(c: psycopg.Connection) -> None:
        try:
            barrier.wait()
            job = enqueue(c, "together")
            with lock:
                results.append(job)
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len({r.id for r in results}) == 1
    assert sum(r.created for r in results) == 1
    assert rows(conns[0], "select count(*) as n from jobs")[0]["n"] == 1


def test_enqueue_job_waits_for_uncommitted_twin_then_returns_it(connect) -> None:
    """Step by step: A inserts the key in an open transaction; B's enqueue waits, then returns A's job."""
    a, b = connect(autocommit=False), connect()
    job_a = enqueue(a, "stepwise")
    result: list[db.EnqueuedJob] = []
    t = threading.Thread(target=lambda: result.append(enqueue(b, "stepwise")))
    t.start()
    t.join(timeout=0.5)
    assert t.is_alive(), "B should wait on A's uncommitted row, not insert a second one"
    a.commit()
    t.join(timeout=5)
    assert result and result[0].id == job_a.id and result[0].created is False


def test_enqueue_job_takes_over_key_when_twin_rolls_back(connect) -> None:
    a, b = connect(autocommit=False), connect()
    enqueue(a, "rolled-back")
    result: list[db.EnqueuedJob] = []
    t = threading.Thread(target=lambda: result.append(enqueue(b, "rolled-back")))
    t.start()
    t.join(timeout=0.3)
    a.rollback()
    t.join(timeout=5)
    assert result and result[0].created is True


# The bounds of run_at and max_attempts are the HTTP API's (tests/api/test_limits.py), so pgqw_api
# can do no more over SQL than over HTTP.

@pytest.mark.parametrize("run_at", ["'1970-01-01 00:00:00+00'", "now() + interval '366 days'", "now()"])
def test_enqueue_job_run_at_at_the_ends_of_its_range_is_accepted(conn: psycopg.Connection, run_at: str) -> None:
    row = one(conn, f"select (r.job).*, r.created from enqueue_job('t', '{{}}', 'edge', p_run_at => {run_at}, p_max_attempts => 1000) r")
    assert row["created"] and row["max_attempts"] == 1000


def test_enqueue_job_delay_beyond_366_days_raises_qv400(conn: psycopg.Connection) -> None:
    # db.enqueue_job's delay becomes run_at = now() + delay before enqueue_job sees it.
    enqueue(conn, "a-year", run_at=None, delay=timedelta(days=366))
    with pytest.raises(psycopg.Error) as exc:
        enqueue(conn, "too-late", run_at=None, delay=timedelta(days=366, milliseconds=1))
    assert exc.value.sqlstate == "QV400"
    assert "run_at" in exc.value.diag.message_primary


def test_enqueue_job_as_pgqw_api_is_held_to_the_same_bounds(conn: psycopg.Connection) -> None:
    conn.execute("set role pgqw_api")
    for call in ("select enqueue_job('t', '{}', 'k', p_max_attempts => 1001)",
                 "select enqueue_job('t', '{}', 'k', p_run_at => now() + interval '10 years')",
                 "select enqueue_job('t', '{}', 'k', p_run_at => '1900-01-01Z')"):
        with pytest.raises(psycopg.Error) as exc:
            conn.execute(call)
        assert exc.value.sqlstate == "QV400", call
    conn.execute("reset role")
    assert one(conn, "select count(*) as n from jobs")["n"] == 0


@pytest.mark.parametrize("element, accepted", [
    ({"run_at": "1970-01-01T00:00:00Z"}, True),
    ({"run_at": "1969-12-31T23:59:59Z"}, False),
    ({"run_at": "infinity"}, False),
    ({"run_at": "in 365 days"}, True),
    ({"run_at": "in 367 days"}, False),
    ({"delay_ms": 366 * 24 * 3600 * 1000}, True),
    ({"delay_ms": 366 * 24 * 3600 * 1000 + 1}, False),
    ({"delay_ms": 10**15}, False),
    ({"max_attempts": 1000}, True),
    ({"max_attempts": 1001}, False),
])
def test_enqueue_jobs_holds_the_same_bounds(conn: psycopg.Connection, element: dict[str, Any],
                                            accepted: bool) -> None:
    if str(element.get("run_at", "")).startswith("in "):
        days = int(element["run_at"].split()[1])
        element = {"run_at": (datetime.now(timezone.utc) + timedelta(days=days)).isoformat()}
    batch = [{"type": "t", "payload": {}, "idempotency_key": "fine"},
             {"type": "t", "payload": {}, "idempotency_key": "bounded", **element}]
    if accepted:
        assert [j.created for j in db.enqueue_jobs(conn, jobs=batch)] == [True, True]
        return
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        conn.execute("select (r.job).*, r.created from enqueue_jobs(%s::jsonb) r", [Jsonb(batch)])
    assert exc.value.sqlstate == "QV400"
    assert exc.value.diag.message_primary.startswith("job 2")
    assert snapshot(conn) == before
