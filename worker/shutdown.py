"""Stopping: signals, the grace period, and the hand-back of jobs still running after it.

First SIGTERM/SIGINT: no more claims; running jobs have SHUTDOWN_GRACE_MS to finish (heartbeats go
on); those still running then are handed back with release_job (pending again at once for any
worker, the try not spent); results already being recorded get MARK_DRAIN_S longer. A second signal
exits at once: the jobs still held are recovered by a sweep once their lease expires.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any, Callable

import psycopg

from pgqw import db, errors
from pgqw.config import Settings
from pgqw.worker.connection.database import Database
from pgqw.worker.job.recorder import EARLIER_TRY, NOT_HELD
from pgqw.worker.job.slots import Running, Slots
from pgqw.worker.log import Log, first_line, short
from pgqw.worker.service import WorkerExiting

RELEASE_DEADLINE_S = 5.0        # how long shutdown keeps trying to hand a job back
MARK_DRAIN_S = 5.0              # how long shutdown waits for results being recorded


class Signals:
    """SIGTERM and SIGINT: the first calls stop(signal name) (from a thread of its own), the second
    exits at once with 128 + the signal's number."""

    def __init__(self, log: Log, stop: Callable[[str], None], *, stopping: Callable[[], bool],
                 exit: Callable[[int], Any] = os._exit, write: Callable[[str], Any] | None = None) -> None:
        self.log = log
        self.stop = stop
        self.stopping = stopping
        self.exit = exit
        self.write = write or (lambda line: os.write(1, line.encode()))
        self.signalled = False

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.on_signal)
            signal.signal(signal.SIGINT, self.on_signal)

    def on_signal(self, signum: int, frame: Any = None) -> None:
        name = signal.Signals(signum).name
        if self.signalled or self.stopping():
            # Second signal: leave at once. Minimal work here: no locks the interrupted code may hold.
            try:
                self.write(self.log.unwritten()
                           + self.log.line("exit", f"second {name}: exiting now; running jobs are left to the sweep")
                           + "\n")
            finally:
                self.exit(128 + signum)
            return
        self.signalled = True  # a plain flag: the next signal sees it even before stop() ran
        # Event.set() takes a lock the interrupted main thread may hold: do it from a thread.
        threading.Thread(target=self.stop, args=(name,), name="pgqw-stop", daemon=True).start()


class Shutdown:
    def __init__(self, settings: Settings, slots: Slots, log: Log, database: Database, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.worker_id = settings.worker_id
        self.slots = slots
        self.log = log
        self.database = database
        self.clock = clock
        self.grace_s = settings.shutdown_grace_ms / 1000.0

    def run(self, reason: str) -> None:
        """Waits out the grace, hands back what still runs, waits for results being recorded."""
        self.log("stopping", f"({reason}): no more claims; waiting up to {self.grace_s:.1f}s for "
                             f"{len(self.slots.held())} running job(s)")
        for run in self.leftovers(self.clock() + self.grace_s):
            self.hand_back(run)
        # Results already being recorded get a little longer (a connection may be reconnecting), and so do
        # the attempts being recorded timed out (job/deadlines.py).
        self.slots.wait(lambda: not any(r.state in ("marking", "timing out") for r in self.slots.holding()),
                        self.clock() + MARK_DRAIN_S)

    def leftovers(self, deadline: float) -> list[Running]:
        """Waits until no job is held or the deadline passes; the jobs still running then are
        `releasing` (their results, should they come, are not recorded) and returned."""
        self.slots.wait(lambda: not self.slots.holding(), deadline)
        left = []
        for run in self.slots.held("running"):
            if self.slots.move(run, "releasing"):
                left.append(run)
        return left

    def hand_back(self, run: Running) -> None:
        job = run.job
        try:
            after = self.database.call(f"release_job {short(job.id)}", lambda conn: db.release_job(
                conn, job_id=job.id, lease_token=job.lease_token,
                reason=f"worker {self.worker_id} shutting down"), deadline=self.clock() + RELEASE_DEADLINE_S)
        except psycopg.Error as exc:
            self.slots.free(run)
            if errors.is_error(exc, *NOT_HELD):
                self.log("not handed back", f"{run.tag()}: {exc.diag.message_primary or first_line(exc)}",
                         **run.fields(), sqlstate=exc.sqlstate, error=exc.diag.message_primary or first_line(exc))
            else:
                self.log("not handed back", f"{run.tag()}: {first_line(exc)}; the sweep will recover it "
                                            "when its lease expires", **run.fields(), error=first_line(exc))
            return
        except WorkerExiting:
            return
        self.slots.count("handed back")
        count, _ = self.slots.free(run)
        self.log("handed back", f"{run.tag()} (still running after the {self.grace_s:.1f}s grace; "
                                f"pending again for any worker{'; ' + EARLIER_TRY if after.already_recorded else ''})"
                                f"  (running {count}/{self.slots.cap})", **run.fields(), outcome="handed back")

    def summary(self) -> None:
        c = self.slots.counts
        # Timeouts only when there were some (job/deadlines.py): threads given up on are still running.
        timeouts = (f"{c['timed out']} timed out, {c['leaked']} leaked, " if c["timed out"] or c["leaked"]
                    else "")
        self.log("stopped", f"{c['succeeded']} succeeded, {c['failed']} failed, {c['dead']} dead, "
                            f"{c['handed back']} handed back, {c['swept']} swept, {timeouts}"
                            f"peak {self.slots.peak}/{self.slots.cap}",
                 **{k.replace(" ", "_"): c[k] for k in ("succeeded", "failed", "dead", "handed back", "swept",
                                                        "timed out", "leaked")})
