"""Deadlines: an attempt with a timeout ends at its deadline, whatever its handler does.

The database enforces the deadline by itself: heartbeat extends no lease past it, and the sweep ends
the attempt `timed_out` when the lease runs out, even while this process is frozen. This part is the
worker's side, so that a slot is not held until then. At a job's deadline (the claim's, as the database
measured it, on this process's monotonic clock: slots.deadline_after) the job is `timing out`:

  - an `async def` handler's task is cancelled (asyncio.CancelledError at its next await);
  - a plain handler cannot be stopped: its executor thread is given up on, counted `leaked` and logged,
    and a new executor thread takes its place (on_leak), so the worker keeps its concurrency;

and the attempt is recorded at once with mark_timed_out, which decides what it becomes (failed and
retried after its backoff, dead, or cancelled for a job asked to cancel), and the slot is freed. A
handler that returns after that has its result refused: its lease token no longer holds the job.

A cancel_job of a running job moves the attempt's deadline to now in the database; the heartbeat that
learns of it brings the deadline here forward to the end of the lease the job holds (what is left of
it is the handler's to stop by itself: ctx.cancelled), and the attempt then ends the same way, cancelled.

A Service on a thread of its own (pgqw-deadlines), asleep on the slots' `deadlines` condition until the
earliest deadline of the jobs held; check() is one round, for the in-process tests.
"""
from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from typing import Callable

import psycopg

from pgqw import db, errors
from pgqw.config import Settings
from pgqw.worker.connection.database import Database
from pgqw.worker.job.recorder import NOT_HELD
from pgqw.worker.job.slots import Running, Slots
from pgqw.worker.log import Log, clock, first_line, iso, ms, short
from pgqw.worker.service import Service, WorkerExiting

TOO_EARLY = "QS409"     # mark_timed_out before the database's deadline (or of an attempt without one)
EARLY_RETRY_S = 0.02    # ... is tried again after this, up to EARLY_FOR_S
EARLY_FOR_S = 2.0
ALREADY = "already recorded: by a sweep, or an earlier try whose reply was lost"


class Deadlines(Service):
    name = "deadlines"

    def __init__(self, settings: Settings, slots: Slots, log: Log, database: Database, *,
                 on_leak: Callable[[], None] = lambda: None, clock: Callable[[], float] = time.monotonic,
                 exiting: threading.Event | None = None) -> None:
        super().__init__(exiting)
        self.settings = settings
        self.slots = slots
        self.log = log
        self.database = database
        self.on_leak = on_leak      # starts an executor thread in place of one given up on
        self.clock = clock

    def due_in(self) -> float | None:
        """Seconds until the earliest deadline of a running job (0 or less: now); None when none has one.
        Call with slots.lock held."""
        dues = [r.deadline for r in self.slots.holding() if r.state == "running" and r.deadline is not None]
        return min(dues) - self.clock() if dues else None

    def check(self) -> list[Running]:
        """Ends every running job whose deadline has come (its handler cancelled or given up on, its
        attempt recorded); returns them."""
        now = self.clock()
        with self.slots.lock:
            due = [r for r in self.slots.holding()
                   if r.state == "running" and r.deadline is not None and r.deadline <= now]
            for run in due:
                run.state = "timing out"         # no result of its handler is awaited any more
                run.leaked = run.future is None and run.in_handler
        for run in due:
            if run.future is not None:
                run.future.cancel()             # the handler's task is cancelled; the executor moves on
            if run.leaked:
                self.leaked(run)
                self.on_leak()
            self.record(run)
        return due

    def leaked(self, run: Running) -> None:
        self.slots.count("leaked")
        self.log("leaked", f"{run.tag()}: its handler still runs past its deadline on its executor thread, "
                           f"which is given up on; a new thread takes its place ({self.slots.counts['leaked']} "
                           "leaked in all); a result it returns will be refused", **run.fields(),
                 leaked=self.slots.counts["leaked"])

    def record(self, run: Running) -> None:
        """mark_timed_out for the attempt (tried again while the database's deadline has not quite come),
        then the slot is freed and the end logged."""
        job, s = run.job, self.settings
        elapsed = self.clock() - run.started
        give_up = self.clock() + EARLY_FOR_S
        while True:
            try:
                after = self.database.call(f"mark_timed_out {short(job.id)}", lambda conn: db.mark_timed_out(
                    conn, job_id=job.id, lease_token=job.lease_token, base_ms=s.retry_base_delay_ms,
                    max_jitter_ms=s.retry_max_jitter_ms, max_delay_ms=s.retry_max_delay_ms))
                break
            except psycopg.Error as exc:
                if exc.sqlstate == TOO_EARLY and self.clock() < give_up and not self.stopped.wait(EARLY_RETRY_S):
                    continue
                self.refused(run, exc)
                return
            except WorkerExiting:
                return
        count, peak = self.slots.free(run)
        # Already recorded: by an earlier try whose reply was lost, or by a sweep while this process was
        # frozen past the lease (the database's answer is the same).
        tail = f"{' (' + ALREADY + ')' if after.already_recorded else ''}  (running {count}/{self.slots.cap}, peak {peak})"
        fields = {**run.fields(), "duration_ms": ms(elapsed)}
        if after.status == "cancelled":
            self.slots.count("cancelled")
            self.log("cancelled", f"{run.tag()} in {elapsed:.2f}s: stopped at the end of its lease{tail}",
                     **fields, outcome="cancelled")
            return
        self.slots.count("timed out")
        head = f"{run.tag()} in {elapsed:.2f}s: {after.last_error}"
        if after.status == "dead":
            self.log("timed out", f"{head} → dead{tail}", **fields, error=after.last_error, outcome="dead")
        else:
            wait = (after.run_at - datetime.now(timezone.utc)).total_seconds()
            self.log("timed out", f"{head}; next run {clock(after.run_at)} (in {max(0.0, wait):.1f}s){tail}",
                     **fields, error=after.last_error, outcome="retry", next_run_at=iso(after.run_at))

    def refused(self, run: Running, exc: psycopg.Error) -> None:
        """The attempt could not be ended here: it had ended already (swept, finished: QL409, QN404), or
        the database refused (then its lease runs out and a sweep ends it). The slot is freed either way."""
        count, peak = self.slots.free(run)
        tail = f"  (running {count}/{self.slots.cap}, peak {peak})"
        message = exc.diag.message_primary or first_line(exc)
        if errors.is_error(exc, *NOT_HELD):
            self.slots.count("ignored")
            self.log("ignored late result", f"{run.tag()}: at its deadline: {message}{tail}", **run.fields(),
                     outcome="ignored", sqlstate=exc.sqlstate, error=message)
        else:
            self.log("error", f"{run.tag()}: not recorded timed out: {exc.sqlstate} {message}; its lease runs "
                              f"out and a sweep ends it{tail}", **run.fields(), outcome="not recorded",
                     sqlstate=exc.sqlstate, error=message)

    # -------------------------------------------------------------------------------- the service

    def round(self) -> float:
        """Sleeps until the earliest deadline (a job taken with one, or brought forward, wakes it), then
        checks."""
        with self.slots.deadlines:
            while not self.stopped.is_set():
                wait = self.due_in()
                if wait is not None and wait <= 0:
                    break
                self.slots.deadlines.wait(wait)
        if self.stopped.is_set():
            return 0.0
        self.check()
        return 0.0

    def report(self, exc: Exception, delay: float) -> float:
        self.log("error", f"deadlines: {exc!r}; again in {delay:.1f}s", error=repr(exc))
        return delay

    def interrupt(self) -> None:
        self.slots.poke()
