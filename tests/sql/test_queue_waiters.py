"""Producers notify only while a worker waits (queue_waiters, wait_for_jobs, waits_settled, has_waiters).

Each test LISTENs on a real connection and acts on others. What arrived is read up to a sentinel the acting
connection sends last (notifications of one session arrive in commit order), so "nothing" is checked without
waiting for a timeout. The handshake's tests interleave real sessions: a producer still in progress when a
worker begins to wait, and one that begins after."""
from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

from pgqw import db
from tests.helpers import enqueue, heard, one, rows


@pytest.fixture
def listener(connect) -> psycopg.Connection:  # type: ignore[no-untyped-def]
    c = connect()
    db.listen(c)
    return c


def _spec(key: str, **kw: object) -> dict:
    return {"type": "noop", "payload": {}, "idempotency_key": key, **kw}


def test_nobody_waits_so_enqueue_notifies_nobody(conn: psycopg.Connection, listener: psycopg.Connection) -> None:
    enqueue(conn, queue="emails")
    enqueue(conn, queue="emails", run_at=one(conn, "select now() + interval '1 hour' as t")["t"])
    db.enqueue_jobs(conn, jobs=[_spec("a"), _spec("b", delay_ms=60_000)])
    assert heard(listener, conn) == []
    assert rows(conn, "select count(*)::int as n from jobs where status = 'pending'") == [{"n": 4}]


def test_a_waiting_worker_is_notified_of_its_queues_only(conn: psycopg.Connection, listener: psycopg.Connection) -> None:
    db.wait_for_jobs(listener, worker_id="w1", queues=["emails"])
    enqueue(conn, queue="emails")
    enqueue(conn, queue="reports")
    db.enqueue_jobs(conn, jobs=[_spec("a", queue="reports"), _spec("b", queue="emails", delay_ms=60_000)])
    got = heard(listener, conn)
    assert got[0] == ("pgqw_jobs", "emails") and len(got) == 2
    assert got[1][0] == "pgqw_jobs_at" and got[1][1].endswith(" emails")


def test_a_worker_of_every_queue_is_notified_of_each(conn: psycopg.Connection, listener: psycopg.Connection) -> None:
    db.wait_for_jobs(listener, worker_id="w1")  # no queues: every one ('*')
    enqueue(conn, queue="emails")
    enqueue(conn, queue="reports")
    assert heard(listener, conn) == [("pgqw_jobs", "emails"), ("pgqw_jobs", "reports")]
    assert rows(conn, "select queue, worker_id from queue_waiters") == [{"queue": "*", "worker_id": "w1"}]


def test_a_wait_that_ran_out_or_a_stopped_worker_is_notified_no_more(
        conn: psycopg.Connection, listener: psycopg.Connection) -> None:
    db.wait_for_jobs(listener, worker_id="w1", queues=["emails"])
    conn.execute("update queue_waiters set until = now() - interval '1 millisecond'")
    enqueue(conn, queue="emails")
    assert heard(listener, conn) == []
    db.wait_for_jobs(listener, worker_id="w1", queues=["emails"])  # renewed
    enqueue(conn, queue="emails")
    assert heard(listener, conn) == [("pgqw_jobs", "emails")]
    db.register_worker(conn, worker_id="w1", task_types=["noop"])
    db.stop_worker(conn, worker_id="w1")
    assert rows(conn, "select * from queue_waiters") == []
    enqueue(conn, queue="emails")
    assert heard(listener, conn) == []


def test_a_worker_of_an_earlier_release_is_notified_of_every_queue_while_it_is_alive(
        conn: psycopg.Connection, listener: psycopg.Connection) -> None:
    """Such a worker registers without p_waits_for_jobs and never calls wait_for_jobs: its registration
    stands for a wait of every queue until its row runs out, so an upgrade that migrates first wakes it."""
    conn.execute("select * from register_worker('old-1', array['noop'], null, 1, 'h', 1, 30000)")
    enqueue(conn, queue="emails")
    assert heard(listener, conn) == [("pgqw_jobs", "emails")]
    assert [(r["queue"], r["worker_id"]) for r in rows(conn, "select * from queue_waiters")] == [("*", "old-1")]
    db.register_worker(conn, worker_id="new-1", task_types=["noop"])  # this release's worker: it says when
    db.stop_worker(conn, worker_id="old-1")
    enqueue(conn, queue="emails")
    assert heard(listener, conn) == []


def test_wait_for_jobs_replaces_the_workers_queues_and_drops_long_expired_rows(conn: psycopg.Connection) -> None:
    conn.execute("insert into queue_waiters values ('old', 'gone', now() - interval '2 minutes'),"
                 " ('recent', 'gone', now() - interval '10 seconds')")
    db.wait_for_jobs(conn, worker_id="w1", queues=["a", "b", "a"])
    until = db.wait_for_jobs(conn, worker_id="w1", queues=["b", "c"], for_ms=5000).until
    got = rows(conn, "select queue, worker_id, until from queue_waiters order by queue")
    assert [(r["queue"], r["worker_id"]) for r in got] == [("b", "w1"), ("c", "w1"), ("recent", "gone")]
    assert got[0]["until"] == got[1]["until"] == until
    assert timedelta(seconds=4) < until - one(conn, "select now() as t")["t"] <= timedelta(seconds=5)


