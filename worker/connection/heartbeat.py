"""The heartbeat: extends the lease of every job still held before it runs out.

A job's lease is the one its claim granted (lease_expires_at - started_at, measured by the database),
so without HEARTBEAT_INTERVAL_MS each job is heartbeated every third of its own lease, and each
heartbeat renews that same lease, presenting the lease token its claim returned. A job missing from
heartbeat's answer is no longer held by that token (its lease expired and a sweep handed it on): it
is logged as `lost`, and its result will be refused. A job the answer says was cancelled (cancel_job)
is flagged (`ctx.cancelled`, `ctx.stopping`) and logged once: its attempt will be recorded cancelled.
The database extends such a job's lease no more (cancel_job moved its deadline to now), so its deadline
here is brought forward to the end of the lease it holds: a handler that does not look is stopped then
(job/deadlines.py). No lease is extended past its attempt's deadline either: the database caps it.

A job's progress (ctx.progress) is kept on its Running and written by the heartbeat under its lease
token (heartbeat's p_progress), so an attempt a sweep handed on writes nothing. A progress report
brings that job's beat forward (slots.progress pokes the wait), to at most one write per
PROGRESS_EVERY_S per job: when only progress is due, only the jobs with progress to write are beaten.
A value the database refuses (QV400: its text is longer there than here, a number written out in full)
is dropped and logged, and the leases are extended without it.

A Service (service.py) on a thread of its own. After a failed heartbeat (a lost connection, a server
restarting) the next try comes after the backoff's delay, but never later than a tenth of the shortest
lease held, nor than half the time left before the first lease runs out: a short outage costs no lease,
however long the backoff has grown.
"""
from __future__ import annotations

import functools
import math
import threading
import time
from collections import defaultdict
from typing import Callable

import psycopg

from pgqw import db
from pgqw.config import Settings
from pgqw.worker.connection.database import Run, is_transient
from pgqw.worker.job.slots import Running, Slots, deadline_after
from pgqw.worker.log import Log
from pgqw.worker.service import Service

RETRY_SHARE = 10        # after a failed heartbeat, try again within a tenth of the shortest lease held
RETRY_MIN_S = 0.01      # ... but not more often than this
PROGRESS_EVERY_S = 0.25 # a job's progress is written at most this often (a report waits for it, then goes)


