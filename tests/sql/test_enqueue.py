"""enqueue_job: one insert, idempotent by key, refuses bad input with a stable SQLSTATE."""
from __future__ import annotations

import threading

import psycopg
import pytest

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
    row = one(conn, "select * from enqueue_job('listing_flyer', '{\"a\": 1}', 'psql-key')")
    assert row["created"] is True and row["status"] == "pending"
    row = one(conn, "select * from enqueue_job('listing_flyer', '{\"a\": 1}', 'psql-key')")
    assert row["created"] is False


def test_enqueue_job_options_are_stored(conn: psycopg.Connection) -> None:
    row = one(
        conn,
        "select * from enqueue_job('t', '{}', 'opt', p_queue => 'emails', p_priority => 7,"
        " p_run_at => now() + interval '1 hour', p_max_attempts => 2)",
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
    applies (none here: the demo's types set neither, and an unregistered type has none), then the
    defaults 'default' and 0."""
    row = one(conn, "select * from enqueue_job(%s, '{}', 'nulls', p_queue => null, p_priority => null,"
                    " p_max_attempts => null)", [type_])
    assert (row["created"], row["queue"], row["priority"], row["max_attempts"]) == (True, "default", 0, 5)
    conn.execute("update task_types set queue = 'typed', priority = 4, max_attempts = 2 where name = %s", [type_])
    row = one(conn, "select * from enqueue_job(%s, '{}', 'nulls-typed', p_queue => null, p_priority => null)",
              [type_])
    expected = ("typed", 4, 2) if type_ == "listing_flyer" else ("default", 0, 5)
    assert (row["queue"], row["priority"], row["max_attempts"]) == expected


def test_enqueue_job_notifies_when_ready_now(db_url: str, conn: psycopg.Connection) -> None:
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("listen pgqw_jobs")
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
