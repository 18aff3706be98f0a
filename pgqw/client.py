"""Enqueue jobs from your application, in your own transaction, on the connection you already have.

    from pgqw import client
    from myapp.tasks import send_welcome, Welcome

    with psycopg.connect(DATABASE_URL) as conn:          # one transaction
        conn.execute("insert into users ...")
        job = send_welcome.enqueue(conn, Welcome(email="a@example.com"), idempotency_key="welcome-42")
    # committed: the job is visible and a worker is woken; a rollback would have left no job

    done = client.wait(conn2, job.id, timeout=30)        # LISTEN-based, not a tight poll
    client.result(conn2, job.id)                         # the handler's return value

`conn` is any connection pgqw.connections accepts: psycopg 3, psycopg2, django.db.connection, a
SQLAlchemy Session or Connection (and for the *_async twins a psycopg AsyncConnection, an asyncpg
connection, a SQLAlchemy AsyncSession or AsyncConnection); the statements run in its current
transaction. Without a connection of your own, a Queue (below) binds a pool: `queue.enqueue(...)` and
`send_welcome.defer(...)` enqueue in a short transaction of their own.

A job of a type your code does not import can be enqueued by name: `client.enqueue(conn,
"send_welcome", {"email": ...})` (no payload check here). A type nobody registered is refused by
enqueue_job (pgqw.errors.UnknownTaskType, sqlstate QT422). Every call goes through the stored
functions (pgqw.db's statements); nothing here decides a job's state.

A call the database refuses with one of the project's SQLSTATEs raises pgqw.errors' class for it, a
PgqwError with `.sqlstate` and the driver's error as __cause__ (whichever driver the connection is on):
JobNotFound (QN404), JobStateConflict (QS409: cancel of a finished job, retry of one not dead),
UnknownQueue (QU404), UnknownTaskType (QT422), IdempotencyConflict (QI409), InvalidArgument (QV400),
and PgqwError itself for the rest (QV413, QI422, ...). Other database errors are the driver's own.

The connection's role needs EXECUTE on the functions it calls (enqueue_job(s), cancel_job, retry_dead,
pause_queue, resume_queue: the queue's owner, pgqw_api, pgqw_admin, or a role granted one of them),
SELECT on jobs, job_attempts and job_results to read, and EXECUTE on watch_job / unwatch_job to wait.
"""
from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Mapping, Sequence, TypedDict, TypeVar

import psycopg

from . import connections, db
from .errors import JobNotFound, PgqwError, from_psycopg
from .schema import qualify as _q
from .tasks import File, Task

if TYPE_CHECKING:
    from typing import Unpack

    from psycopg_pool import AsyncConnectionPool, ConnectionPool

# The final statuses (the rest of db.STATUSES is a job still in flight).
FINAL = ("succeeded", "dead", "cancelled")

R = TypeVar("R")


class JobTimeout(TimeoutError):
    """wait() ran out of time before the job reached a final state."""


class JobNotFinished(LookupError):
    """result() of a job that has not succeeded (yet, or ever): its status says which."""

    def __init__(self, job_id: uuid.UUID | str, status: str) -> None:
        super().__init__(f"job {job_id} has no result: it is {status}")
        self.job_id, self.status = job_id, status


class EnqueueOptions(TypedDict, total=False):
    """The options of every enqueue call, as keyword arguments."""

    idempotency_key: str         # default: a random one (no deduplication)
    queue: str                   # default: the task type's, then 'default'
    priority: int                # default: the task type's, then 0; higher runs first
    run_at: datetime             # aware; or delay, not both
    delay: timedelta | float     # seconds, counted on the database's clock
    max_attempts: int            # default: the task type's, then queue_settings'
    unique_for: timedelta        # the key is unique only within this window of run_at


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


_OPTION_TYPES: dict[str, tuple[type, ...]] = {
    "idempotency_key": (str,), "queue": (str,), "priority": (int,), "run_at": (datetime,),
    "delay": (timedelta, int, float), "max_attempts": (int,), "unique_for": (timedelta,),
}


