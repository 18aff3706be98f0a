"""Jobs for later: the pgqw_jobs_at notifications of enqueue_job(s) and mark_failed, and next_run_at.

Each test LISTENs on a real connection, writes on another, and reads what arrived."""
from __future__ import annotations

import psycopg
import pytest

from pgqw import db
from pgqw.worker.connection.listener import parse_due
from tests.helpers import enqueue, listen_waiting


def _listener(connect) -> psycopg.Connection:
    listener = connect()
    listen_waiting(listener)
    return listener


def _notes(listener: psycopg.Connection, timeout: float = 0.5) -> list[tuple[str, str]]:
    return [(n.channel, n.payload) for n in listener.notifies(timeout=timeout)]


def _due(payload: str) -> tuple[int, bool, str]:
    parsed = parse_due(payload)
    assert parsed is not None, payload
    return parsed


def test_enqueue_job_for_later_notifies_pgqw_jobs_at_with_ms_and_queue(conn: psycopg.Connection, connect) -> None:
    listener = _listener(connect)
    conn.execute("select enqueue_job('t', '{}', 'later', p_queue => 'emails',"
                 " p_run_at => now() + interval '1500 milliseconds')")
    (channel, payload), = _notes(listener)
    ms, more, queue = _due(payload)
    assert channel == "pgqw_jobs_at" and queue == "emails" and not more
    assert 1400 <= ms <= 1500
    enqueue(conn, queue="emails")  # ready now: the plain payload, as before
    assert _notes(listener) == [("pgqw_jobs", "emails")]


def test_enqueue_job_for_later_a_queue_with_spaces_and_at_signs_is_read_whole(conn: psycopg.Connection,
                                                                            connect) -> None:
    listener = _listener(connect)
    conn.execute("select enqueue_job('t', '{}', 'odd', p_queue => 'a@1 b c', p_run_at => now() + interval '1 hour')")
    (channel, payload), = _notes(listener)
    assert channel == "pgqw_jobs_at" and _due(payload)[2] == "a@1 b c"


def test_enqueue_job_notification_for_later_arrives_at_commit(db_url: str, connect) -> None:
    listener = _listener(connect)
    with psycopg.connect(db_url) as app:
        app.execute("select enqueue_job('t', '{}', 'tx', p_run_at => now() + interval '10 seconds')")
        assert _notes(listener, timeout=0.05) == []
    (channel, payload), = _notes(listener)
    assert channel == "pgqw_jobs_at" and _due(payload)[2] == "default"


def test_enqueue_job_repeated_key_sends_nothing(conn: psycopg.Connection, connect) -> None:
    conn.execute("select enqueue_job('t', '{}', 'again', p_run_at => now() + interval '1 minute')")
    listener = _listener(connect)
    conn.execute("select enqueue_job('t', '{}', 'again', p_run_at => now() + interval '1 minute')")
    assert _notes(listener, timeout=0.2) == []


def test_enqueue_jobs_one_notification_per_queue_with_its_earliest_time(conn: psycopg.Connection, connect) -> None:
    listener = _listener(connect)
    db.enqueue_jobs(conn, jobs=[
        {"type": "t", "payload": {}, "idempotency_key": "a1", "queue": "a", "delay_ms": 4000},
        {"type": "t", "payload": {}, "idempotency_key": "a2", "queue": "a", "delay_ms": 2000},
        {"type": "t", "payload": {}, "idempotency_key": "b1", "queue": "b", "delay_ms": 3000},
        {"type": "t", "payload": {}, "idempotency_key": "b2", "queue": "b", "delay_ms": 3000},
        {"type": "t", "payload": {}, "idempotency_key": "c1", "queue": "c"},
    ])
    notes = _notes(listener)
    assert sorted(p for c, p in notes if c == "pgqw_jobs") == ["c"]
    later = {q: (ms, more) for ms, more, q in (_due(p) for c, p in notes if c == "pgqw_jobs_at")}
    assert set(later) == {"a", "b"}
    assert 1900 <= later["a"][0] <= 2000 and later["a"][1]      # more of queue a come later
    assert 2900 <= later["b"][0] <= 3000 and not later["b"][1]  # both of b at one time


