"""Queue: the client bound to a connection pool, each call in a short transaction of its own; the default
queue Task.defer enqueues through."""
from __future__ import annotations

import threading
import uuid
from typing import TYPE_CHECKING, Any, Sequence

from .. import db
from .calls import attempts, cancel, enqueue, enqueue_many, get_job, pause, result, resume, retry, wait
from .calls_async import (
    attempts_async,
    cancel_async,
    enqueue_async,
    enqueue_many_async,
    get_job_async,
    pause_async,
    result_async,
    resume_async,
    retry_async,
    wait_async,
)
from .options import Enqueue, EnqueueOptions, TaskLike
from .orchestration import (
    EnqueuedBatch,
    EnqueuedWorkflow,
    Workflow,
    cancel_jobs,
    cancel_jobs_async,
    enqueue_batch,
    enqueue_batch_async,
    get_batch,
    get_batch_async,
    get_workflow,
    get_workflow_async,
    retry_dead_jobs,
    retry_dead_jobs_async,
)

if TYPE_CHECKING:
    from typing import Unpack

    from psycopg_pool import AsyncConnectionPool, ConnectionPool


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
                from ..config import load

                url = load().database_url
                if not url:
                    raise RuntimeError("no pgqw.Queue is made and DATABASE_URL is not set: make one with "
                                       "pgqw.Queue(dsn), or pass conn= to use your own connection")
                cls._default = cls(url, default=False)
            return cls._default

    # -- pools --
    def _kwargs(self) -> dict[str, Any]:
        from .. import config, connect

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
    def enqueue(self, task: TaskLike | str, payload: Any, **options: Unpack[EnqueueOptions]) -> db.EnqueuedJob:
        with self._sync_pool().connection() as conn:
            return enqueue(conn, task, payload, **options)

    async def enqueue_async(self, task: TaskLike | str, payload: Any,
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

    def enqueue_workflow(self, flow: Workflow) -> EnqueuedWorkflow:
        with self._sync_pool().connection() as conn:
            return flow.enqueue(conn)

    async def enqueue_workflow_async(self, flow: Workflow) -> EnqueuedWorkflow:
        async with (await self._async_pool()).connection() as conn:
            return await flow.enqueue_async(conn)

    def enqueue_batch(self, items: Sequence[Enqueue], *, callback: Enqueue | None = None,
                      idempotency_key: str | None = None) -> EnqueuedBatch:
        with self._sync_pool().connection() as conn:
            return enqueue_batch(conn, items, callback=callback, idempotency_key=idempotency_key)

    async def enqueue_batch_async(self, items: Sequence[Enqueue], *, callback: Enqueue | None = None,
                                  idempotency_key: str | None = None) -> EnqueuedBatch:
        async with (await self._async_pool()).connection() as conn:
            return await enqueue_batch_async(conn, items, callback=callback, idempotency_key=idempotency_key)

    def get_workflow(self, workflow_id: uuid.UUID | str) -> list[db.WorkflowJob] | None:
        with self._sync_pool().connection() as conn:
            return get_workflow(conn, workflow_id)

    async def get_workflow_async(self, workflow_id: uuid.UUID | str) -> list[db.WorkflowJob] | None:
        async with (await self._async_pool()).connection() as conn:
            return await get_workflow_async(conn, workflow_id)

    def get_batch(self, batch_id: uuid.UUID | str) -> db.BatchStatus | None:
        with self._sync_pool().connection() as conn:
            return get_batch(conn, batch_id)

    async def get_batch_async(self, batch_id: uuid.UUID | str) -> db.BatchStatus | None:
        async with (await self._async_pool()).connection() as conn:
            return await get_batch_async(conn, batch_id)

    def retry_dead_jobs(self, **filters: Any) -> int:
        """retry_dead_jobs() on a pooled connection: each bounded call is committed on its own."""
        with self._sync_pool().connection() as conn:
            return retry_dead_jobs(conn, **filters)

    async def retry_dead_jobs_async(self, **filters: Any) -> int:
        """retry_dead_jobs_async() on a pooled connection: each bounded call is committed on its own."""
        async with (await self._async_pool()).connection() as conn:
            return await retry_dead_jobs_async(conn, **filters)

    def cancel_jobs(self, **filters: Any) -> int:
        """cancel_jobs() on a pooled connection: each bounded call is committed on its own."""
        with self._sync_pool().connection() as conn:
            return cancel_jobs(conn, **filters)

    async def cancel_jobs_async(self, **filters: Any) -> int:
        """cancel_jobs_async() on a pooled connection: each bounded call is committed on its own."""
        async with (await self._async_pool()).connection() as conn:
            return await cancel_jobs_async(conn, **filters)

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
