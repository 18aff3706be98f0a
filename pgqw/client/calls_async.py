"""The async twins of pgqw.client.calls, on an async connection of the caller's (a psycopg
AsyncConnection, an asyncpg connection, a SQLAlchemy AsyncSession or AsyncConnection), in its current
transaction. Each does what its sync twin does, and says so by name."""
from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import psycopg

from .. import connections, db
from ..errors import JobNotFound
from ..schema import qualify as _q
from .calls import FINAL, JobTimeout, one, result_value, translated
from .options import Enqueue, EnqueueOptions, TaskLike, enqueue_statement, in_given_order, many_statement, parse_job_id

if TYPE_CHECKING:
    from typing import Unpack


async def fetch_async(conn: Any, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """calls.fetch on an async connection."""
    try:
        return await connections.fetch_async(conn, sql, params)
    except Exception as exc:
        error = translated(exc, params)
        if error is None:
            raise
        raise error from exc


async def enqueue_async(conn: Any, task: TaskLike | str, payload: Any,
                        **options: Unpack[EnqueueOptions]) -> db.EnqueuedJob:
    """enqueue() on an async connection."""
    return one(await fetch_async(conn, *enqueue_statement(task, payload, options)), db.EnqueuedJob)


async def enqueue_many_async(conn: Any, jobs: Sequence[Enqueue]) -> list[db.EnqueuedJob]:
    """enqueue_many() on an async connection."""
    sql, params, placed = many_statement(jobs)
    return in_given_order([db.EnqueuedJob(**r) for r in await fetch_async(conn, sql, params)], placed)


async def get_job_async(conn: Any, job_id: uuid.UUID | str) -> db.Job | None:
    """get_job() on an async connection."""
    rows = await fetch_async(conn, _q(db.GET_JOB_SQL), {"job_id": parse_job_id(job_id)})
    return db.Job(**rows[0]) if rows else None


async def attempts_async(conn: Any, job_id: uuid.UUID | str) -> list[db.Attempt]:
    """attempts() on an async connection."""
    return [db.Attempt(**r) for r in await fetch_async(conn, _q(db.GET_ATTEMPTS_SQL), {"job_id": parse_job_id(job_id)})]


async def result_async(conn: Any, job_id: uuid.UUID | str) -> Any:
    """result() on an async connection."""
    return result_value(job_id, await fetch_async(conn, _q(db.JOB_RESULT_SQL), {"job_id": parse_job_id(job_id)}))


async def cancel_async(conn: Any, job_id: uuid.UUID | str) -> db.CancelledJob:
    """cancel() on an async connection."""
    return one(await fetch_async(conn, _q(db.CANCEL_JOB_SQL), {"job_id": parse_job_id(job_id)}), db.CancelledJob)


async def retry_async(conn: Any, job_id: uuid.UUID | str, *, extra_attempts: int | None = None) -> db.Job:
    """retry() on an async connection."""
    return one(await fetch_async(conn, _q(db.RETRY_DEAD_SQL), {"job_id": parse_job_id(job_id), "extra": extra_attempts}),
               db.Job)


async def pause_async(conn: Any, queue: str, *, create: bool = False) -> db.QueueRow:
    """pause() on an async connection."""
    return one(await fetch_async(conn, _q(db.PAUSE_QUEUE_SQL), {"queue": queue, "create": create}), db.QueueRow)


async def resume_async(conn: Any, queue: str, *, create: bool = False) -> db.QueueRow:
    """resume() on an async connection."""
    return one(await fetch_async(conn, _q(db.RESUME_QUEUE_SQL), {"queue": queue, "create": create}), db.QueueRow)


async def wait_async(conn: psycopg.AsyncConnection, job_id: uuid.UUID | str, timeout: float) -> db.Job:
    """wait() on an autocommit psycopg AsyncConnection."""
    if not isinstance(conn, psycopg.AsyncConnection):
        raise TypeError("wait_async() needs a psycopg 3 AsyncConnection in autocommit mode (or use Queue.wait_async)")
    if not conn.autocommit:
        raise ValueError("wait_async() needs an autocommit connection")
    wanted = parse_job_id(job_id)
    deadline = time.monotonic() + timeout
    await db.listen_finished_async(conn)
    watching = False
    try:
        try:
            await db.watch_job_async(conn, job_id=wanted)
            watching = True
            await db.watch_job_async(conn, job_id=wanted)
        except psycopg.Error as exc:
            error = translated(exc, {"job_id": wanted})
            if error is None:
                raise
            raise error from exc
        while True:
            job = await db.get_job_async(conn, job_id=wanted)
            if job is None:
                raise JobNotFound(wanted)
            if job.status in FINAL:
                return job
            left = deadline - time.monotonic()
            if left <= 0:
                raise JobTimeout(f"job {wanted} is still {job.status} after {timeout:g} s")
            async for note in conn.notifies(timeout=left, stop_after=1):
                del note
    finally:
        if not conn.closed:
            if watching:
                await db.unwatch_job_async(conn, job_id=wanted)
            await db.unlisten_finished_async(conn)
