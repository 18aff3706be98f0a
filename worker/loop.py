"""The main loop: sweeps when one is due, claims while slots are free, prunes one batch of old finished
jobs when due, then waits for a wake-up (a notification of a job ready now, a freed slot, the earliest
time a job this worker heard of comes due, the poll interval, the next sweep, or a stop). A database
problem never ends it: it is logged and the round is tried again after a capped backoff (the worker's
one retry rule, service.py: the main loop is a Service that ends at the first signal).

When to wake (docs/worker.md) is the Wakeup's (wakeup.py): the times jobs come due, and the doubts this
round settles by asking next_run_at.

Producers notify only the workers that wait (wait_for_jobs): a listening worker whose claim got fewer jobs
than it had room for says so before it waits, renews that while it keeps waiting, and claims once more when every producer
that may not have seen it has ended (waits_settled), asking next_run_at then for the due times they did
not announce. Until then its waits are short (SETTLE_FIRST_S, doubling up to the poll interval). A worker
that cannot say it waits (a database migrated before wait_for_jobs, a role without its grant) polls, and
tries again at each renewal."""
from __future__ import annotations

import threading
import time
from typing import Callable

import psycopg

from pgqw.config import Settings
from pgqw.worker.connection.database import Database, is_transient
from pgqw.worker.job.claimer import Claimer
from pgqw.worker.job.executor import describe
from pgqw.worker.log import Log
from pgqw.worker.maintenance.pruner import Pruner
from pgqw.worker.maintenance.sweeper import Sweeper
from pgqw.worker.service import Service
from pgqw.worker.wakeup import Wakeup

ASK_LIMIT = 100  # due times asked of next_run_at at once; a full answer means there may be more after it
MISSING = ("42883", "42501")  # next_run_at does not exist (not migrated yet), or may not be executed
WAIT_FOR_S = 60.0  # how long a wait_for_jobs holds; renewed at half that while the worker keeps waiting
SETTLE_FIRST_S = 0.005  # the first wait before waits_settled is asked again; doubled each time