def test_a_failed_job_is_announced_only_while_a_worker_waits(conn: psycopg.Connection,
                                                              listener: psycopg.Connection) -> None:
    for _ in range(2):
        enqueue(conn, queue="emails", max_attempts=3)
    first = db.claim_job(conn, worker_id="w1", queues=["emails"])
    second = db.claim_job(conn, worker_id="w1", queues=["emails"])
    assert first is not None and second is not None
    db.mark_failed(conn, job_id=first.id, lease_token=first.lease_token, error="boom")
    assert heard(listener, conn) == []
    db.wait_for_jobs(listener, worker_id="w2", queues=["emails"])
    db.mark_failed(conn, job_id=second.id, lease_token=second.lease_token, error="boom")
    (channel, payload), = heard(listener, conn)
    assert channel == "pgqw_jobs_at" and payload.endswith(" emails")


def test_a_producer_not_in_read_committed_notifies_whoever_listens(
        db_url: str, conn: psycopg.Connection, listener: psycopg.Connection) -> None:
    with psycopg.connect(db_url) as app:
        app.execute("set transaction isolation level repeatable read")
        enqueue(app, queue="emails")
    assert heard(listener, conn) == [("pgqw_jobs", "emails")]


def test_handshake_a_producer_in_progress_when_the_worker_begins_to_wait_is_waited_for(
        db_url: str, conn: psycopg.Connection, listener: psycopg.Connection) -> None:
    """The producer enqueues before the worker waits (so it does not notify) and commits after the worker's
    claim found nothing: waits_settled stays false until it has ended, and the claim after that takes its
    job. A producer that begins after the wait notifies."""
    with psycopg.connect(db_url) as early:
        enqueue(early, queue="emails")  # in progress: nobody waits yet
        waiting = db.wait_for_jobs(listener, worker_id="w1", queues=["emails"])
        assert db.claim_job(conn, worker_id="w1", queues=["emails"]) is None  # not committed yet
        assert not db.waits_settled(conn, xid=waiting.xid)
        with psycopg.connect(db_url) as late:
            enqueue(late, queue="emails")  # began after the wait: it sees the row
        assert heard(listener, conn) == [("pgqw_jobs", "emails")]
        assert not db.waits_settled(conn, xid=waiting.xid)
    # The early producer committed without a notification; the worker now claims its job.
    assert heard(listener, conn) == []
    assert db.waits_settled(conn, xid=waiting.xid)
    assert len(db.claim_jobs(conn, worker_id="w1", queues=["emails"], limit=10)) == 2


def test_handshake_a_producer_whose_id_is_above_the_workers_is_waited_for_too(
        db_url: str, conn: psycopg.Connection, listener: psycopg.Connection) -> None:
    """The producer gets its transaction id after the worker's (so a snapshot taken at the worker's commit
    would not list it) and reads has_waiters before that commit: waits_settled on the id taken after the
    commit stays false until the producer has ended."""
    with psycopg.connect(db_url) as worker, psycopg.connect(db_url) as producer:
        worker.execute("select wait_for_jobs('w1', array['emails'])")  # its transaction has an id now
        enqueue(producer, queue="emails")  # a later id; the worker's row is not committed: no notification
        worker.commit()
        worker.autocommit = True
        xid = db.settle_point(worker)
        assert not db.waits_settled(conn, xid=xid)
        assert db.claim_job(conn, worker_id="w1", queues=["emails"]) is None
        producer.commit()
    assert heard(listener, conn) == []  # it never notified: the settling claim is what finds its job
    assert db.waits_settled(conn, xid=xid)
    assert db.claim_job(conn, worker_id="w1", queues=["emails"]) is not None


def test_handshake_a_transaction_that_began_after_the_wait_is_not_waited_for(db_url: str, conn: psycopg.Connection,
                                                                           listener: psycopg.Connection) -> None:
    waiting = db.wait_for_jobs(listener, worker_id="w1")
    with psycopg.connect(db_url) as later:
        enqueue(later, queue="emails")
        assert db.waits_settled(conn, xid=waiting.xid)


def test_wait_for_jobs_refuses_a_connection_in_a_transaction(db_url: str) -> None:
    with psycopg.connect(db_url) as c, pytest.raises(ValueError, match="autocommit"):
        db.wait_for_jobs(c, worker_id="w1")


@pytest.mark.parametrize("args", [
    "null, null, 60000",
    "' ', null, 60000",
    "'w', array[' '], 60000",
    "repeat('x', 201), null, 60000",
    "'w', '{}', 60000",
    "'w', array[null]::text[], 60000",
    "'w', array[repeat('q', 201)], 60000",
    "'w', null, 999",
    "'w', null, 3600001",
    "'w', null, null",
])
def test_wait_for_jobs_bad_input_is_qv400_and_changes_nothing(conn: psycopg.Connection, args: str) -> None:
    db.wait_for_jobs(conn, worker_id="keep")
    before = rows(conn, "select * from queue_waiters")
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(f"select wait_for_jobs({args})")
    assert exc.value.sqlstate == "QV400" and exc.value.diag.message_primary
    assert rows(conn, "select * from queue_waiters") == before


def test_waits_settled_refuses_a_null_id(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as exc:
        conn.execute("select waits_settled(null)")
    assert exc.value.sqlstate == "QV400"
