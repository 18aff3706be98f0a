"""The heartbeat: extends the lease of every job still held before it runs out.

A job's lease is the one its claim granted (lease_expires_at - started_at, measured by the database),
so without HEARTBEAT_INTERVAL_MS each job is heartbeated every third of its own lease, and each
heartbeat renews that same lease, presenting the lease token its claim returned. A job missing from
heartbeat's answer is no longer held by that token (its lease expired and a sweep handed it on): it
is logged as `lost`, and its result will be refused. A job the answer says was cancelled (cancel_job)
is flagged (`ctx.cancelled`, `ctx.stopping`) and logged once: its attempt will be recorded cancelled.

After a failed heartbeat (a lost connection, a server restarting) the next try comes after the
backoff's delay, but never later than a tenth of the shortest lease held, nor than half the time left
before the first lease runs out: a short outage costs no lease, however long the backoff has grown.
"""
from __future__ import annotations

import functools
import math
import threading
import time
from collections import defaultdict
from typing import Callable

from psycopg_pool import PoolClosed

from pgqw import db
from pgqw.config import Settings
from pgqw.worker.database import Backoff, Run, WorkerExiting, is_transient
from pgqw.worker.log import Log
from pgqw.worker.slots import Running, Slots

RETRY_SHARE = 10        # after a failed heartbeat, try again within a tenth of the shortest lease held
RETRY_MIN_S = 0.01      # ... but not more often than this