def _spec(item: Enqueue) -> dict[str, Any]:
    for name, kinds in _OPTION_TYPES.items():
        value = getattr(item, name)
        if value is not None and (not isinstance(value, kinds) or isinstance(value, bool)):
            wanted = " or ".join(k.__name__ for k in kinds)
            raise TypeError(f"{name} must be {wanted}, got {type(value).__name__}")
    if item.run_at is not None and item.delay is not None:
        raise ValueError("give run_at or delay, not both")
    if item.run_at is not None and item.run_at.tzinfo is None:
        raise ValueError("run_at must be an aware datetime (with a time zone)")
    if isinstance(item.task, Task):
        name, payload = item.task.name, item.task.dump(item.payload)
    elif isinstance(item.task, str):
        name = item.task
        if not isinstance(item.payload, Mapping):
            raise TypeError(f"the payload of a job enqueued by type name must be a mapping, got "
                            f"{type(item.payload).__name__}")
        payload = dict(item.payload)
    else:
        raise TypeError(f"a job's task is a pgqw Task or a type name, got {type(item.task).__name__}")
    delay = item.delay
    if delay is not None and not isinstance(delay, timedelta):
        delay = timedelta(seconds=float(delay))
    return {
        "type": name, "payload": payload, "idempotency_key": item.idempotency_key or str(uuid.uuid4()),
        "queue": item.queue, "priority": item.priority, "run_at": item.run_at, "delay": delay,
        "max_attempts": item.max_attempts, "unique_for": item.unique_for,
    }


def _job_id(job_id: uuid.UUID | str) -> uuid.UUID:
    """A job id as given (a UUID, or its text), or a ValueError naming what was given, before the database."""
    if isinstance(job_id, uuid.UUID):
        return job_id
    try:
        return uuid.UUID(str(job_id))
    except ValueError:
        raise ValueError(f"a job id is a UUID, got {job_id!r}") from None


def _translated(exc: Exception, params: Mapping[str, Any]) -> PgqwError | None:
    error = from_psycopg(exc)
    if isinstance(error, JobNotFound):
        error.job_id = params.get("job_id")
    return error


