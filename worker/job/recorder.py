"""Recording results: a success with the handler's result, a failure, a cancellation, a snooze, or a
refusal, each with one call of its own. The completion strategy (completion.py) decides where this runs: at once on
the executor's thread (Inline), or, for the successes with a JSON result, together with others and the
claim for the slots they free (Batch, which falls back on the calls here for what it cannot batch).

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

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import psycopg

from pgqw import db, errors
from pgqw.config import Settings
from pgqw.worker.connection.database import Database
from pgqw.worker.job.slots import Running, Slots
from pgqw.worker.log import Log, clock, first_line, iso, ms, short

# The result is not this attempt's to give (QL409, QN404): ignored, nothing changed.
NOT_HELD = (errors.LeaseLost, errors.JobNotFound)
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
    if not (isinstance(exc, psycopg.DataError) or state.startswith("54") or errors.is_error(exc, errors.InvalidArgument)):
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
class Snoozed:
    """The handler raised pgqw.Snooze: the job is put off until a time, or for a delay (one of the two),
    without spending the attempt (snooze_job)."""
    delay_ms: int | None = None
    until: datetime | None = None


@dataclass
class Refused:
    """The result was refused before it was recorded: the attempt no longer holds the job."""
    error: psycopg.Error


Outcome = Succeeded | Failed | Cancelled | Snoozed | Refused


class Recorder:
    """Records each outcome with its own call (mark_succeeded, mark_failed, mark_cancelled, snooze_job) and
    logs it; the completion strategies' common ground."""

    def __init__(self, settings: Settings, slots: Slots, log: Log, database: Database) -> None:
        self.settings = settings
        self.worker_id = settings.worker_id
        self.slots = slots
        self.log = log
        self.database = database

    def record(self, run: Running, outcome: Outcome, elapsed: float) -> None:
        self.slots.move(run, "marking")
        if isinstance(outcome, Refused):
            self.refused(run, outcome.error)
        elif isinstance(outcome, Failed):
            self.failure(run, outcome.error, outcome.retryable, elapsed)
        elif isinstance(outcome, Cancelled):
            self.cancelled(run, outcome.note, elapsed)
        elif isinstance(outcome, Snoozed):
            self.snoozed(run, outcome, elapsed)
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
            if errors.cancel_requested(exc) and self.cancelled(run, None, elapsed, quiet=True):
                return  # cancelled after the last heartbeat: the attempt ends cancelled instead
            self.refused(run, exc)
            return
        self.logged_success(run, Succeeded(result).note, elapsed, earlier=after.already_recorded)

    def transacted(self, run: Running, refusal: psycopg.Error | None, elapsed: float) -> None:
        """The handler's ctx.transaction recorded its success (refusal None), or mark_succeeded refused it
        there and the block rolled back: handled as success() handles that refusal (cancelled for QK409,
        else an ignored late result)."""
        self.slots.move(run, "marking")
        if refusal is None:
            self.logged_success(run, "recorded in the handler's transaction", elapsed)
        elif errors.cancel_requested(refusal) and self.cancelled(run, None, elapsed, quiet=True):
            return
        else:
            self.refused(run, refusal)

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

    # -------------------------------------------------------------------------------- snoozes

    def snoozed(self, run: Running, snooze: Snoozed, elapsed: float) -> None:
        """snooze_job for the attempt: the job waits until its time, its attempt given back. What the
        database made of it is logged: `snoozed` with the next run, or `dead` past the job's snooze
        limit, or `cancelled` when a cancel was asked for meanwhile."""
        job = run.job
        try:
            after = self.database.call(f"snooze_job {short(job.id)}", lambda conn: db.snooze_job(
                conn, job_id=job.id, lease_token=job.lease_token, until=snooze.until, delay_ms=snooze.delay_ms))
        except psycopg.Error as exc:
            self.refused(run, exc)
            return
        count, peak = self.slots.free(run)
        tail = f"{' (' + EARLIER_TRY + ')' if after.already_recorded else ''}  (running {count}/{self.slots.cap}, peak {peak})"
        head = f"{run.tag()} in {elapsed:.2f}s"
        fields = {**run.fields(), "duration_ms": ms(elapsed)}
        if after.attempts != job.attempts:  # answered already_recorded, and it has run again since
            self.slots.count("snoozed")
            self.log("snoozed", f"{head}; run again since (now attempt {after.attempts}, {after.status}){tail}",
                     **fields, outcome="snoozed")
        elif after.status == "cancelled":
            self.slots.count("cancelled")
            self.log("cancelled", f"{head}{tail}", **fields, outcome="cancelled")
        elif after.status == "dead":
            self.slots.count("dead")
            self.log("dead", f"{head}: {after.last_error}{tail}", **fields, outcome="dead", error=after.last_error)
        else:
            self.slots.count("snoozed")
            wait = (after.run_at - datetime.now(timezone.utc)).total_seconds()
            self.log("snoozed", f"{head}; next run {clock(after.run_at)} (in {max(0.0, wait):.1f}s){tail}",
                     **fields, outcome="snoozed", next_run_at=iso(after.run_at))

    def refused(self, run: Running, exc: psycopg.Error) -> None:
        count, peak = self.slots.free(run)
        tail = f"  (running {count}/{self.slots.cap}, peak {peak})"
        if errors.is_error(exc, *NOT_HELD):
            self.slots.count("ignored")
            self.log("ignored late result", f"{run.tag()}: {exc.diag.message_primary or first_line(exc)}{tail}",
                     **run.fields(), outcome="ignored", sqlstate=exc.sqlstate,
                     error=exc.diag.message_primary or first_line(exc))
        else:
            # A bug or an unexpected server error: the lease expires and a sweep recovers the job.
            self.log("error", f"{run.tag()}: result not recorded: {exc.sqlstate} {first_line(exc)}{tail}",
                     **run.fields(), outcome="not recorded", sqlstate=exc.sqlstate, error=first_line(exc))
