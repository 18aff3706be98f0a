"""The jobs this worker holds, one slot each: the concurrency cap, and what every part reads.

A slot is taken when a job is claimed and freed only after its result is committed (or refused), so
the attempts one worker has open at once never exceed the cap. A claim first reserves the slots it
claims for (reserve), so two parts that claim (the main loop, and the recorder claiming for the slots
its successes free) never take more than the cap between them. Each held job moves through states:
running → marking (its result is being recorded), → releasing (handed back at shutdown) or → timing
out (its deadline came while it ran: job/deadlines.py ends it). All changes happen under one lock. Three
conditions on it: `changed` wakes whoever waits for a job to end (the shutdown, for the last one),
`taken` wakes the heartbeat for a new job, but only when that job's lease comes due before the heartbeat
would wake anyway (beat_wanted), not once per job, and `deadlines` wakes the deadlines' watch for a job
with a deadline, or one brought forward.
"""
from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Iterable

from pgqw import db
from pgqw.worker.log import job_fields, short


def granted_lease_ms(job: db.Job) -> int:
    """The lease the claim granted, as the database measured it (both times are its own)."""
    assert job.lease_expires_at is not None and job.started_at is not None
    return max(1, round((job.lease_expires_at - job.started_at).total_seconds() * 1000))


def deadline_after(job: db.Job, at: datetime | None, started: float) -> float | None:
    """A database time of the attempt (its deadline, its lease's end) as a clock() time: started (the
    clock() at claim) plus how long after the claim's started_at the database put it. The claim's reply
    comes after its started_at, so this is never earlier than the database's own time. None for None."""
    if at is None or job.started_at is None:
        return None
    return started + (at - job.started_at).total_seconds()


@dataclass
class Running:
    job: db.ClaimedJob              # its lease_token speaks for this attempt
    started: float                  # clock() at claim
    lease_ms: int                   # granted by the claim; the heartbeat renews the same
    next_beat: float = 0.0          # clock() time its lease is due to be extended
    state: str = "running"          # running → marking | releasing
    lost: bool = False              # a heartbeat found the lease gone: the result will be refused
    cancelled: bool = False         # a heartbeat answered that cancel_job asked this job to stop
    deadline: float | None = None   # clock() time its attempt times out (its claim's; a cancel brings it
                                    # forward to its lease's end); None: none
    future: Any = None              # an async handler's task on the event loop (event_loop.LoopTask)
    in_handler: bool = False        # a plain handler runs on its executor thread
    leaked: bool = False            # that thread was given up on at the deadline (a new one took its place)
    progress: str | None = None     # the latest ctx.progress (JSON text) not yet written by a heartbeat
    progress_sent: float = 0.0      # clock() time a heartbeat last wrote this job's progress
    transacted: Any = None          # ctx.transaction's end: "succeeded", or the refusal (a psycopg.Error)

    def tag(self) -> str:
        """`ba1b4d28 attempt 1/5`, made once (every log line of the job starts with it)."""
        tag = self.__dict__.get("_tag")
        if tag is None:
            tag = self.__dict__["_tag"] = f"{short(self.job.id)} attempt {self.job.attempts}/{self.job.max_attempts}"
        return tag

    def fields(self) -> dict:
        """The job's fields of its JSON log lines (log.job_fields), made once; not to be changed."""
        fields = self.__dict__.get("_fields")
        if fields is None:
            fields = self.__dict__["_fields"] = job_fields(self.job)
        return fields


