"""enqueue_job's p_unique_for (enqueue_jobs' unique_for_ms): a key unique only within a window of run_at,
stored as `<key>@<window start>`, so the unique constraint still decides races within a window."""
from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from pgqw import client, db
from tests.helpers import enqueue, rows
from tests.sql.queue_state import snapshot

HOUR = timedelta(hours=1)
# A fixed window to drive the time by run_at: 10:00 to 11:00 UTC, an hour from now and later.
START = (datetime.now(timezone.utc) + timedelta(days=2)).replace(hour=10, minute=0, second=0, microsecond=0)


def report(conn: psycopg.Connection, at: datetime, **kwargs) -> db.EnqueuedJob:
    return db.enqueue_job(conn, type="report", payload={"customer": 7}, idempotency_key="report-7",
                          run_at=at, unique_for=HOUR, **kwargs)


def test_unique_for_within_the_window_returns_the_same_job(conn: psycopg.Connection) -> None:
    first = report(conn, START + timedelta(minutes=5))
    again = report(conn, START + timedelta(minutes=59, seconds=59))
    assert first.created and not again.created and again.id == first.id
    assert first.idempotency_key == f"report-7@{START:%Y-%m-%dT%H:%M:%S}.000Z"


def test_unique_for_after_the_window_makes_a_new_job(conn: psycopg.Connection) -> None:
    first = report(conn, START + timedelta(minutes=59, seconds=59, milliseconds=999))
    second = report(conn, START + HOUR)  # the next window's first instant
    assert first.created and second.created and second.id != first.id
    assert second.idempotency_key == f"report-7@{START + HOUR:%Y-%m-%dT%H:%M:%S}.000Z"
    assert len(rows(conn, "select id from jobs where idempotency_key like 'report-7@%'")) == 2


def test_unique_for_now_uses_the_database_clock(conn: psycopg.Connection) -> None:
    first = db.enqueue_job(conn, type="t", payload={}, idempotency_key="daily", unique_for=timedelta(days=1))
    again = db.enqueue_job(conn, type="t", payload={}, idempotency_key="daily", unique_for=timedelta(days=1))
    window = rows(conn, "select to_char(date_trunc('day', now() at time zone 'UTC'),"
                        " 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') as w")[0]["w"]
    # The two calls could straddle midnight UTC: then each made its own job, each in its window.
    if first.idempotency_key == again.idempotency_key:
        assert again.id == first.id and not again.created
    assert again.idempotency_key == f"daily@{window}"


def test_unique_for_different_job_in_the_window_raises_qi409(conn: psycopg.Connection) -> None:
    report(conn, START)
    with pytest.raises(psycopg.Error) as exc:
        db.enqueue_job(conn, type="report", payload={"customer": 8}, idempotency_key="report-7",
                       run_at=START + timedelta(minutes=1), unique_for=HOUR)
    assert exc.value.sqlstate == "QI409"


def test_unique_for_unset_keeps_todays_idempotency(conn: psycopg.Connection) -> None:
    first = enqueue(conn, "plain", run_at=START)
    again = enqueue(conn, "plain", run_at=START + timedelta(days=30))
    assert first.created and not again.created and again.id == first.id
    assert first.idempotency_key == "plain"
    # The windowed key is another key than the plain one.
    windowed = enqueue(conn, "plain", run_at=START, unique_for=HOUR)
    assert windowed.created and windowed.id != first.id