class Heartbeat(Service):
    name = "heartbeat"

    def __init__(
        self, settings: Settings, slots: Slots, log: Log, run: Run, *,
        on_db_error: Callable[[str, BaseException, float], None] = lambda op, exc, delay: None,
        clock: Callable[[], float] = time.monotonic, exiting: threading.Event | None = None,
    ) -> None:
        super().__init__(exiting)
        self.settings = settings
        self.slots = slots
        self.log = log
        self.call = run                 # one try on a pooled connection: the service backs off itself
        self.on_db_error = on_db_error
        self.clock = clock
        self._leases_seen: set[int] = set()
        self._retry_at: float | None = None  # after a failed heartbeat: when the next try comes
        # While the loop waits: the clock() time its wait ends (inf: no job held, no end); None while it
        # does not wait (it looks at every held job before it waits again).
        self._waking_at: float | None = None
        slots.beat_wanted = self._wanted
        slots.progressed = self._progressed

    def _progressed(self, run: Running) -> None:
        """A job reported progress (under the slots' lock): the loop wakes for it if it is due before
        the loop would wake anyway."""
        if self._waking_at is not None and self._progress_due(run) < self._waking_at:
            self.slots.taken.notify_all()

    def _progress_due(self, run: Running) -> float:
        """When the job's progress may be written: PROGRESS_EVERY_S after the last write (inf: none to write)."""
        return math.inf if run.progress is None else run.progress_sent + PROGRESS_EVERY_S

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
        dues = [min(self._due(r), self._progress_due(r)) for r in self.slots.holding()
                if r.state in ("running", "marking")]
        return min(dues) - now if dues else None

    def leases_due(self) -> bool:
        """Whether some held job's lease is due (else only progress is). Call with slots.lock held."""
        now = self.clock()
        return any(self._due(r) <= now for r in self.slots.holding() if r.state in ("running", "marking"))

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

    def beat(self, *, progress_only: bool = False) -> list[Running]:
        """One heartbeat of every held job (one call per distinct lease, so each keeps its own), with the
        progress each has to write; progress_only: of the jobs with progress to write alone. Returns the
        jobs found lost. Database errors are raised."""
        held = self.slots.held("running", "marking")
        if progress_only:
            held = [r for r in held if r.progress is not None]
        if not held:
            return []
        by_lease: dict[int, list[Running]] = defaultdict(list)
        for run in held:
            by_lease[self.settings.lease_ms or run.lease_ms].append(run)
        kept: set = set()
        cancelled: dict = {}  # job id → the lease it holds (a cancelled job's is extended no more)
        sent = self.clock()  # each lease is renewed from a moment after this one: its next beat counts from here
        for lease_ms, runs in by_lease.items():
            leases = self._heartbeat(runs, lease_ms, sent)
            kept |= {lease.job_id for lease in leases}
            cancelled.update((lease.job_id, lease.lease_expires_at) for lease in leases if lease.cancel_requested)
        lost: list[Running] = []
        told: list[Running] = []
        with self.slots.lock:
            for run in held:
                run.next_beat = sent + self.interval_s(run)
                if run.job.id in cancelled and not run.cancelled:
                    run.cancelled = True
                    told.append(run)
                    end = deadline_after(run.job, cancelled[run.job.id], run.started)
                    if end is not None:
                        self.slots.bring_forward(run, end)
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

    def _heartbeat(self, runs: list[Running], lease_ms: int, sent: float) -> list[db.Lease]:
        """One heartbeat call for these jobs, with their progress; a progress written is no longer kept
        (unless a newer one came meanwhile)."""
        with self.slots.lock:
            texts = [r.progress for r in runs]
        leases = [(r.job.id, r.job.lease_token) for r in runs]
        if not any(t is not None for t in texts):
            return self.call(functools.partial(db.heartbeat, leases=leases, lease_ms=lease_ms))
        try:
            answer = self.call(functools.partial(db.heartbeat, leases=leases, lease_ms=lease_ms, progress=texts))
        except psycopg.Error as exc:
            if exc.sqlstate != "QV400" or exc.diag.column_name != "progress":
                raise
            self.log("error", f"heartbeat: progress not written, the database refused it: "
                              f"{exc.diag.message_primary}", error=exc.diag.message_primary)
            answer = self.call(functools.partial(db.heartbeat, leases=leases, lease_ms=lease_ms))
        with self.slots.lock:
            for run, text in zip(runs, texts):
                if text is not None:
                    run.progress_sent = sent
                    if run.progress is text:
                        run.progress = None
        return answer

    # -------------------------------------------------------------------------------- the service

    def round(self) -> float:
        """Waits until a lease is due (or, after a failure, until the retry), then beats. Sleeps on the
        slots' `taken` condition, so a new job due sooner than that is seen at once."""
        while True:
            with self.slots.taken:
                if self.stopped.is_set():  # checked under the lock the exiting process pokes, so never missed
                    return 0.0
                # After a failed heartbeat the leases are overdue: retry_in() decided the next try.
                wait = self.due_in() if self._retry_at is None else self._retry_at - self.clock()
                if wait is not None and wait <= 0:
                    progress_only = self._retry_at is None and not self.leases_due()
                    break
                self._waking_at = math.inf if wait is None else self.clock() + wait
                try:
                    self.slots.taken.wait(wait)
                finally:
                    self._waking_at = None
        self.beat(progress_only=progress_only)
        self._retry_at = None
        return 0.0

    def report(self, exc: Exception, delay: float) -> float:
        """A failed heartbeat: the next try after the backoff's delay, but soon enough for the leases
        held (retry_in); the round waits for it."""
        delay = self.retry_in(delay)
        self._retry_at = self.clock() + delay
        if is_transient(exc):
            self.on_db_error("heartbeat", exc, delay)
        else:
            self.log("error", f"heartbeat: {exc!r}", error=repr(exc))
        return 0.0

    def interrupt(self) -> None:
        self.slots.poke()
