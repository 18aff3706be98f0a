"""A real worker process that polls only every 30 s says it waits (queue_waiters) once a claim finds nothing,
so producers notify it; a job whose producer was still in progress when it began to wait is claimed once that
producer commits (waits_settled), without a notification and without the poll; a clean stop says it waits no
more."""
from __future__ import annotations

import signal

import psycopg

from tests.helpers import enqueue, rows
from tests.worker.conftest import wait_for

SLOW_POLL = {"POLL_INTERVAL_MS": "30000", "SWEEP_INTERVAL_MS": "30000", "SIM_FAILURE_RATE": "0",
             "SIM_MIN_LATENCY_MS": "0", "SIM_MAX_LATENCY_MS": "0"}


def _waiting(conn: psycopg.Connection, worker_id: str) -> list[dict]:
    return rows(conn, "select queue from queue_waiters where worker_id = %s and until > now()", [worker_id])


def test_worker_waits_is_notified_and_claims_what_an_unfinished_producer_commits_later(
        db_url: str, conn: psycopg.Connection, start_worker, until_all) -> None:
    with psycopg.connect(db_url) as producer:
        early = enqueue(producer, type="noop", payload={})  # nobody waits: no notification, now or at commit
        worker = start_worker("waits", env=SLOW_POLL)
        wait_for("the worker waits for jobs", lambda: _waiting(conn, "waits") == [{"queue": "*"}])
        assert rows(conn, "select status from jobs where id = %s", [early.id]) == []  # not committed yet
    # Committed after the worker began to wait: its settling rounds claim it, long before the 30 s poll.
    until_all([early.id], "succeeded", timeout=10)
    later = enqueue(conn, type="noop", payload={})  # the worker waits: notified
    until_all([later.id], "succeeded", timeout=10)
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=15) == 0
    assert rows(conn, "select * from queue_waiters where worker_id = 'waits'") == []
    assert not worker.lines("error")
