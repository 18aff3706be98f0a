"""worker/connection/heartbeat.py after a failed heartbeat: the next try comes within a tenth of the shortest lease
held, and before the first lease runs out, however long the backoff has grown."""
from __future__ import annotations

import threading
from typing import Callable, TypeVar

import psycopg

from pgqw.worker.connection.heartbeat import RETRY_MIN_S, Heartbeat
from pgqw.worker.job.slots import Slots
from tests.helpers import one
from tests.worker.parts import Direct, claimed, log, settings

T = TypeVar("T")


def test_heartbeat_retry_waits_at_most_a_tenth_of_the_shortest_lease(conn: psycopg.Connection) -> None:
    now = [10.0]
    slots = Slots(5, clock=lambda: now[0])
    worker_log, _ = log()
    beat = Heartbeat(settings(), slots, worker_log, Direct(conn).once, clock=lambda: now[0])
    assert beat.retry_in(5.0) == 5.0  # nothing held: the backoff alone
    slots.take(claimed(conn, lease_ms=60_000))
    assert beat.retry_in(5.0) == 5.0 and beat.retry_in(0.4) == 0.4
    slots.take(claimed(conn, lease_ms=3000))
    assert beat.retry_in(5.0) == 0.3  # a tenth of the 3 s lease, not the backoff's 5 s
    assert beat.retry_in(0.1) == 0.1  # a shorter backoff stands


def test_heartbeat_retry_comes_before_the_first_lease_runs_out(conn: psycopg.Connection) -> None:
    now = [10.0]
    slots = Slots(5, clock=lambda: now[0])
    worker_log, _ = log()
    beat = Heartbeat(settings(), slots, worker_log, Direct(conn).once, clock=lambda: now[0])
    slots.take(claimed(conn, lease_ms=3000))     # claimed at 10: its lease runs to 13
    now[0] = 12.6                                # its heartbeats failed since 11: 0.4 s left
    assert round(beat.retry_in(5.0), 3) == 0.2   # half of what is left
    now[0] = 13.5                                # past it (a sweep may not have taken it yet): keep trying
    assert beat.retry_in(5.0) == RETRY_MIN_S
    beat.beat()                                  # renewed from 13.5: 3 s again
    assert beat.retry_in(5.0) == 0.3


def test_heartbeat_loop_retries_failing_tries_within_the_lease_and_renews_it(conn: psycopg.Connection) -> None:
    """Eight tries in a row fail at once (a pooler that answers while the server behind it restarts):
    the backoff would wait 0.1 + 0.2 + … + 5 s; every wait is a tenth of the 300 ms lease at most, so
    the ninth try renews the lease well before the backoff's third try would have come."""
    slots = Slots(5)
    worker_log, out = log()
    fails = [8]
    renewed = threading.Event()
    delays: list[float] = []

    def run(fn: Callable[[psycopg.Connection], T]) -> T:
        if fails[0] > 0:
            fails[0] -= 1
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        answer = fn(conn)
        renewed.set()
        return answer

    beat = Heartbeat(settings(), slots, worker_log, run, on_db_error=lambda op, exc, delay: delays.append(delay))
    job = claimed(conn, lease_ms=300)
    running, _, _ = slots.take(job)
    running.next_beat = slots.clock()  # due now
    exiting = threading.Event()
    loop = threading.Thread(target=beat.loop, args=(exiting,), daemon=True)
    loop.start()
    try:
        assert renewed.wait(timeout=1.0), f"no heartbeat got through: waits {delays}"
    finally:
        exiting.set()
        slots.poke()
        loop.join(timeout=5)
    assert len(delays) == 8 and max(delays) <= 0.03, delays
    assert one(conn, "select lease_expires_at > now() as held from jobs where id = %s", [job.id])["held"]
    assert out.lines("lost") == []
