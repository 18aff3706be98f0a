"""The wake-ups that let a listening worker stop polling once a claim found nothing: every way a job
becomes claimable without an enqueue notifies pgqw_jobs or pgqw_jobs_at, and a queue with nothing to
claim notifies nobody.

Each test LISTENs on a real connection and acts on another. What arrived is read up to a sentinel the
acting connection sends last (notifications of one session arrive in commit order), so "nothing else"
is checked without waiting for a timeout."""
from __future__ import annotations

from datetime import timedelta

import psycopg

from pgqw import db
from pgqw.worker.connection.listener import parse_due
from tests.helpers import enqueue, heard, listen_waiting, one


def _listener(connect) -> psycopg.Connection:
    listener = connect()
    listen_waiting(listener)
    return listener


def _claimed(conn: psycopg.Connection, queue: str = "default") -> db.ClaimedJob:
    enqueue(conn, queue=queue)
    job = db.claim_job(conn, worker_id="w1", queues=[queue])
    assert job is not None
    return job


def test_sweep_wakes_workers_for_a_job_ready_a_second_that_no_claim_took(conn: psycopg.Connection, connect) -> None:
    listener = _listener(connect)
    db.sweep_stuck_at(conn, now=one(conn, "select now() + interval '1 hour' as t")["t"])
    assert heard(listener, conn) == []  # nothing ready: nobody is woken
    job = enqueue(conn)
    assert heard(listener, conn) == [("pgqw_jobs", "default")]  # the enqueue's own
    db.sweep_stuck_at(conn, now=job.run_at + timedelta(milliseconds=900))
    assert heard(listener, conn) == []  # ready for less than a second: the enqueue's wake-up is enough
    db.sweep_stuck_at(conn, now=job.run_at + timedelta(seconds=1))
    assert heard(listener, conn) == [("pgqw_jobs", "*")]  # still waiting: the safety net


def test_sweep_leaves_paused_rated_and_full_queues_to_their_own_wake_ups(conn: psycopg.Connection, connect) -> None:
    for queue in ("paused", "limited", "rated"):
        enqueue(conn, queue=queue)
    db.pause_queue(conn, queue="paused")
    db.set_queue_rate(conn, queue="rated", jobs_per_second=1)
    db.set_queue_limit(conn, queue="limited", max_running=1)
    running = _claimed(conn, "limited")  # the limited queue is at its limit, one more job waits
    listener = _listener(connect)
    later = one(conn, "select now() + interval '2 seconds' as t")["t"]  # ready a second; no lease expired
    db.sweep_stuck_at(conn, now=later)
    assert heard(listener, conn) == []
    # Its job ends: a slot is free. The worker that ran it claims again by itself; the sweep's safety
    # net wakes the others, for a job of a type that worker does not run.
    db.mark_succeeded(conn, job_id=running.id, lease_token=running.lease_token)
    assert heard(listener, conn) == []  # a completion wakes nobody
    db.sweep_stuck_at(conn, now=later)
    assert heard(listener, conn) == [("pgqw_jobs", "*")]


def test_set_queue_limit_and_rate_wake_the_queue(conn: psycopg.Connection, connect) -> None:
    listener = _listener(connect)
    db.set_queue_limit(conn, queue="reports", max_running=2, create=True)
    db.set_queue_rate(conn, queue="reports", jobs_per_second=5)
    db.set_queue_limit(conn, queue="reports", max_running=None)
    assert heard(listener, conn) == [("pgqw_jobs", "reports")] * 3


def test_a_rated_claim_announces_the_next_token_when_its_bucket_held_jobs_back(conn: psycopg.Connection,
                                                                              connect) -> None:
    db.set_queue_rate(conn, queue="rated", jobs_per_second=2, create=True)  # a bucket of 2 tokens, one every 500 ms
    for _ in range(3):
        enqueue(conn, queue="rated")
    listener = _listener(connect)
    now = one(conn, "select now() as t")["t"]
    claimed = conn.execute("select (r.job).id from claim_jobs_at(%s, 'w1', 10) r", [now]).fetchall()
    assert len(claimed) == 2
    (channel, payload), = heard(listener, conn)
    parsed = parse_due(payload)
    assert channel == "pgqw_jobs_at" and parsed is not None
    ms, more, queue = parsed
    assert (queue, more) == ("rated", False) and 1 <= ms <= 500
    # The third job taken with the next token: nothing is held back any more, nothing announced.
    later = conn.execute("select (r.job).id from claim_jobs_at(%s, 'w1', 10) r", [now + timedelta(milliseconds=500)]).fetchall()
    assert len(later) == 1
    assert heard(listener, conn) == []
