"""The main loop: sweeps when one is due, claims while slots are free, prunes one batch of old finished
jobs when due, then waits for a wake-up (a notification of a job ready now, a freed slot, the earliest
time a job this worker heard of comes due, the poll interval, the next sweep, or a stop). A database
problem never ends it: it is logged and the round is tried again after a capped backoff.

When to wake (docs/worker.md): the listener hears pgqw_jobs_at ('<ms> <queue>': a job comes due in ms)
and adds the time to the Wakeup; the wait ends at the earliest one. What the worker may not have heard
(before it listened, while its LISTEN connection was down, the later jobs of one enqueue_jobs call, more
times than it keeps) it asks with next_run_at, once, when a round comes at or after that point (horizon)."""
from __future__ import annotations

import heapq
import math
import threading
import time
from typing import Callable, Sequence

import psycopg

from pgqw.config import Settings
from pgqw.worker.claimer import Claimer
from pgqw.worker.database import Backoff, Database, WorkerExiting, is_transient
from pgqw.worker.executor import describe
from pgqw.worker.log import Log
from pgqw.worker.pruner import Pruner
from pgqw.worker.sweeper import Sweeper

ASK_LIMIT = 100  # due times asked of next_run_at at once; a full answer means there may be more after it
MISSING = ("42883", "42501")  # next_run_at does not exist (not migrated yet), or may not be executed