@pytest.mark.parametrize("call", [
    "select (r.job).*, r.created from enqueue_job('t', '{}', 'k', p_unique_for => interval '0') r",
    "select (r.job).*, r.created from enqueue_job('t', '{}', 'k', p_unique_for => interval '-1 hour') r",
    "select (r.job).*, r.created from enqueue_job('t', '{}', 'k', p_unique_for => interval '367 days') r",
    f"select (r.job).*, r.created from enqueue_job('t', '{{}}', '{'k' * 231}', p_unique_for => interval '1 hour') r",
    "select (r.job).*, r.created from enqueue_jobs('[{\"type\": \"t\", \"payload\": {}, \"idempotency_key\": \"k\", \"unique_for_ms\": 0}]') r",
    "select (r.job).*, r.created from enqueue_jobs('[{\"type\": \"t\", \"payload\": {}, \"idempotency_key\": \"k\", \"unique_for_ms\": \"1h\"}]') r",
    f"select (r.job).*, r.created from enqueue_jobs('[{{\"type\": \"t\", \"payload\": {{}}, \"idempotency_key\": \"{'k' * 231}\","
    " \"unique_for_ms\": 1000}]') r",
])
def test_unique_for_bad_input_raises_qv400_and_changes_nothing(conn: psycopg.Connection, call: str) -> None:
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(call)
    assert exc.value.sqlstate == "QV400"
    assert "unique_for" in exc.value.diag.message_primary
    assert snapshot(conn) == before


def test_unique_for_230_character_key_fits(conn: psycopg.Connection) -> None:
    job = db.enqueue_job(conn, type="t", payload={}, idempotency_key="k" * 230, unique_for=HOUR)
    assert len(job.idempotency_key) == 255


def test_unique_for_ms_in_enqueue_jobs_windows_each_element(conn: psycopg.Connection) -> None:
    jobs = [{"type": "report", "payload": {"customer": 7}, "idempotency_key": "report-7", "run_at": at,
             "unique_for": HOUR} for at in (START, START + HOUR)]
    made = db.enqueue_jobs(conn, jobs=jobs)
    assert [j.created for j in made] == [True, True] and made[0].id != made[1].id
    again = db.enqueue_jobs(conn, jobs=[{**jobs[0], "run_at": START + timedelta(minutes=30)}])
    assert again[0].id == made[0].id and not again[0].created
    # The same windowed key twice in one batch is refused, as any key twice is.
    with pytest.raises(psycopg.Error) as exc:
        db.enqueue_jobs(conn, jobs=[jobs[0], {**jobs[0], "run_at": START + timedelta(minutes=1)}])
    assert exc.value.sqlstate == "QV400" and "twice" in exc.value.diag.message_primary
    # Without unique_for_ms an element keeps its plain key.
    plain = db.enqueue_jobs(conn, jobs=[{"type": "t", "payload": {}, "idempotency_key": "report-7"}])
    assert plain[0].idempotency_key == "report-7" and plain[0].created


def test_unique_for_through_the_client(conn: psycopg.Connection) -> None:
    one = client.enqueue(conn, "report", {"c": 1}, idempotency_key="c1", run_at=START, unique_for=HOUR)
    two = client.enqueue(conn, "report", {"c": 1}, idempotency_key="c1", run_at=START + HOUR, unique_for=HOUR)
    many = client.enqueue_many(conn, [client.Enqueue("report", {"c": 1}, "c1", run_at=START + timedelta(minutes=9),
                                                     unique_for=HOUR)])
    assert one.created and two.created and one.id != two.id
    assert many[0].id == one.id and not many[0].created


def test_unique_for_two_sessions_racing_in_one_window_make_one_job(connect) -> None:
    """Step by step: A enqueues in an open transaction; B's enqueue in the same window waits on A's
    uncommitted key (the unique constraint), then returns A's job."""
    a, b, watcher = connect(autocommit=False), connect(), connect()
    job_a = report(a, START + timedelta(minutes=1))
    result: list[db.EnqueuedJob] = []
    t = threading.Thread(target=lambda: result.append(report(b, START + timedelta(minutes=50))))
    t.start()
    # Until the server shows B waiting on a lock (A's uncommitted key), not a guessed sleep.
    deadline = time.monotonic() + 10
    while not rows(watcher, "select 1 from pg_stat_activity where pid = %s and wait_event_type = 'Lock'",
                   [b.info.backend_pid]):
        assert time.monotonic() < deadline and t.is_alive(), "B should wait on A's key, not insert a second job"
    assert not result
    a.commit()
    t.join(timeout=5)
    assert result and result[0].id == job_a.id and result[0].created is False
    assert len(rows(b, "select id from jobs")) == 1