class MainLoop(Service):
    """The main thread's loop, a Service that ends at the first signal (stopping): round() is one round,
    run() the rounds and their waits (pause)."""

    name = "main"

    def __init__(
        self, settings: Settings, claimer: Claimer, sweeper: Sweeper, database: Database, log: Log, *,
        wake: threading.Event | Wakeup, stopping: threading.Event, clock: Callable[[], float] = time.monotonic,
        alive: Callable[[], None] = lambda: None, pruner: Pruner | None = None,
        listening: Callable[[], bool] = lambda: False,
    ) -> None:
        super().__init__(stopping)
        self.woken = True               # the last wait ended by a wake-up, not its timeout
        self.op = "sweep"               # what the round is doing (a failure's log line names it)
        # Whether notifications reach this worker now (its LISTEN connection is up). While they do, a
        # worker whose last claim found nothing does not poll: a notification, a due time it heard of, or
        # the sweep's safety net wakes it (docs/worker.md, "When a worker claims").
        self.listening = listening
        self.polling = True             # the current wait ends at the poll interval at the latest
        self.pruner = pruner            # None: PRUNE=0, old jobs are kept
        self.alive = alive              # with every sweep: this worker is still here (presence.py)
        self.claimer = claimer
        self.sweeper = sweeper
        self.database = database
        self.log = log
        self.wake = wake
        self.stopping = stopping
        self.clock = clock
        self.poll_s = settings.poll_interval_ms / 1000.0
        self.sweep_s = settings.sweep_interval_ms / 1000.0
        self.next_sweep = clock() + self.sweep_s  # the first sweep runs at start, before the loop
        # The due times this worker knows of (a Wakeup), or None: a plain Event, woken by the poll alone.
        self.due = wake if isinstance(wake, Wakeup) else None
        self.ask = True                 # False once next_run_at turned out missing or not granted
        if self.due is not None and settings.listen:
            self.due.unsure(clock())    # what was enqueued before the LISTEN is asked for in the first round
        self.renew_at: float | None = None  # when this worker's wait_for_jobs is renewed; None: not yet called
        self.waiting_until = 0.0        # until when its wait_for_jobs holds (its clock); before it: it polls
        self.settling: str | None = None    # the transaction id waits_settled is asked about, until settled
        self.warned_wait = False        # the warning that wait_for_jobs cannot be called, said once
        self.settle_s = SETTLE_FIRST_S

    def step(self, woken: bool = True) -> tuple[float, bool]:
        """One round (what run() makes of each). woken: the wait before it ended by a wake-up (a
        notification, a freed slot, a due time, a stop), not by its timeout. Returns how long to wait, and
        whether it failed (then only a stop cuts the wait short; otherwise any wake-up does)."""
        self.woken = woken
        return self.attempt()

    def round(self) -> float:
        """Sweeps when due, claims, asks next_run_at when a due time may have been missed, prunes.

        A round whose wait timed out without a poll (the worker found nothing, and listens) came for the
        sweep alone: it sweeps and prunes, and claims nothing."""
        self.op = "sweep"
        quiet = (not self.woken and not self.polling and self.settling is None
                 and not (self.due is not None and self.due.needs_asking(self.clock())))
        if self.clock() >= self.next_sweep:
            self.sweeper.sweep()
            self.alive()
            self.next_sweep = self.clock() + self.sweep_s
        self.op = "claim"
        if not quiet:
            # Clear before counting free slots: a slot freed from here on sets the event again. A
            # quiet round claims nothing, so it clears nothing: a wake-up heard meanwhile (the sweep's
            # own notification) ends the next wait at once.
            self.wake.clear()
            if self.due is not None:
                self.due.take_due(self.clock())  # this round's claim takes the jobs that came due
        if not self.stopping.is_set():
            # Asked before the claim, so that the claim sees what the producers it waited for committed.
            self.op = "waits_settled"
            settled = self.settling is not None and self.settled(self.settling)
            self.op = "claim"
            if not quiet:
                self.claimer.claim()
            if settled:
                self.settling = None
                self.settle_s = SETTLE_FIRST_S
                if self.due is not None:
                    self.due.unsure(self.clock())  # their jobs for later were not announced: asked below
            # After the claim (a job due now is claimed, not asked about): one question when this
            # worker may have missed a due time, never on a plain idle round.
            if self.ask and self.due is not None and self.due.needs_asking(self.clock()):
                self.op = "next_run_at"
                self.ask_next_run_at()
            self.wait_for_jobs()
            # After the claim: a prune that fails never holds up the round's claim.
            if self.pruner is not None:
                self.op = "prune"
                self.pruner.prune()
        return self.next_wait()

    def report(self, exc: Exception, delay: float) -> float:
        op = self.op
        if is_transient(exc):
            self.database.check_pool()
            self.database.db_error(op, exc, delay)
        else:
            self.log("error", f"{op}: {describe(exc)}; retrying in {delay:.1f}s", op=op, error=describe(exc))
        self.polling = True  # the round after a failure claims, whatever ends its wait
        return delay

    def pause(self, seconds: float, failed: bool) -> None:
        """After a failed round only a stop cuts the wait short; otherwise any wake-up does."""
        self.woken = (self.stopping if failed else self.wake).wait(seconds)

    def ask_next_run_at(self) -> None:
        assert self.due is not None
        asked_at = self.clock()
        try:
            due_in_ms = self.claimer.next_due(ASK_LIMIT)
        except psycopg.Error as exc:
            if exc.sqlstate not in MISSING:
                raise
            # A database migrated before next_run_at (or its grant): jobs for later are found by the
            # notifications heard and the poll, as before; asking again would fail every round.
            self.ask = False
            self.log("warning", "next_run_at cannot be called, run `pgqw migrate` (jobs for later that this worker "
                                f"did not hear of are found by the poll meanwhile): {describe(exc).splitlines()[0]}")
            return
        self.due.learn(asked_at, self.clock(), due_in_ms, complete=len(due_in_ms) < ASK_LIMIT)

    def wait_for_jobs(self) -> None:
        """A listening worker whose claim got fewer jobs than it had room for says it waits (and renews that
        in time), so that producers notify it; then it settles (the rounds until waits_settled claim)."""
        short = getattr(self.claimer, "short", getattr(self.claimer, "found_nothing", False))
        if not (short and self.listening()):
            return
        now = self.clock()
        if self.renew_at is not None and now < self.renew_at:
            return
        self.op = "wait_for_jobs"
        self.renew_at = now + WAIT_FOR_S / 2  # also the next try after a refusal
        try:
            self.settling = self.claimer.wait(int(WAIT_FOR_S * 1000))
        except psycopg.Error as exc:
            if exc.sqlstate not in MISSING:
                raise
            self.cannot_wait(exc)
            return
        self.waiting_until = now + WAIT_FOR_S
        self.settle_s = SETTLE_FIRST_S

    def settled(self, xid: str) -> bool:
        try:
            return bool(self.claimer.settled(xid))
        except psycopg.Error as exc:
            if exc.sqlstate not in MISSING:
                raise
            self.settling = None
            self.cannot_wait(exc)
            return False

    def cannot_wait(self, exc: psycopg.Error) -> None:
        """wait_for_jobs or waits_settled does not exist or is not granted: producers may not notify this
        worker, so it polls until a later try succeeds."""
        self.waiting_until = 0.0
        if not self.warned_wait:
            self.warned_wait = True
            self.log("warning", "wait_for_jobs cannot be called, run `pgqw migrate` (this worker polls every "
                                f"POLL_INTERVAL_MS meanwhile): {describe(exc).splitlines()[0]}")

    def next_wait(self) -> float:
        """How long the round's wait may last: the poll interval, the next sweep or the earliest known due
        time, whichever comes first (a wake-up by a notification or a freed slot may end it sooner). No
        poll while the worker listens and its last claim found nothing; then the time from which it may
        have missed a due time (horizon) ends the wait too, so the round asks next_run_at."""
        now = self.clock()
        wait = self.next_sweep - now
        self.polling = not (getattr(self.claimer, "found_nothing", False) and self.listening()
                            and now < self.waiting_until)
        if self.polling:
            wait = min(wait, self.poll_s)
        earliest = self.due.earliest() if self.due is not None else None
        if earliest is not None:
            wait = min(wait, earliest - now)
        horizon = self.due.horizon if self.due is not None else None
        if horizon is not None and self.ask and not self.polling:
            wait = min(wait, horizon - now)  # the time from which it may have missed a due time: ask then
        if not self.polling and self.renew_at is not None and self.renew_at > now:
            wait = min(wait, self.renew_at - now)  # renewed before it runs out, while this worker waits
        if self.settling is not None:
            wait = min(wait, self.settle_s)
            self.settle_s = min(self.settle_s * 2, self.poll_s)
        return max(0.0, wait)
