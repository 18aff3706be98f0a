"""The client's calls on a connection of the caller's (any that pgqw.connections accepts), in its current
transaction; what they share with their async twins (pgqw.client.calls_async): the final statuses, the
two exceptions of their own, how a refusal becomes pgqw.errors' class, and how a result row is read."""
from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any, Mapping, Sequence, TypeVar

import psycopg

from .. import connections, db
from ..errors import JobNotFound, PgqwError, from_psycopg
from ..results import File
from ..schema import qualify as _q
from .options import Enqueue, EnqueueOptions, TaskLike, enqueue_statement, in_given_order, many_statement, parse_job_id

if TYPE_CHECKING:
    from typing import Unpack

FINAL = db.FINAL  # the final statuses (pgqw.db.models)

R = TypeVar("R")


class JobTimeout(TimeoutError):
    """wait() ran out of time before the job reached a final state."""


class JobNotFinished(LookupError):
    """result() of a job that has not succeeded (yet, or ever): its status says which."""

    def __init__(self, job_id: uuid.UUID | str, status: str) -> None:
        super().__init__(f"job {job_id} has no result: it is {status}")
        self.job_id, self.status = job_id, status


def translated(exc: Exception, params: Mapping[str, Any]) -> PgqwError | None:
    """The project's class for a refusal with one of its SQLSTATEs (a JobNotFound knows its job), else None."""
    error = from_psycopg(exc)
    if isinstance(error, JobNotFound):
        error.job_id = params.get("job_id")
    return error