def _fetch(conn: Any, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """connections.fetch, with the project's SQLSTATEs raised as pgqw.errors' classes (the driver's
    error is their __cause__)."""
    try:
        return connections.fetch(conn, sql, params)
    except Exception as exc:
        error = _translated(exc, params)
        if error is None:
            raise
        raise error from exc


async def _fetch_async(conn: Any, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
    try:
        return await connections.fetch_async(conn, sql, params)
    except Exception as exc:
        error = _translated(exc, params)
        if error is None:
            raise
        raise error from exc


def _one(rows: list[dict[str, Any]], cls: type[R]) -> R:
    assert len(rows) == 1, rows
    return cls(**rows[0])


# ---- the statements, on any accepted connection ----

def _enqueue_statement(spec: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return _q(db.ENQUEUE_JOB_SQL), db.enqueue_params(**spec)


def enqueue(conn: Any, task: Task[Any] | str, payload: Any, **options: Unpack[EnqueueOptions]) -> db.EnqueuedJob:
    """Adds one job in the connection's current transaction. Unset options take the task type's
    values, then queue_settings'. Without an idempotency key a random one is made. The same key
    with the same job returns that job (created=False); with a different job, QI409. unique_for:
    the key is unique only within that window (UTC, from the epoch) of run_at, so after it the same
    key makes a new job (stored key `<key>@<window start>`)."""
    return _one(_fetch(conn, *_enqueue_statement(_spec(Enqueue(task, payload, **options)))),
                db.EnqueuedJob)


async def enqueue_async(conn: Any, task: Task[Any] | str, payload: Any,
                        **options: Unpack[EnqueueOptions]) -> db.EnqueuedJob:
    """enqueue() on an async connection."""
    return _one(await _fetch_async(conn, *_enqueue_statement(_spec(Enqueue(task, payload, **options)))),
                db.EnqueuedJob)


def _many_statement(jobs: Sequence[Enqueue]) -> tuple[str, dict[str, Any]]:
    return _q(db.ENQUEUE_JOBS_SQL), {"jobs": db.jobs_json([_spec(j) for j in jobs])}


def enqueue_many(conn: Any, jobs: Sequence[Enqueue]) -> list[db.EnqueuedJob]:
    """Adds many jobs with one statement (enqueue_jobs); rows come back in input order."""
    return [db.EnqueuedJob(**r) for r in _fetch(conn, *_many_statement(jobs))]


async def enqueue_many_async(conn: Any, jobs: Sequence[Enqueue]) -> list[db.EnqueuedJob]:
    """enqueue_many() on an async connection."""
    return [db.EnqueuedJob(**r) for r in await _fetch_async(conn, *_many_statement(jobs))]


def get_job(conn: Any, job_id: uuid.UUID | str) -> db.Job | None:
    """The job, or None when no job has this id."""
    rows = _fetch(conn, _q(db.GET_JOB_SQL), {"job_id": _job_id(job_id)})
    return db.Job(**rows[0]) if rows else None


async def get_job_async(conn: Any, job_id: uuid.UUID | str) -> db.Job | None:
    """get_job() on an async connection."""
    rows = await _fetch_async(conn, _q(db.GET_JOB_SQL), {"job_id": _job_id(job_id)})
    return db.Job(**rows[0]) if rows else None


def attempts(conn: Any, job_id: uuid.UUID | str) -> list[db.Attempt]:
    """The job's attempts, first to last (empty for a job not started, or no such job)."""
    return [db.Attempt(**r) for r in _fetch(conn, _q(db.GET_ATTEMPTS_SQL), {"job_id": _job_id(job_id)})]


async def attempts_async(conn: Any, job_id: uuid.UUID | str) -> list[db.Attempt]:
    """attempts() on an async connection."""
    return [db.Attempt(**r) for r in await _fetch_async(conn, _q(db.GET_ATTEMPTS_SQL), {"job_id": _job_id(job_id)})]


def _result(job_id: uuid.UUID | str, rows: list[dict[str, Any]]) -> Any:
    if not rows:
        raise JobNotFound(job_id)
    row = rows[0]
    if row["status"] != "succeeded":
        raise JobNotFinished(job_id, row["status"])
    if row["data"] is not None:
        return File(bytes(row["data"]), row["content_type"])
    return row["value"]  # None: the handler returned None


def result(conn: Any, job_id: uuid.UUID | str) -> Any:
    """A succeeded job's result: its JSON value, a pgqw.File, or None when the handler returned None.
    JobNotFinished (with .status) when the job has not succeeded; JobNotFound when there is no job."""
    return _result(job_id, _fetch(conn, _q(db.JOB_RESULT_SQL), {"job_id": _job_id(job_id)}))


async def result_async(conn: Any, job_id: uuid.UUID | str) -> Any:
    """result() on an async connection."""
    return _result(job_id, await _fetch_async(conn, _q(db.JOB_RESULT_SQL), {"job_id": _job_id(job_id)}))


def cancel(conn: Any, job_id: uuid.UUID | str) -> db.CancelledJob:
    """cancel_job: a waiting job ends cancelled at once; a processing one is asked to stop (its status
    stays processing until its worker stops it). JobNotFound no such job; JobStateConflict a job already final."""
    return _one(_fetch(conn, _q(db.CANCEL_JOB_SQL), {"job_id": _job_id(job_id)}), db.CancelledJob)


async def cancel_async(conn: Any, job_id: uuid.UUID | str) -> db.CancelledJob:
    """cancel() on an async connection."""
    return _one(await _fetch_async(conn, _q(db.CANCEL_JOB_SQL), {"job_id": _job_id(job_id)}), db.CancelledJob)


def retry(conn: Any, job_id: uuid.UUID | str, *, extra_attempts: int | None = None) -> db.Job:
    """retry_dead: a dead job back to pending, with extra_attempts more tries (default 1)."""
    return _one(_fetch(conn, _q(db.RETRY_DEAD_SQL), {"job_id": _job_id(job_id), "extra": extra_attempts}), db.Job)


async def retry_async(conn: Any, job_id: uuid.UUID | str, *, extra_attempts: int | None = None) -> db.Job:
    """retry() on an async connection."""
    return _one(await _fetch_async(conn, _q(db.RETRY_DEAD_SQL), {"job_id": _job_id(job_id), "extra": extra_attempts}),
                db.Job)


def pause(conn: Any, queue: str, *, create: bool = False) -> db.QueueRow:
    """pause_queue: no job of the queue starts until resume (running ones finish). A queue not known
    yet is refused (UnknownQueue, QU404) unless create."""
    return _one(_fetch(conn, _q(db.PAUSE_QUEUE_SQL), {"queue": queue, "create": create}), db.QueueRow)


async def pause_async(conn: Any, queue: str, *, create: bool = False) -> db.QueueRow:
    """pause() on an async connection."""
    return _one(await _fetch_async(conn, _q(db.PAUSE_QUEUE_SQL), {"queue": queue, "create": create}),
                db.QueueRow)


def resume(conn: Any, queue: str, *, create: bool = False) -> db.QueueRow:
    """resume_queue: the queue's jobs start again."""
    return _one(_fetch(conn, _q(db.RESUME_QUEUE_SQL), {"queue": queue, "create": create}), db.QueueRow)


async def resume_async(conn: Any, queue: str, *, create: bool = False) -> db.QueueRow:
    """resume() on an async connection."""
    return _one(await _fetch_async(conn, _q(db.RESUME_QUEUE_SQL), {"queue": queue, "create": create}),
                db.QueueRow)


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
    job_id = _job_id(job_id)
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
            error = _translated(exc, {"job_id": _job_id(job_id)})
            if error is None:
                raise
            raise error from exc
        while True:
            job = db.get_job(conn, job_id=job_id)
            if job is None:
                raise JobNotFound(job_id)
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
    """wait() on an autocommit psycopg AsyncConnection."""
    if not isinstance(conn, psycopg.AsyncConnection):
        raise TypeError("wait_async() needs a psycopg 3 AsyncConnection in autocommit mode (or use Queue.wait_async)")
    if not conn.autocommit:
        raise ValueError("wait_async() needs an autocommit connection")
    job_id = _job_id(job_id)
    deadline = time.monotonic() + timeout
    await db.listen_finished_async(conn)
    watching = False
    try:
        try:
            await db.watch_job_async(conn, job_id=job_id)
            watching = True
            await db.watch_job_async(conn, job_id=job_id)
        except psycopg.Error as exc:
            error = _translated(exc, {"job_id": _job_id(job_id)})
            if error is None:
                raise
            raise error from exc
        while True:
            job = await db.get_job_async(conn, job_id=job_id)
            if job is None:
                raise JobNotFound(job_id)
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


# ---- a queue bound to a pool ----

class Queue:
    """The client bound to a connection pool, for code that has no transaction of its own to join:

        queue = pgqw.Queue(os.environ["DATABASE_URL"])    # or a psycopg_pool (Async)ConnectionPool
        job = queue.enqueue(send_receipt, {"order": 42})   # its own short transaction, committed
        send_receipt.defer({"order": 42})                  # the same, through the default queue
        await send_receipt.defer_async({"order": 42})      # on an AsyncConnectionPool
        queue.wait(job.id, timeout=30); queue.result(job.id)

    Given a DSN it makes a ConnectionPool on first sync use and an AsyncConnectionPool on first async
    use (in the running event loop), both closed by close() or `with`. Given a pool, it borrows from it
    and leaves closing it to its owner. Every method runs in a transaction of its own, committed
    when the method returns; to enqueue in your transaction, pass your connection (`conn=`) or call
    pgqw.client directly. The first Queue made is the default one that Task.defer uses (default=False
    makes one that is not; set_default() makes it so), and with no Queue made at all, defer makes one
    from DATABASE_URL."""

    _default: Queue | None = None
    _default_lock = threading.Lock()

    def __init__(self, dsn_or_pool: Any, *, max_size: int = 4, default: bool = True) -> None:
        from psycopg_pool import AsyncConnectionPool, ConnectionPool

        self._dsn: str | None = None
        self._pool: ConnectionPool | None = None
        self._apool: AsyncConnectionPool | None = None
        self._owned = isinstance(dsn_or_pool, str)
        if isinstance(dsn_or_pool, ConnectionPool):
            self._pool = dsn_or_pool
        elif isinstance(dsn_or_pool, AsyncConnectionPool):
            self._apool = dsn_or_pool
        elif isinstance(dsn_or_pool, str):
            self._dsn = dsn_or_pool
        else:
            raise TypeError("pgqw.Queue takes a connection string or a psycopg_pool ConnectionPool or "
                            f"AsyncConnectionPool, got {type(dsn_or_pool).__name__}")
        self.max_size = max_size
        self._lock = threading.Lock()
        if default:
            with Queue._default_lock:
                if Queue._default is None:
                    Queue._default = self

    # -- the default queue --
    def set_default(self) -> Queue:
        """This queue is the one Task.defer uses from now on."""
        with Queue._default_lock:
            Queue._default = self
        return self

    @classmethod
    def default(cls) -> Queue:
        """The default queue: the first made (or set_default's), else one made now from DATABASE_URL."""
        with cls._default_lock:
            if cls._default is None:
                from .config import load

                url = load().database_url
                if not url:
                    raise RuntimeError("no pgqw.Queue is made and DATABASE_URL is not set: make one with "
                                       "pgqw.Queue(dsn), or pass conn= to use your own connection")
                cls._default = cls(url, default=False)
            return cls._default

    # -- pools --
    def _kwargs(self) -> dict[str, Any]:
        from . import config, connect

        assert self._dsn is not None
        return connect.connect_kwargs(self._dsn, config.load(), application_name="pgqw-client")

    def _sync_pool(self) -> ConnectionPool:
        from psycopg_pool import ConnectionPool

        with self._lock:
            if self._pool is None:
                if self._dsn is None:
                    raise TypeError("this Queue is bound to an AsyncConnectionPool: use the *_async methods")
                self._pool = ConnectionPool(self._dsn, min_size=1, max_size=self.max_size, kwargs=self._kwargs(),
                                            open=True, name="pgqw-client")
            return self._pool

    async def _async_pool(self) -> AsyncConnectionPool:
        from psycopg_pool import AsyncConnectionPool

        if self._apool is None:
            if self._dsn is None:
                raise TypeError("this Queue is bound to a ConnectionPool: use the methods without _async")
            pool = AsyncConnectionPool(self._dsn, min_size=1, max_size=self.max_size, kwargs=self._kwargs(),
                                       open=False, name="pgqw-client-async")
            await pool.open()
            self._apool = pool
        return self._apool

    def close(self) -> None:
        """Closes the pools this queue made (a pool it was given is its owner's to close)."""
        if self._owned and self._pool is not None:
            self._pool.close()
        with Queue._default_lock:
            if Queue._default is self:
                Queue._default = None

    async def close_async(self) -> None:
        if self._owned and self._apool is not None:
            await self._apool.close()
        self.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Queue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close_async()

    # -- the client's calls, each in a transaction of its own --
    def enqueue(self, task: Task[Any] | str, payload: Any, **options: Unpack[EnqueueOptions]) -> db.EnqueuedJob:
        with self._sync_pool().connection() as conn:
            return enqueue(conn, task, payload, **options)

    async def enqueue_async(self, task: Task[Any] | str, payload: Any,
                            **options: Unpack[EnqueueOptions]) -> db.EnqueuedJob:
        async with (await self._async_pool()).connection() as conn:
            return await enqueue_async(conn, task, payload, **options)

    def enqueue_many(self, jobs: Sequence[Enqueue]) -> list[db.EnqueuedJob]:
        with self._sync_pool().connection() as conn:
            return enqueue_many(conn, jobs)

    async def enqueue_many_async(self, jobs: Sequence[Enqueue]) -> list[db.EnqueuedJob]:
        async with (await self._async_pool()).connection() as conn:
            return await enqueue_many_async(conn, jobs)

    def get_job(self, job_id: uuid.UUID | str) -> db.Job | None:
        with self._sync_pool().connection() as conn:
            return get_job(conn, job_id)

    async def get_job_async(self, job_id: uuid.UUID | str) -> db.Job | None:
        async with (await self._async_pool()).connection() as conn:
            return await get_job_async(conn, job_id)

    def attempts(self, job_id: uuid.UUID | str) -> list[db.Attempt]:
        with self._sync_pool().connection() as conn:
            return attempts(conn, job_id)

    async def attempts_async(self, job_id: uuid.UUID | str) -> list[db.Attempt]:
        async with (await self._async_pool()).connection() as conn:
            return await attempts_async(conn, job_id)

    def result(self, job_id: uuid.UUID | str) -> Any:
        with self._sync_pool().connection() as conn:
            return result(conn, job_id)

    async def result_async(self, job_id: uuid.UUID | str) -> Any:
        async with (await self._async_pool()).connection() as conn:
            return await result_async(conn, job_id)

    def cancel(self, job_id: uuid.UUID | str) -> db.CancelledJob:
        with self._sync_pool().connection() as conn:
            return cancel(conn, job_id)

    async def cancel_async(self, job_id: uuid.UUID | str) -> db.CancelledJob:
        async with (await self._async_pool()).connection() as conn:
            return await cancel_async(conn, job_id)

    def retry(self, job_id: uuid.UUID | str, *, extra_attempts: int | None = None) -> db.Job:
        with self._sync_pool().connection() as conn:
            return retry(conn, job_id, extra_attempts=extra_attempts)

    async def retry_async(self, job_id: uuid.UUID | str, *, extra_attempts: int | None = None) -> db.Job:
        async with (await self._async_pool()).connection() as conn:
            return await retry_async(conn, job_id, extra_attempts=extra_attempts)

    def pause(self, queue: str, *, create: bool = False) -> db.QueueRow:
        with self._sync_pool().connection() as conn:
            return pause(conn, queue, create=create)

    async def pause_async(self, queue: str, *, create: bool = False) -> db.QueueRow:
        async with (await self._async_pool()).connection() as conn:
            return await pause_async(conn, queue, create=create)

    def resume(self, queue: str, *, create: bool = False) -> db.QueueRow:
        with self._sync_pool().connection() as conn:
            return resume(conn, queue, create=create)

    async def resume_async(self, queue: str, *, create: bool = False) -> db.QueueRow:
        async with (await self._async_pool()).connection() as conn:
            return await resume_async(conn, queue, create=create)

    def wait(self, job_id: uuid.UUID | str, timeout: float) -> db.Job:
        """wait() on a pooled connection, in autocommit for its duration."""
        with self._sync_pool().connection() as conn:
            conn.autocommit = True
            try:
                return wait(conn, job_id, timeout)
            finally:
                if not conn.closed:
                    conn.autocommit = False

    async def wait_async(self, job_id: uuid.UUID | str, timeout: float) -> db.Job:
        async with (await self._async_pool()).connection() as conn:
            await conn.set_autocommit(True)
            try:
                return await wait_async(conn, job_id, timeout)
            finally:
                if not conn.closed:
                    await conn.set_autocommit(False)
