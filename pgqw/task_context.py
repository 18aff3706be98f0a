"""What a handler gets besides its payload: the Context of its attempt (the job, its log, whether to
stop, progress, ctx.transaction, its parents' results), and the checks of a progress value.
pgqw.tasks re-exports each of them: import them from there."""
from __future__ import annotations

import json
import logging
import typing
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable

import pydantic
import pydantic_core

from .results import File

if TYPE_CHECKING:
    import psycopg

    from . import db


@dataclass
class Context:
    """What a handler gets besides its payload."""

    job: db.Job
    worker_id: str
    log: logging.LoggerAdapter
    # The worker sets this when the job is to stop early (its lease is gone, shutdown has begun, or the
    # job was cancelled); a long handler may check `ctx.stopping` between steps.
    stop_requested: Callable[[], bool] = lambda: False
    # True once a heartbeat answered that cancel_job asked this job to stop (`ctx.cancelled`).
    cancel_requested: Callable[[], bool] = lambda: False
    # Where ctx.progress sends a progress value, as JSON text (the worker keeps it for the next heartbeat).
    on_progress: Callable[[str], None] = lambda text: None
    # What ctx.transaction opens: a connection in a transaction that records the success at its end.
    open_transaction: Callable[[Any], typing.ContextManager[psycopg.Connection]] | None = None
    # How the context reads the database: read(op, fn) runs fn on a connection of the runner's (the
    # worker's pool, through its retrying call named op; run_jobs' own connection) and answers its return.
    read: Callable[[str, Callable[[psycopg.Connection], Any]], Any] | None = None
    _transacted: bool = field(default=False, init=False, repr=False)

    def progress(self, value: Any) -> None:
        """Reports how far the job got: any JSON value (a pydantic model too) of at most PROGRESS_MAX_BYTES
        as JSON text (else ValueError). The worker writes the latest with its next heartbeat, soon after
        the call, under the attempt's lease token (jobs.progress; null until one is reported)."""
        self.on_progress(progress_json(value))

    def transaction(self, result: Any = None) -> typing.ContextManager[psycopg.Connection]:
        """`with ctx.transaction() as conn:` a psycopg connection in a transaction that also records the
        job's success (mark_succeeded under the attempt's lease token, with `result`) when the block ends
        without error: the block's writes and the success commit together, or not at all. After it the
        job has succeeded: what the handler returns is not stored. Once per attempt (else RuntimeError)."""
        if self.open_transaction is None:
            raise RuntimeError("ctx.transaction() needs a worker or pgqw.testing.run_jobs to run the handler")
        if self._transacted:
            raise RuntimeError("ctx.transaction() may be used once per attempt: the job succeeds at its end")
        self._transacted = True
        return self.open_transaction(result)

    def parent_results(self) -> dict[uuid.UUID, Any]:
        """The results of this job's parents (its depends_on), by parent id: each one's JSON value, a
        File, or None (the handler returned None, or, for a job enqueued with run_anyway, the parent did
        not succeed: ctx.parent_statuses() says how each ended). Empty for a job without parents."""
        return {row.parent_id: parent_value(row) for row in self._parents()}

    def parent_statuses(self) -> dict[uuid.UUID, str]:
        """How each parent ended, by parent id ("succeeded", or with run_anyway also "dead", "cancelled",
        "expired")."""
        return {row.parent_id: row.status for row in self._parents()}

    def _parents(self) -> list[db.ParentResult]:
        if self.read is None:
            raise RuntimeError("ctx.parent_results() needs a worker or pgqw.testing.run_jobs to run the handler")
        from . import db

        job_id = self.job.id
        rows: list[db.ParentResult] = self.read("parent_results", lambda conn: db.parent_results(conn, job_id=job_id))
        return rows

    @property
    def deadline(self) -> datetime | None:
        """When this attempt times out (the database's time: its claim's plus the timeout), or None when
        it has no timeout. At the deadline an async handler is cancelled, a plain one given up on."""
        return self.job.deadline_at

    @property
    def job_id(self) -> uuid.UUID:
        return self.job.id

    @property
    def attempt(self) -> int:
        return self.job.attempts

    @property
    def stopping(self) -> bool:
        return self.stop_requested() or self.cancel_requested()

    @property
    def cancelled(self) -> bool:
        """The job was cancelled: whatever the handler returns or raises now, the attempt ends
        cancelled (a result is not stored)."""
        return self.cancel_requested()


def parent_value(row: db.ParentResult) -> Any:
    """A parent's result as pgqw.client.result reads a result: a File for bytes, else the JSON value (None
    for none, and for a parent that did not succeed)."""
    if row.status != "succeeded":
        return None
    if row.data is not None:
        return File(bytes(row.data), row.content_type or "application/octet-stream")
    return row.result


_ANY: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(Any)
PROGRESS_MAX_BYTES = 8192  # jobs_progress_size: a progress value's JSON text, as heartbeat counts it


def progress_json(value: Any) -> str:
    """A progress value as the JSON text heartbeat stores (ValueError: not JSON, or over PROGRESS_MAX_BYTES).
    Counted with ", " and ": " between items, as the database writes the value out, and non-ASCII escaped, so
    it is never shorter than what the database counts."""
    try:
        text = json.dumps(_ANY.dump_python(value, mode="json"), allow_nan=False)
    except (TypeError, ValueError, pydantic_core.PydanticSerializationError) as exc:
        raise ValueError(f"a progress value must be JSON: {exc}") from None
    if len(text) > PROGRESS_MAX_BYTES:
        raise ValueError(f"a progress value must be at most {PROGRESS_MAX_BYTES} bytes as JSON text, got {len(text)}")
    return text
