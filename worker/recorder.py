"""Recording results: a success with the handler's result (one, or many with WORKER_BATCH_MARK), a
failure, or a refusal.

With WORKER_BATCH_MARK the successes waiting are recorded by one mark_jobs_succeeded, and in the same
transaction the worker claims jobs for the slots they free (claimer.py): one commit ends those attempts
and starts the next ones, where a claim of its own would be a second commit, and a second wait for it,
before the slot is busy again. With batch claims (or one slot) the two are one statement
(db.mark_jobs_succeeded_and_claim), so that exchange is one round trip, not BEGIN, two calls and COMMIT.

Each result is a new transaction (the claim committed long before), retried on a connection error
like every call. The stored function is the judge of what happened: it records the result, answers
already_recorded when an earlier try of the same call committed but its reply was lost, or refuses a
result that is no longer this attempt's to give (QL409, or QN404 for a job that is gone). A job's
slot is freed only once its result is committed or refused, then the result is logged.

A result the database cannot store (a data exception: a \u0000 in JSON, NaN; a value over one of its
limits; a content type mark_succeeded refuses) fails the attempt at once, not retried: the handler has
run, and run again it would most likely return the same result (see unstorable). A batch refused for
that is recorded one by one, so only the job whose result it was fails.
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import psycopg

from pgqw import db
from pgqw.config import Settings
from pgqw.worker.claimer import Claimer
from pgqw.worker.database import Database, WorkerExiting
from pgqw.worker.log import Log, clock, first_line, iso, ms, short
from pgqw.worker.slots import Running, Slots

MARK_BATCH_MAX = 500            # most successes one mark_jobs_succeeded records (WORKER_BATCH_MARK)
NOT_HELD = ("QL409", "QN404")   # the result is not this attempt's to give: ignored, nothing changed
EARLIER_TRY = "recorded by an earlier try whose reply was lost"
UNSTORABLE = "the result could not be stored"


def unstorable(exc: BaseException) -> str | None:
    """What was wrong with a result the database refused to store, as the attempt's error, or None when
    the refusal was not the result's fault. The result's fault: a data exception (class 22: jsonb
    refuses \u0000 and lone surrogates, 22P05/22P02; psycopg itself refuses a NUL in a text value
    before sending it), a value over one of the server's limits (class 54), or a result mark_succeeded
    refuses (QV400: the job id and lease token the worker sends are never null). A string Python
    cannot encode as UTF-8 is one too."""
    if isinstance(exc, UnicodeEncodeError):
        return f"{UNSTORABLE}: {exc}"
    if not isinstance(exc, psycopg.Error):
        return None
    state = exc.sqlstate or ""
    if not (isinstance(exc, psycopg.DataError) or state.startswith("54") or state == "QV400"):
        return None
    what = exc.diag.message_primary or first_line(exc)
    if exc.diag.message_detail:
        what = f"{what}: {exc.diag.message_detail.rstrip('.')}"
    return f"{UNSTORABLE}: {what}" + (f" ({state})" if state else "")


def storable(text: str) -> str:
    """text as a text column takes it: a NUL or a lone surrogate (which PostgreSQL cannot store, and
    psycopg would refuse to send) written as its escape, the rest as it is."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


# A handler's result as stored: (content type, JSON value, bytes), or None (pgqw.tasks.result_row).
Result = tuple[str, Any, bytes | None] | None


@dataclass
class Succeeded:
    result: Result = None

    @property
    def note(self) -> str | None:
        if self.result is None:
            return None
        content_type, _value, data = self.result
        return f"result {content_type}" + (f" ({len(data) // 1024} KiB)" if data is not None else "")


@dataclass
class Failed:
    error: str
    retryable: bool = True


@dataclass
class Cancelled:
    """The job was cancelled while it ran (a heartbeat said so): its attempt ends cancelled."""
    note: str | None = None  # what the handler raised on its way out, if anything


@dataclass
class Refused:
    """The result was refused before it was recorded: the attempt no longer holds the job."""
    error: psycopg.Error


Outcome = Succeeded | Failed | Cancelled | Refused