def test_mark_failed_notifies_the_retry_time(conn: psycopg.Connection, connect) -> None:
    enqueue(conn, queue="emails")
    job = db.claim_job(conn, worker_id="w1")
    listener = _listener(connect)
    db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token, error="boom", base_ms=3000, max_jitter_ms=0)
    (channel, payload), = _notes(listener)
    ms, more, queue = _due(payload)
    assert channel == "pgqw_jobs_at" and queue == "emails" and 2900 <= ms <= 3000 and not more


def test_mark_failed_with_no_backoff_wakes_at_once_and_dead_sends_no_time(conn: psycopg.Connection,
                                                                        connect) -> None:
    enqueue(conn, max_attempts=2)
    job = db.claim_job(conn, worker_id="w1")
    listener = _listener(connect)
    db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token, error="boom", base_ms=0, max_jitter_ms=0)
    assert _notes(listener) == [("pgqw_jobs", "default")]
    job = db.claim_job(conn, worker_id="w1")
    db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token, error="boom", base_ms=0, max_jitter_ms=0)
    assert [c for c, _ in _notes(listener)] == []  # dead: only pgqw_finished, which this listener does not hear


def _later(conn: psycopg.Connection, key: str, seconds: float, **kw) -> None:
    kw.setdefault("type", "t")
    conn.execute("select enqueue_job(%(type)s, '{}', %(key)s, p_queue => %(queue)s,"
                 " p_run_at => now() + make_interval(secs => %(s)s))",
                 {"key": key, "s": seconds, "queue": kw.get("queue", "default"), "type": kw["type"]})


def test_next_run_at_the_earliest_times_ahead_of_this_workers_jobs(conn: psycopg.Connection) -> None:
    assert db.next_run_at(conn) == []
    enqueue(conn)  # ready now: not ahead
    _later(conn, "d5", 50)
    _later(conn, "d2", 20)
    _later(conn, "e3", 30, queue="emails")
    _later(conn, "o4", 40, type="other")
    conn.execute("select enqueue_job('t', '{}', 'hi', p_priority => 9, p_run_at => now() + interval '60 seconds')")
    got = db.next_run_at(conn, limit=10)
    assert [round(r.due_in_ms / 10_000) for r in got] == [2, 3, 4, 5, 6]  # every priority, in time order
    assert 19_000 < got[0].due_in_ms <= 20_000
    assert [round(r.due_in_ms / 10_000) for r in db.next_run_at(conn)] == [2]
    assert [round(r.due_in_ms / 10_000) for r in db.next_run_at(conn, queues=["emails"])] == [3]
    assert [round(r.due_in_ms / 10_000) for r in db.next_run_at(conn, task_types=["other"], limit=5)] == [4]
    db.pause_queue(conn, queue="emails")
    assert [round(r.due_in_ms / 10_000) for r in db.next_run_at(conn, limit=10)] == [2, 4, 5, 6]


def test_next_run_at_one_row_per_time(conn: psycopg.Connection) -> None:
    conn.execute("select enqueue_jobs(jsonb_build_array("
                 "jsonb_build_object('type', 't', 'payload', '{}'::jsonb, 'idempotency_key', 'x1', 'run_at', r),"
                 "jsonb_build_object('type', 't', 'payload', '{}'::jsonb, 'idempotency_key', 'x2', 'run_at', r)))"
                 " from (select (now() + interval '1 minute')::text as r) t")
    assert len(db.next_run_at(conn, limit=5)) == 1


@pytest.mark.parametrize("call", [
    "select * from next_run_at(p_limit => 0)",
    "select * from next_run_at(p_limit => 1001)",
    "select * from next_run_at(p_limit => null)",
    "select * from next_run_at(p_queues => '{}')",
    "select * from next_run_at(p_task_types => '{}')",
])
def test_next_run_at_bad_arguments_raise_qv400(conn: psycopg.Connection, call: str) -> None:
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(call)
    assert exc.value.sqlstate == "QV400"
