"""Enqueue jobs from your application, on your own psycopg connection, inside your own transaction.

    import psycopg
    from pgqw import client
    from myapp.tasks import send_welcome, Welcome

    with psycopg.connect(DATABASE_URL) as conn:          # one transaction
        conn.execute("insert into users ...")
        job = send_welcome.enqueue(conn, Welcome(email="a@example.com"), idempotency_key="welcome-42")
    # committed: the job is visible and a worker is woken; a rollback would have left no job

    done = client.wait(conn2, job.id, timeout=30)        # LISTEN-based, not a tight poll
    client.result(conn2, job.id)                         # the handler's return value

The same with `psycopg.AsyncConnection`: `await send_welcome.enqueue_async(aconn, ...)`,
`await client.wait_async(aconn, job.id, timeout=30)`. A job of a type your code does not import can
be enqueued by name: `client.enqueue(conn, "send_welcome", {"email": ...})` (no payload check here;
the API checks against the registered schema). A type nobody registered is refused by enqueue_job
(psycopg error with sqlstate QT422), as the API refuses it. Every call goes through the stored functions
(pgqw.db); nothing here decides a job's state.

The connection's role needs EXECUTE on enqueue_job / enqueue_jobs (the queue's owner, pgqw_api,
pgqw_admin, or a role granted one of them), SELECT on jobs, job_attempts and job_results to read, and
EXECUTE on watch_job / unwatch_job to wait.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Mapping, Sequence

import psycopg

from . import db
from .tasks import Task

FINAL = ("succeeded", "dead", "cancelled")


class JobTimeout(TimeoutError):
    """wait() ran out of time before the job reached a final state."""


@dataclass(frozen=True)
class Enqueue:
    """One job for enqueue_many: the task (or type name), its payload and options."""

    task: Task[Any] | str
    payload: Any
    idempotency_key: str | None = None
    queue: str | None = None
    priority: int | None = None
    run_at: datetime | None = None
    delay: timedelta | float | None = None
    max_attempts: int | None = None
    unique_for: timedelta | None = None  # the key is unique only within this window of run_at


def _spec(item: Enqueue) -> dict[str, Any]:
    if item.run_at is not None and item.delay is not None:
        raise ValueError("give run_at or delay, not both")
    if item.run_at is not None and item.run_at.tzinfo is None:
        raise ValueError("run_at must be an aware datetime (with a time zone)")
    if isinstance(item.task, Task):
        name, payload = item.task.name, item.task.dump(item.payload)
    else:
        name = item.task
        if not isinstance(item.payload, Mapping):
            raise TypeError(f"the payload of a job enqueued by type name must be a mapping, got "
                            f"{type(item.payload).__name__}")
        payload = dict(item.payload)
    delay = item.delay
    if delay is not None and not isinstance(delay, timedelta):
        delay = timedelta(seconds=float(delay))
    return {
        "type": name, "payload": payload, "idempotency_key": item.idempotency_key or str(uuid.uuid4()),
        "queue": item.queue, "priority": item.priority, "run_at": item.run_at, "delay": delay,
        "max_attempts": item.max_attempts, "unique_for": item.unique_for,
    }


def enqueue(conn: psycopg.Connection, task: Task[Any] | str, payload: Any, *, idempotency_key: str | None = None,
            queue: str | None = None, priority: int | None = None, run_at: datetime | None = None,
            delay: timedelta | float | None = None, max_attempts: int | None = None,
            unique_for: timedelta | None = None) -> db.EnqueuedJob:
    """Adds one job in the connection's current transaction. Unset options take the task type's
    values, then queue_settings'. Without an idempotency key a random one is made. The same key
    with the same job returns that job (created=False); with a different job, QI409. unique_for:
    the key is unique only within that window (UTC, from the epoch) of run_at, so after it the same
    key makes a new job (stored key `<key>@<window start>`)."""
    return db.enqueue_job(conn, **_spec(Enqueue(task, payload, idempotency_key, queue, priority, run_at, delay,
                                                 max_attempts, unique_for)))


def enqueue_many(conn: psycopg.Connection, jobs: Sequence[Enqueue]) -> list[db.EnqueuedJob]:
    """Adds many jobs with one statement (enqueue_jobs); rows come back in input order."""
    return db.enqueue_jobs(conn, jobs=[_spec(j) for j in jobs])


async def enqueue_async(conn: psycopg.AsyncConnection, task: Task[Any] | str, payload: Any, *,
                        idempotency_key: str | None = None, queue: str | None = None, priority: int | None = None,
                        run_at: datetime | None = None, delay: timedelta | float | None = None,
                        max_attempts: int | None = None, unique_for: timedelta | None = None) -> db.EnqueuedJob:
    """enqueue() on an AsyncConnection."""
    return await db.enqueue_job_async(conn, **_spec(Enqueue(task, payload, idempotency_key, queue, priority, run_at,
                                                            delay, max_attempts, unique_for)))


async def enqueue_many_async(conn: psycopg.AsyncConnection, jobs: Sequence[Enqueue]) -> list[db.EnqueuedJob]:
    """enqueue_many() on an AsyncConnection."""
    return await db.enqueue_jobs_async(conn, jobs=[_spec(j) for j in jobs])


def get_job(conn: psycopg.Connection, job_id: uuid.UUID | str) -> db.Job | None:
    return db.get_job(conn, job_id=job_id)


def attempts(conn: psycopg.Connection, job_id: uuid.UUID | str) -> list[db.Attempt]:
    return db.get_attempts(conn, job_id=job_id)


def result(conn: psycopg.Connection, job_id: uuid.UUID | str) -> Any:
    """The job's result: its JSON value, or a pgqw.tasks.File; None when it has none (yet)."""
    return _result_value(db.get_result(conn, job_id=job_id))


