"""The LISTEN wake-up (WORKER_LISTEN): one dedicated autocommit connection that LISTENs on pgqw_jobs
(to WORKER_LISTEN_URL when set: behind PgBouncer in transaction mode LISTEN needs a direct connection
to the server, while every other call goes through the pooler) and wakes the main loop when a job of one of this worker's queues may be ready. enqueue_job,
release_job, retry_dead and sweep_stuck notify (payload: the queue, or '*' for any queue).

It also LISTENs on pgqw_jobs_at, where enqueue_job(s) and mark_failed announce a job that comes due later:
'<ms> <queue>', ms on the server's clock when sent; '<ms>+ <queue>' when more jobs of that queue come due
after it (enqueue_jobs). The time is handed to the main loop's Wakeup (wakeup.py), which ends its wait then;
no claim happens before. A payload it cannot read wakes the main loop at once, as a plain one would.

A lost connection is reconnected with the worker's retry rule (service.py): the same capped backoff as
every other call, each wait up to a fifth shorter at random, so the workers that lost one server do not
all reconnect at the same instant. After a reconnect it wakes the main loop once, in case a notification
was missed meanwhile.
"""
from __future__ import annotations

import threading
from typing import Callable, Sequence

import psycopg

from pgqw import db
from pgqw.worker.log import Log
from pgqw.worker.service import Backoff, Service
from pgqw.worker.wakeup import Wakeup

LISTEN_TIMEOUT_S = 1.0  # the listener checks for shutdown this often
MAX_DUE_MS = 366 * 86_400_000  # run_at is at most 366 days ahead (enqueue_job's bound)
RECONNECT_JITTER = 0.2  # each reconnect's wait is 80 % to 100 % of the backoff's: a fleet's spread out


def parse_due(payload: str) -> tuple[int, bool, str] | None:
    """A pgqw_jobs_at payload: (ms ahead, more after it, queue), or None when it is not one."""
    head, sep, queue = payload.partition(" ")
    more = head.endswith("+")
    digits = head[:-1] if more else head
    if not sep or not queue or not digits.isascii() or not digits.isdigit() or len(digits) > 12:
        return None
    ms = int(digits)
    return (ms, more, queue) if ms <= MAX_DUE_MS else None


class Listener(Service):
    name = "listener"

    def __init__(
        self, connect: Callable[[], psycopg.Connection], queues: Sequence[str] | None, wake: Wakeup | threading.Event,
        log: Log, exiting: threading.Event, *, conn: psycopg.Connection | None = None,
        on_db_error: Callable[[str, BaseException, float], None] = lambda op, exc, delay: None,
    ) -> None:
        super().__init__(exiting, backoff=Backoff(jitter=RECONNECT_JITTER))
        self.connect = connect          # a new connection of its own, outside the pool
        self.queues = set(queues or ())
        self.wake = wake
        self.log = log
        self.conn = conn                # already LISTENing (the worker's first connection), or None
        self.on_db_error = on_db_error
        self.due = wake if isinstance(wake, Wakeup) else None  # None: times for later are not kept

    def connected(self) -> bool:
        """Notifications reach this worker now: its LISTEN connection is open (a lost one is reopened
        by poll(), which then wakes the main loop once)."""
        conn = self.conn
        return conn is not None and not conn.closed

    def wanted(self, payload: str) -> bool:
        """Does a notification with this payload concern this worker?"""
        return not self.queues or payload == "*" or payload in self.queues

    def poll(self, timeout: float = LISTEN_TIMEOUT_S, stop_after: int | None = None) -> list[str]:
        """Connects (and LISTENs) when needed, then takes the notifications that arrive within
        timeout (or the first stop_after of them); wakes the main loop for a wanted one. Returns their
        payloads. Errors are raised, with the connection closed."""
        try:
            if self.conn is None or self.conn.closed:
                self.conn = self.connect()
                db.listen(self.conn)
                self.log("listen", "reconnected; claiming in case a notification was missed")
                if self.due is not None:
                    self.due.unsure(self.due.clock())  # and asking next_run_at, for the times missed
                self.wake.set()
            seen = []
            for note in self.conn.notifies(timeout=timeout, stop_after=stop_after):
                seen.append(note.payload)
                if note.channel == db.NOTIFY_AT_CHANNEL:
                    self.heard_due(note.payload)
                elif self.wanted(note.payload):
                    self.wake.set()
            return seen
        except Exception:
            self.close()
            raise

    def heard_due(self, payload: str) -> None:
        """A pgqw_jobs_at notification: the time goes to the main loop's Wakeup when the queue is wanted."""
        parsed = parse_due(payload)
        if parsed is None:
            self.wake.set()  # not a format this worker knows: claim, as for a plain notification
            return
        ms, more, queue = parsed
        if self.due is not None and self.wanted(queue):
            self.due.at(self.due.clock() + ms / 1000.0, more=more)

    # -------------------------------------------------------------------------------- the service

    def round(self) -> float:
        self.poll()
        return 0.0

    def report(self, exc: Exception, delay: float) -> float:
        self.on_db_error("listen", exc, delay)
        return delay

    def finish(self) -> None:
        self.close()

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
            self.conn = None