class Slots:
    def __init__(self, cap: int, *, clock: Callable[[], float] = time.monotonic,
                 on_free: Callable[[], None] = lambda: None) -> None:
        self.cap = cap
        self.clock = clock
        self.on_free = on_free      # a freed slot wakes the main loop to claim again
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.taken = threading.Condition(self.lock)
        self.deadlines = threading.Condition(self.lock)
        # Whether a job just taken must wake the heartbeat now (called under the lock); the heartbeat
        # sets it. None: nobody waits on `taken`.
        self.beat_wanted: Callable[[Running], bool] | None = None
        # A job's new progress (called under the lock): the heartbeat sets it, to write it soon.
        self.progressed: Callable[[Running], None] | None = None
        self._held: dict[uuid.UUID, Running] = {}
        self._reserved = 0          # slots promised to a claim under way
        self._turned_away = False   # a claim got fewer slots than it could have, because of those promises
        self.peak = 0
        self.counts: Counter[str] = Counter()

    def reserve(self, limit: int, *, freeing: int = 0) -> int:
        """Promises up to limit free slots to a claim, counting `freeing` held slots as free (the jobs
        whose successes the claim's transaction records). Returns how many; each is then used by
        take(job, reserved=True) or given back by unreserve()."""
        with self.lock:
            unpromised = self.cap - len(self._held) + freeing
            n = max(0, min(limit, unpromised - self._reserved))
            if n < min(limit, unpromised):
                self._turned_away = True
            self._reserved += n
            return n

    def unreserve(self, n: int) -> None:
        """Gives back reserved slots a claim did not use. If a claim was turned away meanwhile because
        of them (a notification's claim while the recorder's was under way), the main loop is woken
        (on_free) to claim for them: the job it was told of is otherwise left for the poll."""
        if n <= 0:
            return
        with self.lock:
            self._reserved -= n
            wake, self._turned_away = self._turned_away, False
        if wake:
            self.on_free()

    def take(self, job: db.ClaimedJob, *, reserved: bool = False) -> tuple[Running, int, int]:
        """A claimed job takes a slot (one it reserved, if reserved): (its Running, jobs held now, peak)."""
        started = self.clock()
        run = Running(job=job, started=started, lease_ms=granted_lease_ms(job),
                      deadline=deadline_after(job, getattr(job, "deadline_at", None), started))
        with self.changed:
            if reserved:
                self._reserved -= 1
            self._held[job.id] = run
            self.peak = max(self.peak, len(self._held))
            if self.beat_wanted is not None and self.beat_wanted(run):
                self.taken.notify_all()
            if run.deadline is not None:
                self.deadlines.notify_all()
            return run, len(self._held), self.peak

    def progress(self, run: Running, text: str) -> None:
        """The job's handler reported its progress (ctx.progress): kept for the next heartbeat, which is
        told (progressed) so it comes soon."""
        with self.lock:
            run.progress = text
            if self.progressed is not None:
                self.progressed(run)

    def bring_forward(self, run: Running, at: float) -> None:
        """The job's deadline is `at` if that is sooner (a cancel: its lease's end). Call with the lock held."""
        if run.deadline is None or at < run.deadline:
            run.deadline = at
            self.deadlines.notify_all()

    def free(self, run: Running, *, wake: bool = True) -> tuple[int, int]:
        """The job's result is recorded (or refused): its slot is free. (jobs held now, peak)
        wake: tell the main loop (on_free) it may claim; not when the caller claimed for the slot itself."""
        with self.changed:
            if self._held.get(run.job.id) is run:
                del self._held[run.job.id]
                self.changed.notify_all()
            count, peak = len(self._held), self.peak
        if wake:
            self.on_free()
        return count, peak

    def move(self, run: Running, to: str, *, only_from: Iterable[str] = ("running",)) -> bool:
        """run.state = to, if it is in one of only_from. True when it moved."""
        with self.lock:
            if run.state in only_from:
                run.state = to
                return True
            return False

    def free_count(self) -> int:
        """Slots neither held nor reserved."""
        with self.lock:
            return self.cap - len(self._held) - self._reserved

    def held(self, *states: str) -> list[Running]:
        with self.lock:
            return [r for r in self._held.values() if not states or r.state in states]

    def count(self, outcome: str) -> None:
        with self.lock:
            self.counts[outcome] += 1

    def wait(self, until: Callable[[], bool], deadline: float | None) -> bool:
        """Waits (under the lock, so `until` may read the held jobs) until until() is true or the
        deadline (a clock() time) passes. Returns until()."""
        with self.changed:
            while not until():
                left = None if deadline is None else deadline - self.clock()
                if left is not None and left <= 0:
                    return False
                self.changed.wait(left)
            return True

    def holding(self) -> list[Running]:
        """The held jobs, for a caller that already holds the lock (inside wait's `until`)."""
        return list(self._held.values())

    def poke(self) -> None:
        """Wakes every waiter (the process is exiting)."""
        with self.changed:
            self.changed.notify_all()
            self.taken.notify_all()
            self.deadlines.notify_all()