class Heartbeat:
    def __init__(
        self, settings: Settings, slots: Slots, log: Log, run: Run, *,
        on_db_error: Callable[[str, BaseException, float], None] = lambda op, exc, delay: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.slots = slots
        self.log = log
        self.run = run                  # one try on a pooled connection: this loop backs off itself
        self.on_db_error = on_db_error
        self.clock = clock
        self._leases_seen: set[int] = set()
        self._backoff = Backoff()
        # While the loop waits: the clock() time its wait ends (inf: no job held, no end); None while it
        # does not wait (it looks at every held job before it waits again).
        self._waking_at: float | None = None
        slots.beat_wanted = self._wanted

    def _wanted(self, run: Running) -> bool:
        """A job just taken (under the slots' lock) wakes the loop only if its lease is due before the
        loop would wake anyway: with leases alike, only the first job taken while none was held."""
        return self._waking_at is not None and self._due(run) < self._waking_at

    def interval_s(self, run: Running) -> float:
        """HEARTBEAT_INTERVAL_MS, else a third of the lease the job's claim granted."""
        ms = self.settings.heartbeat_interval_ms or max(1, run.lease_ms // 3)
        return ms / 1000.0

    def adopt(self, lease_ms: int) -> None:
        """A claim granted this lease. The first time a lease comes from queue_settings (no
        STUCK_JOB_TIMEOUT_MS) it is logged; a heartbeat interval not shorter than it is warned about."""
        with self.slots.lock:
            if lease_ms in self._leases_seen:
                return
            self._leases_seen.add(lease_ms)
        every = self.settings.heartbeat_interval_ms or max(1, lease_ms // 3)
        if self.settings.lease_ms is None:
            self.log("lease", f"{lease_ms}ms granted by the claim (queue_settings); heartbeat every {every}ms")
        if every >= lease_ms and self.settings.lease_ms is None:
            self.warn(every, lease_ms)

    def warn(self, every_ms: int, lease_ms: int) -> None:
        self.log("warning", f"heartbeat interval {every_ms}ms is not shorter than the lease ({lease_ms}ms): "
                            "running jobs will be swept and run again")

    def due_in(self) -> float | None:
        """Seconds until the next job's lease is due to be extended (0 or less: now); None when no job
        is held. Call with slots.lock held."""
        now = self.clock()
        dues = [self._due(r) for r in self.slots.holding() if r.state in ("running", "marking")]
        return min(dues) - now if dues else None

    def lease_s(self, run: Running) -> float:
        """The lease each heartbeat of the job renews (what beat() asks for)."""
        return (self.settings.lease_ms or run.lease_ms) / 1000.0

    def retry_in(self, delay: float) -> float:
        """How long to wait after a failed heartbeat, given the backoff's delay: at most a tenth of the
        shortest lease held, and at most half the time left on the lease that runs out first (each lease
        is counted from its last renewal, which the time its next beat is due says), so every lease
        gets tries before it expires. With nothing held, the backoff's delay."""
        with self.slots.lock:
            held = [r for r in self.slots.holding() if r.state in ("running", "marking")]
            if not held:
                return delay
            now = self.clock()
            shortest = min(self.lease_s(r) for r in held)
            left = min(self._due(r) - self.interval_s(r) + self.lease_s(r) for r in held) - now
        return max(RETRY_MIN_S, min(delay, shortest / RETRY_SHARE, left / 2))

    def _due(self, run: Running) -> float:
        if not run.next_beat:
            run.next_beat = run.started + self.interval_s(run)
        return run.next_beat

    def beat(self) -> list[Running]:
        """One heartbeat of every held job (one call per distinct lease, so each keeps its own).
        Returns the jobs found lost. Database errors are raised."""
        held = self.slots.held("running", "marking")
        if not held:
            return []
        by_lease: dict[int, list[Running]] = defaultdict(list)
        for run in held:
            by_lease[self.settings.lease_ms or run.lease_ms].append(run)
        kept: set = set()
        cancelled: set = set()
        sent = self.clock()  # each lease is renewed from a moment after this one: its next beat counts from here
        for lease_ms, runs in by_lease.items():
            leases = self.run(functools.partial(
                db.heartbeat, leases=[(r.job.id, r.job.lease_token) for r in runs], lease_ms=lease_ms))
            kept |= {lease.job_id for lease in leases}
            cancelled |= {lease.job_id for lease in leases if lease.cancel_requested}
        lost: list[Running] = []
        told: list[Running] = []
        with self.slots.lock:
            for run in held:
                run.next_beat = sent + self.interval_s(run)
                if run.job.id in cancelled and not run.cancelled:
                    run.cancelled = True
                    told.append(run)
                # A job being marked may have just finished: only a running one is lost.
                if run.job.id not in kept and run.state == "running" and not run.lost:
                    run.lost = True
                    lost.append(run)
        for run in told:
            self.log("cancel requested", f"{run.tag()}: cancel_job asked it to stop; its handler is told "
                                         "(ctx.cancelled), and the attempt will end cancelled", **run.fields())
        for run in lost:
            self.slots.count("lost")
            self.log("lost", f"{run.tag()}: no longer held by its lease (it expired and a sweep handed the "
                             "job on); its result will be ignored", **run.fields())
        return lost

    def loop(self, exiting: threading.Event) -> None:
        """Beats when a lease is due; sleeps on the slots' `taken` condition, so a new job due sooner
        than that is seen at once."""
        retry_at: float | None = None
        while not exiting.is_set():
            with self.slots.taken:
                if exiting.is_set():  # checked under the lock the exiting process pokes, so never missed
                    return
                # After a failed heartbeat the leases are overdue: retry_in() decided the next try.
                wait = self.due_in() if retry_at is None else retry_at - self.clock()
                if wait is None or wait > 0:
                    self._waking_at = math.inf if wait is None else self.clock() + wait
                    try:
                        self.slots.taken.wait(wait)
                    finally:
                        self._waking_at = None
                    continue
            try:
                self.beat()
                self._backoff.reset()
                retry_at = None
            except (PoolClosed, WorkerExiting):
                return
            except Exception as exc:
                if exiting.is_set():
                    return
                delay = self.retry_in(self._backoff.next())
                retry_at = self.clock() + delay
                if is_transient(exc):
                    self.on_db_error("heartbeat", exc, delay)
                else:
                    self.log("error", f"heartbeat: {exc!r}", error=repr(exc))
