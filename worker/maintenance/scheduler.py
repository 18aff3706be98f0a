"""Periodic jobs: the scheduler thread, which every worker runs (SCHEDULER=0 turns it off).

At start it registers the schedules its task modules define (register_schedules). Then, each round, it
reads the schedules table and the server's clock, and for each schedule of a task type this worker runs
(never another's: its jobs would wait for a worker that may never come) finds the due slots with
croniter (the slots after its last_slot and slots_after, at most the latest 100), and hands them to
enqueue_schedule_slots,
which applies the schedule's catch_up and gives each slot one job whoever calls: exactly once comes from
the database (the row lock and the slot's unique idempotency key), so many workers can run this at once.
It sleeps until the next slot of any schedule, at most REREAD_S, so a change made from psql is seen
within seconds.
"""
from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import Callable

import psycopg

from pgqw import db, tasks
from pgqw.cron import done_until, due_slots, next_slot
from pgqw.worker.connection.database import Run, is_transient
from pgqw.worker.log import Log, first_line, short
from pgqw.worker.service import Backoff, Service

REREAD_S = 5.0     # the longest sleep: how soon a schedule set, paused or resumed from psql is seen
MIN_WAIT_S = 0.05  # the shortest: a slot the server's clock has not quite reached yet
RETRY_JITTER = 0.2  # after a failed round, 80 % to 100 % of the backoff's wait


class Scheduler(Service):
    name = "scheduler"

    def __init__(self, registry: tasks.Registry, log: Log, run: Run, *,
                 now: Callable[[psycopg.Connection], datetime] = db.server_now,
                 reread_s: float = REREAD_S, exiting: threading.Event | None = None) -> None:
        super().__init__(exiting, backoff=Backoff(jitter=RETRY_JITTER))
        self.registry = registry
        self.log = log
        self.call = run         # one try on a pooled connection: the service's rounds back off
        self.now = now          # the clock slots are due by: the server's (tests give their own)
        self.reread_s = reread_s

    def register(self) -> list[db.Schedule]:
        """The code's schedules into the table (a DBA's pause and schedules stay). At start: a definition
        the database refuses (QC400, QT422) stops the worker there."""
        rows = tasks.schedule_registrations(self.registry)
        try:
            done = self.call(lambda conn: db.register_schedules(conn, task_types=self.registry.names(),
                                                               schedules=rows))
        except psycopg.errors.InsufficientPrivilege:
            # The worker role may not define schedules (a worker login could otherwise make jobs of any
            # payload): the deploy registers them (pgqw migrate --tasks, pgqw tasks register).
            self.log("schedule", "this login may not register schedules: the deploy registers the code's "
                                 "(pgqw migrate --tasks)")
            return []
        for s in done:
            if s.source == "sql":
                self.log("schedule", f"{s.name}: a DBA's schedule of the same name wins over the code's "
                                     "(delete_schedule hands it back)")
        return done

    def tick(self) -> float:
        """One round: every schedule's due slots to enqueue_schedule_slots. Returns how long to sleep:
        until the next slot of any schedule, at most reread_s."""
        now, schedules = self.call(lambda conn: (self.now(conn), db.schedule_times(conn)))
        wait = self.reread_s
        for s in schedules:
            # Only the schedules of types this worker runs: a schedule of a type no live worker runs makes
            # no jobs nobody could take; when a worker that runs it starts, its catch_up says which of the
            # missed slots get a job (the latest one only, by default).
            if s.paused or s.task_type not in self.registry:
                continue
            try:
                slots = due_slots(s.cron, done_until(s), now)
                upcoming = next_slot(s.cron, max(now, done_until(s), *slots))
            except (ValueError, KeyError) as exc:
                self.log("schedule error", f"{s.name}: cannot read {s.cron!r}: {first_line(exc)}")
                continue
            if slots:
                self._enqueue(s, slots)
            wait = min(wait, (upcoming - now).total_seconds())
        return max(wait, MIN_WAIT_S)

    def _enqueue(self, s: db.ScheduleTimes, slots: list[datetime]) -> None:
        try:
            made = self.call(lambda conn: db.enqueue_schedule_slots(conn, name=s.name, slots=slots))
        except psycopg.Error as exc:
            if is_transient(exc):
                raise
            # Deleted since the read (QR404), a payload over a lowered limit (QV413): this schedule only.
            self.log("schedule error", f"{s.name}: {exc.sqlstate} {exc.diag.message_primary or first_line(exc)}")
            return
        for m in made:
            self.log("scheduled", f"{s.name} slot {_iso(m.slot)} → job {short(m.job_id)}"
                                  + ("" if m.created else " (made before)"),
                     schedule=s.name, slot=_iso(m.slot), job_id=str(m.job_id), created=m.created)

    # -------------------------------------------------------------------------------- the service

    def round(self) -> float:
        """tick(): a database error is logged and the round retried with backoff."""
        return self.tick()

    def report(self, exc: Exception, delay: float) -> float:
        self.log("db error", f"scheduler: {first_line(exc)}; again in {delay:.1f}s")
        return delay


def _iso(at: datetime) -> str:
    return at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