class Recorder:
    def __init__(self, settings: Settings, slots: Slots, log: Log, database: Database, *, batch: bool,
                 claimer: Claimer | None = None) -> None:
        self.claimer = claimer      # claims for the slots a batch of successes frees; None: it does not
        self.settings = settings
        self.worker_id = settings.worker_id
        self.slots = slots
        self.log = log
        self.database = database
        self.batch = batch
        self.done: queue.Queue[tuple[Running, Result, float]] = queue.Queue()  # successes to batch

    def record(self, run: Running, outcome: Outcome, elapsed: float) -> None:
        self.slots.move(run, "marking")
        if isinstance(outcome, Refused):
            self.refused(run, outcome.error)
        elif isinstance(outcome, Failed):
            self.failure(run, outcome.error, outcome.retryable, elapsed)
        elif isinstance(outcome, Cancelled):
            self.cancelled(run, outcome.note, elapsed)
        elif self.batch and (outcome.result is None or outcome.result[2] is None):
            self.done.put((run, outcome.result, elapsed))  # drain() records it with others (JSON or none)
        else:
            self.success(run, outcome.result, elapsed)

    # -------------------------------------------------------------------------------- successes

    def success(self, run: Running, result: Result, elapsed: float) -> None:
        job = run.job
        try:
            after = self.database.call(f"mark_succeeded {short(job.id)}", lambda conn: db.mark_succeeded(
                conn, job_id=job.id, lease_token=job.lease_token, result=result))
        except (psycopg.Error, UnicodeEncodeError) as exc:
            problem = unstorable(exc)
            if problem is not None:
                # Nothing was stored, and the attempt still holds the job: it fails with what was wrong.
                self.failure(run, problem, False, elapsed)
                return
            assert isinstance(exc, psycopg.Error)
            # Refused because the job was cancelled after the last heartbeat (the refusal names
            # job_cancel_requests): the attempt ends cancelled instead.
            if (exc.sqlstate == "QL409" and exc.diag.table_name == "job_cancel_requests"
                    and self.cancelled(run, None, elapsed, quiet=True)):
                return  # cancelled after the last heartbeat: the attempt ends cancelled instead
            self.refused(run, exc)
            return
        self.logged_success(run, Succeeded(result).note, elapsed, earlier=after.already_recorded)

    def successes(self, batch: list[tuple[Running, Result, float]]) -> None:
        """One mark_jobs_succeeded for many, with their JSON results, and with a claimer the claim for the
        slots they free, in one transaction. A job missing from the answer is not this attempt's:
        mark_succeeded alone then gives the reason (and its SQLSTATE). A batch refused as a whole (one
        result the database cannot store refuses them all) is recorded one by one the same way, so only
        the job whose result it was fails."""
        reserved = 0
        claimed: list[db.ClaimedJob] = []

        done = [(r.job.id, r.job.lease_token) for r, _, _ in batch]
        results = [res[1] if res is not None else None for _, res, _ in batch]

        def record(conn: psycopg.Connection) -> list[db.Recorded]:
            nonlocal reserved, claimed
            self.slots.unreserve(reserved)  # a retry reserves again
            reserved, claimed = 0, []
            if self.claimer is not None and (self.claimer.batch or self.slots.cap == 1):
                # One statement: the claim takes what the successes it recorded free (the slots are
                # promised first on the chance that all are recorded; the statement takes fewer if not).
                # With one slot, claim_jobs of one is what claim_job would do.
                reserved = self.claimer.reserve_after(freeing=len(batch))
                if reserved > 0:
                    answered, claimed = self.claimer.request.succeed_and_claim_many(
                        conn, done, results, limit=reserved, free=reserved - len(batch))
                    return answered
                return db.mark_jobs_succeeded_brief(conn, done=done, results=results)
            with conn.transaction():
                answered = db.mark_jobs_succeeded_brief(conn, done=done, results=results)
                if self.claimer is not None:
                    reserved = self.claimer.reserve_after(freeing=len(answered))
                    claimed = self.claimer.claim_on(conn, reserved)
            return answered

        try:
            answered = self.database.call(f"mark_jobs_succeeded ({len(batch)} jobs)", record)
        except (psycopg.Error, UnicodeEncodeError) as exc:
            self.slots.unreserve(reserved)
            state = getattr(exc, "sqlstate", None)
            self.log("error", f"mark_jobs_succeeded: {state} {first_line(exc)}; recording one by one",
                     sqlstate=state, error=first_line(exc))
            answered, reserved, claimed = [], 0, []
        except BaseException:
            self.slots.unreserve(reserved)
            raise
        found = {job.id: job for job in answered}
        missing = []
        # The slots this transaction claimed for need no wake-up of the main loop: a claim of its own would
        # find them reserved, or the queue empty when the claim here took fewer jobs than it could.
        claimed_for = reserved > 0
        for run, result, elapsed in batch:
            if run.job.id in found:
                self.logged_success(run, Succeeded(result).note, elapsed, earlier=found[run.job.id].already_recorded,
                                    wake=not claimed_for)
            else:
                missing.append((run, result, elapsed))
        if claimed:
            assert self.claimer is not None
            for job in claimed:
                self.claimer.start(job)
        self.slots.unreserve(reserved - len(claimed))
        for run, result, elapsed in missing:
            self.success(run, result, elapsed)

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

    def loop(self, exiting: threading.Event) -> None:
        """WORKER_BATCH_MARK: records the successes that finished since its last call. When the queue
        is quiet that is one job per call, so it adds no wait; under load many commits become one."""
        try:
            while self.drain(timeout=0.2) or not exiting.is_set():
                pass
        except WorkerExiting:
            return

    def logged_success(self, run: Running, note: str | None, elapsed: float, *, earlier: bool = False,
                       wake: bool = True) -> None:
        self.slots.count("succeeded")
        count, peak = self.slots.free(run, wake=wake)
        said = "; ".join(t for t in (note, EARLIER_TRY if earlier else None) if t)
        self.log("success", f"{run.tag()} in {elapsed:.2f}s{': ' + said if said else ''}"
                            f"  (running {count}/{self.slots.cap}, peak {peak})",
                 **run.fields(), outcome="succeeded", duration_ms=ms(elapsed))

    # -------------------------------------------------------------------------------- cancellations

    def cancelled(self, run: Running, note: str | None, elapsed: float, *, quiet: bool = False) -> bool:
        """mark_cancelled for the attempt. True when recorded; refused: logged (unless quiet, for a
        caller with a refusal of its own to report) and False."""
        job = run.job
        try:
            after = self.database.call(f"mark_cancelled {short(job.id)}", lambda conn: db.mark_cancelled(
                conn, job_id=job.id, lease_token=job.lease_token))
        except psycopg.Error as exc:
            if not quiet:
                self.refused(run, exc)
            return False
        self.slots.count("cancelled")
        count, peak = self.slots.free(run)
        said = "; ".join(t for t in (note, EARLIER_TRY if after.already_recorded else None) if t)
        self.log("cancelled", f"{run.tag()} in {elapsed:.2f}s{': ' + said if said else ''}"
                              f"  (running {count}/{self.slots.cap}, peak {peak})",
                 **run.fields(), outcome="cancelled", duration_ms=ms(elapsed))
        return True

    # -------------------------------------------------------------------------------- failures

    def failure(self, run: Running, error: str, retryable: bool, elapsed: float) -> None:
        job, s = run.job, self.settings
        error = storable(error)  # a handler's message may hold what a text column cannot
        try:
            after = self.database.call(f"mark_failed {short(job.id)}", lambda conn: db.mark_failed(
                conn, job_id=job.id, lease_token=job.lease_token, error=error,
                retryable=retryable, base_ms=s.retry_base_delay_ms, max_jitter_ms=s.retry_max_jitter_ms,
                max_delay_ms=s.retry_max_delay_ms))
        except psycopg.Error as exc:
            self.refused(run, exc)
            return
        count, peak = self.slots.free(run)
        tail = f"{' (' + EARLIER_TRY + ')' if after.already_recorded else ''}  (running {count}/{self.slots.cap}, peak {peak})"
        head = f"{run.tag()} in {elapsed:.2f}s: {error}"
        fields = {**run.fields(), "duration_ms": ms(elapsed), "error": error, "retryable": retryable}
        if not retryable:
            self.slots.count("dead")
            self.log("dead", f"{head} (permanent error, not retried){tail}", **fields, outcome="dead")
        elif after.attempts != job.attempts:  # answered already_recorded, and a retry has begun since
            self.slots.count("failed")
            self.log("failed", f"{head}; retried since (now attempt {after.attempts}, {after.status}){tail}",
                     **fields, outcome="retry")
        elif after.status == "dead":
            self.slots.count("dead")
            self.log("failed", f"{head} → dead{tail}", **fields, outcome="dead")
        else:
            self.slots.count("failed")
            wait = (after.run_at - datetime.now(timezone.utc)).total_seconds()
            self.log("failed", f"{head}; next run {clock(after.run_at)} (in {max(0.0, wait):.1f}s){tail}",
                     **fields, outcome="retry", next_run_at=iso(after.run_at))

    def refused(self, run: Running, exc: psycopg.Error) -> None:
        count, peak = self.slots.free(run)
        tail = f"  (running {count}/{self.slots.cap}, peak {peak})"
        if exc.sqlstate in NOT_HELD:
            self.slots.count("ignored")
            self.log("ignored late result", f"{run.tag()}: {exc.diag.message_primary or first_line(exc)}{tail}",
                     **run.fields(), outcome="ignored", sqlstate=exc.sqlstate,
                     error=exc.diag.message_primary or first_line(exc))
        else:
            # A bug or an unexpected server error: the lease expires and a sweep recovers the job.
            self.log("error", f"{run.tag()}: result not recorded: {exc.sqlstate} {first_line(exc)}{tail}",
                     **run.fields(), outcome="not recorded", sqlstate=exc.sqlstate, error=first_line(exc))
