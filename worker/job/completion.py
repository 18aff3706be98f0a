"""How successes are recorded: the completion strategy, chosen once when the worker is wired
(runner.py), as River's completer is one interface with inline and batch implementations.

Inline (WORKER_BATCH_MARK=0): every outcome is recorded where it happened, on its executor's thread,
with one call of its own (the recorder's mark_succeeded, mark_failed, mark_cancelled, snooze_job).

Batch (WORKER_BATCH_MARK=1): a success with a JSON result (or none) is handed to the completion's own
thread (a Service), which records the successes that finished since its last call with one
mark_jobs_succeeded (up to MARK_BATCH_MAX), and in the same transaction claims jobs for the slots they
free (claimer.py): one commit ends those attempts and starts the next ones, where a claim of its own
would be a second commit, and a second wait for it, before the slot is busy again. When the claimer's
claims can be (claim_jobs, or a single slot), the two are one statement (db.mark_jobs_succeeded_and_claim),
so that exchange is one round trip, not BEGIN, two calls and COMMIT. When the queue is quiet that is one
job per call, so it adds no wait; under load many commits become one. Failures, cancellations, snoozes,
refusals and a file result are recorded at once, as inline.
"""
from __future__ import annotations

import queue
import threading
import uuid
from typing import Any, Protocol, Sequence

import psycopg

from pgqw import db
from pgqw.config import Settings
from pgqw.worker.job.claimer import Claimer
from pgqw.worker.job.recorder import Outcome, Recorder, Result, Succeeded
from pgqw.worker.job.slots import Running
from pgqw.worker.log import first_line
from pgqw.worker.service import Service, WorkerExiting

MARK_BATCH_MAX = 500            # most successes one mark_jobs_succeeded records (WORKER_BATCH_MARK)
Done = Sequence[tuple[uuid.UUID | str, uuid.UUID | str]]  # (job id, lease token) of each success
DRAIN_WAIT_S = 0.2              # how long the batch thread waits for a first success (then checks for a stop)


class Completion(Protocol):
    """What the executors hand each attempt's outcome to, and its lifecycle (the service protocol's)."""

    recorder: Recorder  # records one outcome with one call (what a handler's own transaction leaves to it)

    def record(self, run: Running, outcome: Outcome, elapsed: float) -> None: ...

    def hands_off(self, outcome: Outcome) -> bool:
        """record() of this outcome only hands it to a thread of the completion's own: it does not wait
        on the database."""
        ...

    def start(self) -> object: ...

    def stop(self) -> None: ...