async def result_async(conn: psycopg.AsyncConnection, job_id: uuid.UUID | str) -> Any:
    return _result_value(await db.get_result_async(conn, job_id=job_id))


def _result_value(found: db.Result | None) -> Any:
    if found is None:
        return None
    if found.data is not None:
        from .tasks import File

        return File(bytes(found.data), found.content_type)
    return found.value


def wait(conn: psycopg.Connection, job_id: uuid.UUID | str, timeout: float) -> db.Job:
    """Blocks until the job is final (succeeded, dead, cancelled) and returns it; JobTimeout after
    `timeout` seconds. LISTENs on the channel the stored functions notify when a watched job ends,
    watches the job (watch_job: only a watched job's end is notified), and reads the job once per
    notification (and once at the start), so it does not poll. The connection must be in autocommit
    mode (a notification arrives only outside a transaction)."""
    if not conn.autocommit:
        raise ValueError("wait() needs an autocommit connection (notifications arrive between transactions)")
    deadline = time.monotonic() + timeout
    db.listen_finished(conn)
    watching = False
    try:
        try:
            # The first call registers; the second, a transaction after it, waits out a completion that
            # was under way before the registration counted (watch_job's header).
            db.watch_job(conn, job_id=job_id)
            watching = True
            db.watch_job(conn, job_id=job_id)
        except psycopg.Error as exc:
            if exc.sqlstate == "QN404":
                raise LookupError(f"no job {job_id}") from None
            raise
        while True:
            job = db.get_job(conn, job_id=job_id)
            if job is None:
                raise LookupError(f"no job {job_id}")
            if job.status in FINAL:
                return job
            left = deadline - time.monotonic()
            if left <= 0:
                raise JobTimeout(f"job {job_id} is still {job.status} after {timeout:g} s")
            for note in conn.notifies(timeout=left, stop_after=1):
                del note  # a watched job's end (this one's or another's): read this one again
    finally:
        if not conn.closed:
            if watching:
                db.unwatch_job(conn, job_id=job_id)
            db.unlisten_finished(conn)


async def wait_async(conn: psycopg.AsyncConnection, job_id: uuid.UUID | str, timeout: float) -> db.Job:
    """wait() on an autocommit AsyncConnection."""
    if not conn.autocommit:
        raise ValueError("wait_async() needs an autocommit connection")
    deadline = time.monotonic() + timeout
    await db.listen_finished_async(conn)
    watching = False
    try:
        try:
            # The first call registers; the second, a transaction after it, waits out a completion that
            # was under way before the registration counted (watch_job's header).
            await db.watch_job_async(conn, job_id=job_id)
            watching = True
            await db.watch_job_async(conn, job_id=job_id)
        except psycopg.Error as exc:
            if exc.sqlstate == "QN404":
                raise LookupError(f"no job {job_id}") from None
            raise
        while True:
            job = await db.get_job_async(conn, job_id=job_id)
            if job is None:
                raise LookupError(f"no job {job_id}")
            if job.status in FINAL:
                return job
            left = deadline - time.monotonic()
            if left <= 0:
                raise JobTimeout(f"job {job_id} is still {job.status} after {timeout:g} s")
            async for note in conn.notifies(timeout=left, stop_after=1):
                del note
    finally:
        if not conn.closed:
            if watching:
                await db.unwatch_job_async(conn, job_id=job_id)
            await db.unlisten_finished_async(conn)