class Wakeup:
    """What the main loop waits on: a claim-now signal with threading.Event's interface (set() by a
    notification of a job ready now, a freed slot, a stop) and the times jobs come due later, on the
    monotonic clock (at(), from the listener and next_run_at). wait() ends at the first of the signal, the
    earliest due time, the timeout; an earlier time heard meanwhile moves its end, without a claim before it.

    Doubts: from a time on, this worker may not know every due time (not asked yet at start, its LISTEN
    connection came back, several due times announced as one, more times than it keeps). A round at or after
    the earliest (horizon) asks next_run_at (needs_asking, learn); the answer settles the doubts it covers."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, max_times: int = 10_000) -> None:
        self.clock = clock
        self.max_times = max_times      # memory bound; past it the latest half is forgotten (and asked later)
        self._doubts: list[tuple[float, float]] = []  # (from when, heard when)
        self._cond = threading.Condition()
        self._flag = False
        self._times: list[float] = []   # a heap

    def set(self) -> None:
        with self._cond:
            self._flag = True
            self._cond.notify_all()

    def clear(self) -> None:
        with self._cond:
            self._flag = False

    def is_set(self) -> bool:
        return self._flag

    def wait(self, timeout: float | None = None) -> bool:
        """Until set(), the earliest due time or the timeout. True unless it was the timeout."""
        with self._cond:
            end = None if timeout is None else self.clock() + timeout
            while not self._flag:
                now = self.clock()
                if self._times and self._times[0] <= now:
                    return True
                until = min(end if end is not None else math.inf, self._times[0] if self._times else math.inf)
                if until <= now:
                    return False
                self._cond.wait(None if until == math.inf else until - now)
            return True

    def at(self, when: float, *, more: bool = False) -> None:
        """A job comes due at when (monotonic); more: others after it that this worker was not told of."""
        with self._cond:
            if more:
                self._unsure_from(when)
            if len(self._times) >= self.max_times:
                keep = sorted(self._times)[: self.max_times // 2]
                self._unsure_from(sorted(self._times)[len(keep)])
                self._times = keep      # a sorted list is a heap
            earlier = not self._times or when < self._times[0]
            heapq.heappush(self._times, when)
            if earlier:
                self._cond.notify_all()  # the waiting main loop recomputes its end

    def earliest(self) -> float | None:
        with self._cond:
            return self._times[0] if self._times else None

    def take_due(self, now: float) -> int:
        """Forgets the times that have come (the round that follows claims their jobs). Returns how many."""
        with self._cond:
            n = 0
            while self._times and self._times[0] <= now:
                heapq.heappop(self._times)
                n += 1
            return n

    def unsure(self, now: float) -> None:
        """Due times from now on may have been missed (at start, after the LISTEN connection came back)."""
        with self._cond:
            self._unsure_from(now)

    @property
    def horizon(self) -> float | None:
        """From when this worker may not know every due time; None: it knows them all."""
        with self._cond:
            return min(d for d, _ in self._doubts) if self._doubts else None

    def needs_asking(self, now: float) -> bool:
        horizon = self.horizon
        return horizon is not None and now >= horizon

    def learn(self, asked_at: float, now: float, due_in_ms: Sequence[int], *, complete: bool) -> None:
        """next_run_at's answer, asked at asked_at and received at now: these times; complete: no others
        after them (the answer was shorter than its limit). It settles every doubt heard before it was
        asked; one heard meanwhile stays (the answer may not cover it)."""
        with self._cond:
            self._doubts = [(d, heard) for d, heard in self._doubts if heard > asked_at]
            if not complete and due_in_ms:
                self._unsure_from(now + due_in_ms[-1] / 1000.0)
        for ms in due_in_ms:
            self.at(now + ms / 1000.0)

    def _unsure_from(self, when: float) -> None:
        self._doubts.append((when, self.clock()))
        if len(self._doubts) > 100:  # a bound: one doubt from the earliest, as if just heard
            self._doubts = [(min(d for d, _ in self._doubts), self.clock())]


class MainLoop:
    def __init__(
        self, settings: Settings, claimer: Claimer, sweeper: Sweeper, database: Database, log: Log, *,
        wake: threading.Event | Wakeup, stopping: threading.Event, clock: Callable[[], float] = time.monotonic,
        alive: Callable[[], None] = lambda: None, pruner: Pruner | None = None,
        listening: Callable[[], bool] = lambda: False,
    ) -> None:
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
        self.backoff = Backoff()
        # The due times this worker knows of (a Wakeup), or None: a plain Event, woken by the poll alone.
        self.due = wake if isinstance(wake, Wakeup) else None
        self.ask = True                 # False once next_run_at turned out missing or not granted
        if self.due is not None and settings.listen:
            self.due.unsure(clock())    # what was enqueued before the LISTEN is asked for in the first round

    def step(self, woken: bool = True) -> tuple[float, bool]:
        """One round. woken: the wait before it ended by a wake-up (a notification, a freed slot, a due
        time, a stop), not by its timeout. Returns how long to wait, and whether it failed (then only a
        stop cuts the wait short; otherwise any wake-up does).

        A round whose wait timed out without a poll (the worker found nothing, and listens) came for the
        sweep alone: it sweeps and prunes, and claims nothing."""
        op = "sweep"
        quiet = not woken and not self.polling and not (self.due is not None and self.due.needs_asking(self.clock()))
        try:
            if self.clock() >= self.next_sweep:
                self.sweeper.sweep()
                self.alive()
                self.next_sweep = self.clock() + self.sweep_s
            op = "claim"
            if not quiet:
                # Clear before counting free slots: a slot freed from here on sets the event again. A
                # quiet round claims nothing, so it clears nothing: a wake-up heard meanwhile (the sweep's
                # own notification) ends the next wait at once.
                self.wake.clear()
                if self.due is not None:
                    self.due.take_due(self.clock())  # this round's claim takes the jobs that came due
            if not self.stopping.is_set():
                if not quiet:
                    self.claimer.claim()
                # After the claim (a job due now is claimed, not asked about): one question when this
                # worker may have missed a due time, never on a plain idle round.
                if self.ask and self.due is not None and self.due.needs_asking(self.clock()):
                    op = "next_run_at"
                    self.ask_next_run_at()
                # After the claim: a prune that fails never holds up the round's claim.
                if self.pruner is not None:
                    op = "prune"
                    self.pruner.prune()
            self.backoff.reset()
        except WorkerExiting:
            raise
        except Exception as exc:
            delay = self.backoff.next()
            if is_transient(exc):
                self.database.check_pool()
                self.database.db_error(op, exc, delay)
            else:
                self.log("error", f"{op}: {describe(exc)}; retrying in {delay:.1f}s", op=op, error=describe(exc))
            self.polling = True  # the round after a failure claims, whatever ends its wait
            return delay, True
        return self.next_wait(), False

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

    def next_wait(self) -> float:
        """How long the round's wait may last: the poll interval, the next sweep or the earliest known due
        time, whichever comes first (a wake-up by a notification or a freed slot may end it sooner). No
        poll while the worker listens and its last claim found nothing; then the time from which it may
        have missed a due time (horizon) ends the wait too, so the round asks next_run_at."""
        now = self.clock()
        wait = self.next_sweep - now
        self.polling = not (getattr(self.claimer, "found_nothing", False) and self.listening())
        if self.polling:
            wait = min(wait, self.poll_s)
        earliest = self.due.earliest() if self.due is not None else None
        if earliest is not None:
            wait = min(wait, earliest - now)
        horizon = self.due.horizon if self.due is not None else None
        if horizon is not None and self.ask and not self.polling:
            wait = min(wait, horizon - now)  # the time from which it may have missed a due time: ask then
        return max(0.0, wait)

    def run(self) -> None:
        woken = True
        while not self.stopping.is_set():
            try:
                wait, failed = self.step(woken)
            except WorkerExiting:
                return
            woken = (self.stopping if failed else self.wake).wait(wait)
