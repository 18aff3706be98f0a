"""pgqw.Queue: the client bound to a pool. Each call is a short transaction of its own (committed when
it returns); Task.defer goes through the default queue, or the caller's transaction when given conn=;
the async twins run on an AsyncConnectionPool."""
from __future__ import annotations

import asyncio
import threading
from typing import Any, Iterator

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from pydantic import BaseModel

import pgqw
from pgqw import client, db
from pgqw.tasks import Registry, register

tasks = Registry()


class Receipt(BaseModel):
    order: int


@tasks.task("send_receipt", queue="receipts")
def send_receipt(payload: Receipt, ctx: Any) -> dict[str, Any]:
    return {"sent": payload.order}


@pytest.fixture(autouse=True)
def _fresh(conn: psycopg.Connection) -> Iterator[None]:
    register(conn, tasks)
    pgqw.Queue._default = None
    yield
    pgqw.Queue._default = None


def _finish(conn: psycopg.Connection) -> None:
    claimed = db.claim_job(conn, worker_id="queue-test", queues=["receipts"])
    assert claimed is not None
    db.mark_succeeded(conn, job_id=claimed.id, lease_token=claimed.lease_token,
                      result=("application/json", {"sent": claimed.payload["order"]}, None))


def test_queue_enqueue_commits_in_its_own_transaction(db_url: str, conn: psycopg.Connection) -> None:
    with pgqw.Queue(db_url) as queue:
        job = queue.enqueue(send_receipt, Receipt(order=1), idempotency_key="q-1")
        assert db.get_job(conn, job_id=job.id).status == "pending"  # visible at once: committed
        assert queue.enqueue(send_receipt, {"order": 1}, idempotency_key="q-1").created is False
        with pytest.raises(client.JobNotFinished):
            queue.result(job.id)
        _finish(conn)
        assert queue.result(job.id) == {"sent": 1}
        assert queue.get_job(job.id).status == "succeeded"
        assert [a.outcome for a in queue.attempts(job.id)] == ["succeeded"]
        other = queue.enqueue("send_receipt", {"order": 2})
        assert queue.cancel(other.id).status == "cancelled"
        assert queue.pause("receipts").paused and not queue.resume("receipts").paused
        many = queue.enqueue_many([client.Enqueue(send_receipt, {"order": n}) for n in (3, 4)])
        assert len(many) == 2 and all(db.get_job(conn, job_id=j.id) for j in many)


def test_queue_defer_uses_the_default_queue_or_the_callers_transaction(db_url: str, conn: psycopg.Connection) -> None:
    queue = pgqw.Queue(db_url)  # the first made is the default
    try:
        assert pgqw.Queue.default() is queue
        job = send_receipt.defer({"order": 5})
        assert db.get_job(conn, job_id=job.id).status == "pending"
        with psycopg.connect(db_url) as mine:
            gone = send_receipt.defer({"order": 6}, conn=mine)
            mine.rollback()
        assert db.get_job(conn, job_id=gone.id) is None
        second = pgqw.Queue(db_url, default=False)
        assert pgqw.Queue.default() is queue
        assert send_receipt.defer({"order": 7}, using=second).created
        second.set_default()
        assert pgqw.Queue.default() is second
        second.close()
    finally:
        queue.close()


def test_queue_default_from_database_url(db_url: str, conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", db_url)
    job = send_receipt.defer({"order": 8})
    assert db.get_job(conn, job_id=job.id).status == "pending"
    pgqw.Queue.default().close()
    monkeypatch.delenv("DATABASE_URL")
    with pytest.raises(RuntimeError, match="pgqw.Queue"):
        send_receipt.defer({"order": 9})


def test_queue_wait_returns_when_the_job_ends(db_url: str, conn: psycopg.Connection) -> None:
    with pgqw.Queue(db_url) as queue:
        job = queue.enqueue(send_receipt, {"order": 10})
        finisher = threading.Timer(0.2, _finish, [conn])
        finisher.start()
        try:
            assert queue.wait(job.id, timeout=10).status == "succeeded"
        finally:
            finisher.join()
        with pytest.raises(client.JobTimeout):
            queue.wait(queue.enqueue(send_receipt, {"order": 11}).id, timeout=0.1)
        assert queue.enqueue(send_receipt, {"order": 12}).created  # the pooled connection is usable after


def test_queue_bound_to_a_pool_leaves_it_open(db_url: str, conn: psycopg.Connection) -> None:
    with ConnectionPool(db_url, min_size=1, max_size=2) as pool:
        with pgqw.Queue(pool) as queue:
            job = queue.enqueue(send_receipt, {"order": 13})
        assert not pool.closed
        with pool.connection() as c:
            assert client.get_job(c, job.id) is not None
        with pytest.raises(TypeError, match="_async"):
            asyncio.run(pgqw.Queue(pool, default=False).enqueue_async(send_receipt, {"order": 14}))


def test_queue_async_pool_and_defer_async(db_url: str, conn: psycopg.Connection) -> None:
    async def main() -> None:
        async with pgqw.Queue(db_url) as queue:
            job = await send_receipt.defer_async({"order": 15})
            assert db.get_job(conn, job_id=job.id).status == "pending"
            finisher = asyncio.get_running_loop().run_in_executor(None, _finish, conn)
            assert (await queue.wait_async(job.id, timeout=10)).status == "succeeded"
            await finisher
            assert await queue.result_async(job.id) == {"sent": 15}
        async with AsyncConnectionPool(db_url, min_size=1, max_size=2, open=False) as pool:
            queue = pgqw.Queue(pool, default=False)
            job = await queue.enqueue_async(send_receipt, {"order": 16})
            assert (await queue.get_job_async(job.id)).status == "pending"
            assert (await queue.cancel_async(job.id)).status == "cancelled"
            with pytest.raises(TypeError, match="AsyncConnectionPool: use the \\*_async methods"):
                queue.enqueue(send_receipt, {"order": 17})

    asyncio.run(main())


@pytest.mark.parametrize("thing", [None, 42, object()])
def test_queue_takes_a_dsn_or_a_pool(thing: Any) -> None:
    with pytest.raises(TypeError, match="connection string or a psycopg_pool"):
        pgqw.Queue(thing)
