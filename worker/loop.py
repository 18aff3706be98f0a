"""The main loop: sweeps when one is due, claims while slots are free, prunes one batch of old finished
jobs when due, then waits for a wake-up (a notification, a freed slot, the poll interval, the next
sweep, or a stop). A database problem never
ends it: it is logged and the round is tried again after a capped backoff."""
from __future__ import annotations

import threading
import time
from typing import Callable

from pgqw.config import Settings
from pgqw.worker.claimer import Claimer
from pgqw.worker.database import Backoff, Database, WorkerExiting, is_transient
from pgqw.worker.executor import describe
from pgqw.worker.log import Log
from pgqw.worker.pruner import Pruner
from pgqw.worker.sweeper import Sweeper


class MainLoop:
    def __init__(
        self, settings: Settings, claimer: Claimer, sweeper: Sweeper, database: Database, log: Log, *,
        wake: threading.Event, stopping: threading.Event, clock: Callable[[], float] = time.monotonic,
        alive: Callable[[], None] = lambda: None, pruner: Pruner | None = None,
    ) -> None:
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

    def step(self) -> tuple[float, bool]:
        """One round. Returns how long to wait, and whether it failed (then only a stop cuts the
        wait short; otherwise any wake-up does)."""
        op = "sweep"
        try:
            if self.clock() >= self.next_sweep:
                self.sweeper.sweep()
                self.alive()
                self.next_sweep = self.clock() + self.sweep_s
            op = "claim"
            # Clear before counting free slots: a slot freed from here on sets the event again.
            self.wake.clear()
            if not self.stopping.is_set():
                self.claimer.claim()
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
                self.log("error", f"{op}: {describe(exc)}; retrying in {delay:.1f}s")
            return delay, True
        return max(0.0, min(self.poll_s, self.next_sweep - self.clock())), False

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                wait, failed = self.step()
            except WorkerExiting:
                return
            (self.stopping if failed else self.wake).wait(wait)