class Inline:
    """Every outcome recorded at once, on the executor's thread, by the recorder's one call for it."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.record = recorder.record   # the executor calls the recorder itself: nothing in between

    def hands_off(self, outcome: Outcome) -> bool:
        """Every outcome is recorded at once, with a call."""
        return False

    def start(self) -> None:
        """Nothing runs on its own."""

    def stop(self) -> None:
        """Nothing to stop."""


class Batch(Service):
    """Successes with a JSON result (or none) recorded together, and the claim for the slots they free in
    the same transaction; everything else (failures, cancellations, snoozes, refusals, files) recorded at
    once by the recorder. claimer: who claims for the freed slots (None: the successes are recorded,
    nothing is claimed)."""

    name = "recorder"

    def __init__(self, recorder: Recorder, *, claimer: Claimer | None = None,
                 exiting: threading.Event | None = None) -> None:
        super().__init__(exiting)
        self.recorder = recorder
        self.claimer = claimer
        self.slots = recorder.slots
        self.log = recorder.log
        self.database = recorder.database
        self.done: queue.Queue[tuple[Running, Result, float]] = queue.Queue()  # successes to batch
        # How a batch's successes and its claim are sent, chosen here once: one statement when the claims
        # are claim_jobs (or there is one slot, where claim_jobs of one is what claim_job does), else a
        # transaction of mark_jobs_succeeded and the claimer's own claims.
        self._succeed = (self._succeed_in_one_statement if claimer is None or claimer.in_one_statement
                         else self._succeed_then_claim)
        # The batch under way's reserved slots and claimed jobs (the batch thread's own; a retry of the
        # call gives the slots back and reserves again).
        self._reserved = 0
        self._claimed: list[db.ClaimedJob] = []

    def hands_off(self, outcome: Outcome) -> bool:
        """A success with a JSON result (or none) is batched; the rest is recorded at once."""
        return isinstance(outcome, Succeeded) and (outcome.result is None or outcome.result[2] is None)

    def record(self, run: Running, outcome: Outcome, elapsed: float) -> None:
        if self.hands_off(outcome):
            assert isinstance(outcome, Succeeded)
            self.slots.move(run, "marking")
            self.done.put((run, outcome.result, elapsed))  # drain() records it with others (JSON or none)
        else:
            self.recorder.record(run, outcome, elapsed)

    # -------------------------------------------------------------------------------- the batch

    def drain(self, timeout: float | None) -> int:
        """Records the successes waiting (up to MARK_BATCH_MAX) with one call, waiting up to timeout
        for the first. Returns how many it took."""
        try:
            batch = [self.done.get(timeout=timeout)]
        except queue.Empty:
            return 0
        while len(batch) < MARK_BATCH_MAX:
            try:
                batch.append(self.done.get_nowait())
            except queue.Empty:
                break
        self.successes(batch)
        return len(batch)

    def successes(self, batch: list[tuple[Running, Result, float]]) -> None:
        """One mark_jobs_succeeded for many, with their JSON results, and with a claimer the claim for the
        slots they free, in one transaction. A job missing from the answer is not this attempt's:
        mark_succeeded alone then gives the reason (and its SQLSTATE). A batch refused as a whole (one
        result the database cannot store refuses them all) is recorded one by one the same way, so only
        the job whose result it was fails."""
        done: Done = [(r.job.id, r.job.lease_token) for r, _, _ in batch]
        results = [res[1] if res is not None else None for _, res, _ in batch]
        self._reserved, self._claimed = 0, []

        def record(conn: psycopg.Connection) -> list[db.Recorded]:
            self.slots.unreserve(self._reserved)  # a retry reserves again
            self._reserved, self._claimed = 0, []
            return self._succeed(conn, done, results)

        try:
            answered = self.database.call(f"mark_jobs_succeeded ({len(batch)} jobs)", record)
        except (psycopg.Error, UnicodeEncodeError) as exc:
            self.slots.unreserve(self._reserved)
            state = getattr(exc, "sqlstate", None)
            self.log("error", f"mark_jobs_succeeded: {state} {first_line(exc)}; recording one by one",
                     sqlstate=state, error=first_line(exc))
            answered, self._reserved, self._claimed = [], 0, []
        except BaseException:
            self.slots.unreserve(self._reserved)
            self._reserved, self._claimed = 0, []
            raise
        reserved, claimed = self._reserved, self._claimed
        self._reserved, self._claimed = 0, []
        found = {job.id: job for job in answered}
        missing = []
        # The slots this transaction claimed for need no wake-up of the main loop: a claim of its own would
        # find them reserved, or the queue empty when the claim here took fewer jobs than it could.
        claimed_for = reserved > 0
        for run, result, elapsed in batch:
            if run.job.id in found:
                self.recorder.logged_success(run, Succeeded(result).note, elapsed,
                                             earlier=found[run.job.id].already_recorded, wake=not claimed_for)
            else:
                missing.append((run, result, elapsed))
        if claimed:
            assert self.claimer is not None
            for job in claimed:
                self.claimer.start(job)
        self.slots.unreserve(reserved - len(claimed))
        for run, result, elapsed in missing:
            self.recorder.success(run, result, elapsed)

    def _succeed_in_one_statement(self, conn: psycopg.Connection, done: Done,
                                  results: Sequence[Any]) -> list[db.Recorded]:
        """The claim takes what the successes it recorded free: the slots are promised first on the
        chance that all are recorded; the statement takes fewer if not."""
        if self.claimer is not None:
            self._reserved = self.claimer.reserve_after(freeing=len(done))
        if self._reserved > 0:
            assert self.claimer is not None
            answered, self._claimed = self.claimer.request.succeed_and_claim_many(
                conn, done, results, limit=self._reserved, free=self._reserved - len(done))
            return answered
        return db.mark_jobs_succeeded_brief(conn, done=done, results=results)

    def _succeed_then_claim(self, conn: psycopg.Connection, done: Done,
                            results: Sequence[Any]) -> list[db.Recorded]:
        """mark_jobs_succeeded, then the claimer's claims for the slots the recorded ones free, in one
        transaction."""
        assert self.claimer is not None
        with conn.transaction():
            answered = db.mark_jobs_succeeded_brief(conn, done=done, results=results)
            self._reserved = self.claimer.reserve_after(freeing=len(answered))
            self._claimed = self.claimer.claim_on(conn, self._reserved)
        return answered

    # -------------------------------------------------------------------------------- the service

    def round(self) -> float:
        self.drain(timeout=DRAIN_WAIT_S)
        return 0.0

    def report(self, exc: Exception, delay: float) -> float:
        self.log("error", f"recorder: {exc!r}; again in {delay:.1f}s", error=repr(exc))
        return delay

    def finish(self) -> None:
        """The successes still waiting when the worker exits are recorded (the database permitting)."""
        try:
            while self.drain(timeout=DRAIN_WAIT_S):
                pass
        except WorkerExiting:
            pass


def completion_for(settings: Settings, recorder: Recorder, claimer: Claimer, exiting: threading.Event) -> Inline | Batch:
    """The worker's completion strategy: Batch with WORKER_BATCH_MARK, else Inline."""
    if settings.batch_mark:
        return Batch(recorder, claimer=claimer, exiting=exiting)
    return Inline(recorder)
