"""Claiming and dispatch: takes as many jobs as there are free slots, and hands each to where its
handler runs (an executor thread, or the event loop for an `async def` one: Executor.dispatch).

One round trip per wake-up with WORKER_BATCH_CLAIM (claim_jobs(limit = free slots)), else claim_job
once per free slot. What a claim asks for is a ClaimRequest: the worker, its queues and the task types
it runs, so a job of a type this worker does not know waits for one that does.

How jobs are claimed is chosen once, when the worker is wired (claimer_for): BatchClaimer or
OneByOneClaimer. The batch completion (completion.py) also claims, for the slots its batch of successes
frees, in the transaction that records them (reserve_after, then succeed_and_claim_many: one statement,
or claim_on in its transaction): one commit then both ends those attempts and starts the next ones.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import psycopg

from pgqw import db
from pgqw.worker.connection.database import Run
from pgqw.worker.job.slots import Running, Slots
from pgqw.worker.log import Log


@dataclass(frozen=True)
class ClaimRequest:
    """What every claim of this worker asks for."""

    worker_id: str
    queues: Sequence[str] | None = None
    lease_ms: int | None = None     # None: the task type's lease, else queue_settings.lease_ms
    task_types: Sequence[str] | None = None  # only jobs of these types (the ones this worker runs)

    def claim_many(self, conn: psycopg.Connection, limit: int) -> list[db.ClaimedJob]:
        return db.claim_jobs(conn, worker_id=self.worker_id, limit=limit, queues=self.queues,
                             lease_ms=self.lease_ms, task_types=self.task_types)

    def succeed_and_claim_many(
        self, conn: psycopg.Connection, done: Sequence[tuple[uuid.UUID | str, uuid.UUID | str]], results: Sequence[object],
        limit: int, free: int,
    ) -> tuple[list[db.Recorded], list[db.ClaimedJob]]:
        """Records these successes and claims up to least(limit, free + successes recorded) jobs, in one
        statement."""
        return db.mark_jobs_succeeded_and_claim(
            conn, done=done, results=results, worker_id=self.worker_id, limit=limit, free=free,
            queues=self.queues, lease_ms=self.lease_ms, task_types=self.task_types)

    def claim_one(self, conn: psycopg.Connection) -> db.ClaimedJob | None:
        return db.claim_job(conn, worker_id=self.worker_id, queues=self.queues, lease_ms=self.lease_ms,
                            task_types=self.task_types)

    def wait_for_jobs(self, conn: psycopg.Connection, for_ms: int) -> db.Waiting:
        """This worker waits for notifications of its queues for for_ms (conn in autocommit mode)."""
        return db.wait_for_jobs(conn, worker_id=self.worker_id, queues=self.queues, for_ms=for_ms)

    def next_run_at(self, conn: psycopg.Connection, limit: int) -> list[db.NextRunAt]:
        """When the next jobs this worker could claim come due (what its claims would take, later)."""
        return db.next_run_at(conn, queues=self.queues, task_types=self.task_types, limit=limit)


class Claimer:
    """Claiming for the free slots: what every claim way shares (starting a claimed job, the recorder's
    reservation, the next due times). How jobs are claimed is the subclass's, chosen once when the
    worker is wired (claimer_for): BatchClaimer or OneByOneClaimer.

    in_one_statement: the batch completion's successes and its claim for the slots they free can be one
    statement (mark_jobs_succeeded_and_claim, which claims with claim_jobs)."""

    in_one_statement = True

    def __init__(
        self, request: ClaimRequest, slots: Slots, log: Log, run: Run, *,
        dispatch: Callable[[Running], None], on_lease: Callable[[int], None] = lambda lease_ms: None,
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        self.request = request
        self.slots = slots
        self.log = log
        self.run = run                  # one try on a pooled connection: the main loop backs off
        self.dispatch = dispatch        # hands a started job to where its handler runs (Executor.dispatch)
        self.on_lease = on_lease        # told the lease each claim granted (the heartbeat adapts)
        self.stopping = stopping
        self.found_nothing = False      # the last claim() asked for jobs and got none
        self.short = False              # the last claim() got fewer jobs than it asked for: it has room to wait

    def claim(self) -> list[Running]:
        """Claims for the free slots and starts each job. Returns the started jobs. Database errors
        are raised; jobs claimed before one are started. found_nothing: this call asked and got no job."""
        raise NotImplementedError

    def claim_on(self, conn: psycopg.Connection, n: int) -> list[db.ClaimedJob]:
        """Claims up to n jobs on conn, in the caller's transaction. They are started by start() once
        that transaction commits."""
        raise NotImplementedError

    def reserve_after(self, freeing: int) -> int:
        """How many jobs a claim made with the successes of `freeing` held jobs may take (reserved: the
        caller starts them with start() or gives the rest back with slots.unreserve). None while stopping."""
        return 0 if self.stopping() else self.slots.reserve(self.slots.cap, freeing=freeing)

    def next_due(self, limit: int) -> list[int]:
        """In how many ms (server's clock) the next due times of this worker's jobs come, earliest first,
        at most limit of them. Database errors are raised."""
        return [row.due_in_ms for row in self.run(lambda conn: self.request.next_run_at(conn, limit))]

    def wait(self, for_ms: int) -> str:
        """Says this worker waits for notifications for for_ms (producers notify only workers that wait).
        Returns a transaction id taken once that was committed: claim once more after settled(it)."""
        return self.run(lambda conn: self.request.wait_for_jobs(conn, for_ms)).xid

    def settled(self, xid: str) -> bool:
        """Every producer that may have enqueued without seeing wait()'s rows has ended."""
        return self.run(lambda conn: db.waits_settled(conn, xid=xid))

    def start(self, job: db.ClaimedJob) -> Running:
        """Starts a claimed job in a slot reserved for it."""
        run, count, peak = self.slots.take(job, reserved=True)
        self.on_lease(run.lease_ms)
        self.log("start", f"{run.tag()}  (running {count}/{self.slots.cap}, peak {peak})", **run.fields())
        self.dispatch(run)
        return run


class BatchClaimer(Claimer):
    """WORKER_BATCH_CLAIM=1: one claim_jobs(limit = free slots) per wake-up, one round trip."""

    def claim(self) -> list[Running]:
        started: list[Running] = []
        self.found_nothing = self.short = False
        free = 0 if self.stopping() else self.slots.reserve(self.slots.cap)
        if free > 0:
            try:
                for job in self.run(lambda conn: self.request.claim_many(conn, free)):
                    started.append(self.start(job))
            finally:
                self.slots.unreserve(free - len(started))
            self.found_nothing = not started
            self.short = len(started) < free
        return started

    def claim_on(self, conn: psycopg.Connection, n: int) -> list[db.ClaimedJob]:
        return self.request.claim_many(conn, n) if n > 0 else []


class OneByOneClaimer(Claimer):
    """WORKER_BATCH_CLAIM=0: claim_job once per free slot, each job started as soon as it is claimed."""

    def __init__(self, request: ClaimRequest, slots: Slots, log: Log, run: Run, **kwargs: Any) -> None:
        super().__init__(request, slots, log, run, **kwargs)
        # With one slot, claim_jobs of one is what claim_job does: the batch completion may claim with it.
        self.in_one_statement = slots.cap == 1

    def claim(self) -> list[Running]:
        started: list[Running] = []
        self.found_nothing = self.short = False
        while not self.stopping() and self.slots.reserve(1):
            try:
                job = self.run(self.request.claim_one)
            except BaseException:
                self.slots.unreserve(1)
                raise
            if job is None:
                self.slots.unreserve(1)
                self.found_nothing = not started
                self.short = True
                break
            started.append(self.start(job))
        return started

    def claim_on(self, conn: psycopg.Connection, n: int) -> list[db.ClaimedJob]:
        jobs: list[db.ClaimedJob] = []
        while len(jobs) < n and (job := self.request.claim_one(conn)) is not None:
            jobs.append(job)
        return jobs


def claimer_for(batch_claim: bool) -> type[Claimer]:
    """The claim way of WORKER_BATCH_CLAIM: BatchClaimer, else OneByOneClaimer."""
    return BatchClaimer if batch_claim else OneByOneClaimer