def fetch(conn: Any, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """connections.fetch, with the project's SQLSTATEs raised as pgqw.errors' classes (the driver's
    error is their __cause__)."""
    try:
        return connections.fetch(conn, sql, params)
    except Exception as exc:
        error = translated(exc, params)
        if error is None:
            raise
        raise error from exc


def one(rows: list[dict[str, Any]], cls: type[R]) -> R:
    assert len(rows) == 1, rows
    return cls(**rows[0])


def result_value(job: uuid.UUID | str, rows: list[dict[str, Any]]) -> Any:
    """A result row (JOB_RESULT_SQL's) as result() returns it."""
    if not rows:
        raise JobNotFound(job)
    row = rows[0]
    if row["status"] != "succeeded":
        raise JobNotFinished(job, row["status"])
    if row["data"] is not None:
        return File(bytes(row["data"]), row["content_type"])
    return row["value"]  # None: the handler returned None


def enqueue(conn: Any, task: TaskLike | str, payload: Any, **options: Unpack[EnqueueOptions]) -> db.EnqueuedJob:
    """Adds one job in the connection's current transaction. Unset options take the task type's
    values, then queue_settings'. Without an idempotency key a random one is made. The same key
    with the same job returns that job (created=False); with a different job, QI409. unique_for:
    the key is unique only within that window (UTC, from the epoch) of run_at, so after it the same
    key makes a new job (stored key `<key>@<window start>`)."""
    return one(fetch(conn, *enqueue_statement(task, payload, options)), db.EnqueuedJob)


def enqueue_many(conn: Any, jobs: Sequence[Enqueue]) -> list[db.EnqueuedJob]:
    """Adds many jobs with one statement (enqueue_jobs); rows come back in input order. An item's parents
    may be items of the same call (Enqueue.after, depends_on): they are sent first."""
    sql, params, placed = many_statement(jobs)
    return in_given_order([db.EnqueuedJob(**r) for r in fetch(conn, sql, params)], placed)


def get_job(conn: Any, job_id: uuid.UUID | str) -> db.Job | None:
    """The job, or None when no job has this id."""
    rows = fetch(conn, _q(db.GET_JOB_SQL), {"job_id": parse_job_id(job_id)})
    return db.Job(**rows[0]) if rows else None


def attempts(conn: Any, job_id: uuid.UUID | str) -> list[db.Attempt]:
    """The job's attempts, first to last (empty for a job not started, or no such job)."""
    return [db.Attempt(**r) for r in fetch(conn, _q(db.GET_ATTEMPTS_SQL), {"job_id": parse_job_id(job_id)})]


def result(conn: Any, job_id: uuid.UUID | str) -> Any:
    """A succeeded job's result: its JSON value, a pgqw.File, or None when the handler returned None.
    JobNotFinished (with .status) when the job has not succeeded; JobNotFound when there is no job."""
    return result_value(job_id, fetch(conn, _q(db.JOB_RESULT_SQL), {"job_id": parse_job_id(job_id)}))


def cancel(conn: Any, job_id: uuid.UUID | str) -> db.CancelledJob:
    """cancel_job: a waiting job ends cancelled at once; a processing one is asked to stop (its status
    stays processing until its worker stops it). JobNotFound no such job; JobStateConflict a job already final."""
    return one(fetch(conn, _q(db.CANCEL_JOB_SQL), {"job_id": parse_job_id(job_id)}), db.CancelledJob)


def retry(conn: Any, job_id: uuid.UUID | str, *, extra_attempts: int | None = None) -> db.Job:
    """retry_dead: a dead job back to pending, with extra_attempts more tries (default 1)."""
    return one(fetch(conn, _q(db.RETRY_DEAD_SQL), {"job_id": parse_job_id(job_id), "extra": extra_attempts}), db.Job)


def pause(conn: Any, queue: str, *, create: bool = False) -> db.QueueRow:
    """pause_queue: no job of the queue starts until resume (running ones finish). A queue not known
    yet is refused (UnknownQueue, QU404) unless create."""
    return one(fetch(conn, _q(db.PAUSE_QUEUE_SQL), {"queue": queue, "create": create}), db.QueueRow)


def resume(conn: Any, queue: str, *, create: bool = False) -> db.QueueRow:
    """resume_queue: the queue's jobs start again."""
    return one(fetch(conn, _q(db.RESUME_QUEUE_SQL), {"queue": queue, "create": create}), db.QueueRow)


def wait(conn: psycopg.Connection, job_id: uuid.UUID | str, timeout: float) -> db.Job:
    """Blocks until the job is final (succeeded, dead, cancelled) and returns it; JobTimeout after
    `timeout` seconds, JobNotFound when there is no such job. LISTENs on the channel the stored
    functions notify when a watched job ends, watches the job (watch_job: only a watched job's end is
    notified), and reads the job once per notification (and once at the start), so it does not poll.
    Needs a psycopg 3 connection in autocommit mode (a notification arrives only outside a
    transaction); Queue.wait has one."""
    if not isinstance(conn, psycopg.Connection):
        raise TypeError("wait() needs a psycopg 3 Connection in autocommit mode (or use Queue.wait)")
    if not conn.autocommit:
        raise ValueError("wait() needs an autocommit connection (notifications arrive between transactions)")
    wanted = parse_job_id(job_id)
    deadline = time.monotonic() + timeout
    db.listen_finished(conn)
    watching = False
    try:
        try:
            # The first call registers; the second, a transaction after it, waits out a completion that
            # was under way before the registration counted (watch_job's header).
            db.watch_job(conn, job_id=wanted)
            watching = True
            db.watch_job(conn, job_id=wanted)
        except psycopg.Error as exc:
            error = translated(exc, {"job_id": wanted})
            if error is None:
                raise
            raise error from exc
        while True:
            job = db.get_job(conn, job_id=wanted)
            if job is None:
                raise JobNotFound(wanted)
            if job.status in FINAL:
                return job
            left = deadline - time.monotonic()
            if left <= 0:
                raise JobTimeout(f"job {wanted} is still {job.status} after {timeout:g} s")
            for note in conn.notifies(timeout=left, stop_after=1):
                del note  # a watched job's end (this one's or another's): read this one again
    finally:
        if not conn.closed:
            if watching:
                db.unwatch_job(conn, job_id=wanted)
            db.unlisten_finished(conn)
