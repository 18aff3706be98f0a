"""The connection an application already has (pgqw.connections), against the real PostgreSQL: for each
driver, an enqueue in a transaction that rolls back leaves no job; one that commits makes the job
visible and wakes a worker (the queue's notification); the client reads the job, its attempts and its
result back through the same kind of connection; and anything else is a TypeError naming what is
accepted."""
from __future__ import annotations

import asyncio
import uuid
from typing import Any, Awaitable, Callable, Iterator

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from pydantic import BaseModel

from pgqw import client, connections, db
from pgqw.errors import UnknownTaskType
from pgqw.tasks import Registry, register
from tests.helpers import listen_waiting

tasks = Registry()


class Receipt(BaseModel):
    order: int


@tasks.task("send_receipt", queue="receipts")
def send_receipt(payload: Receipt, ctx: Any) -> dict[str, Any]:
    return {"sent": payload.order}


@pytest.fixture(autouse=True)
def _registered(conn: psycopg.Connection) -> None:
    register(conn, tasks)


@pytest.fixture
def listener(connect: Callable[[], psycopg.Connection]) -> psycopg.Connection:
    """An autocommit connection that LISTENs as a worker does."""
    c = connect()
    listen_waiting(c)
    return c


def _woken(listener: psycopg.Connection) -> list[str]:
    return [n.payload for n in listener.notifies(timeout=2, stop_after=1)]


def _not_woken(listener: psycopg.Connection) -> None:
    assert list(listener.notifies(timeout=0.05, stop_after=1)) == []


def _finish(conn: psycopg.Connection, job_id: uuid.UUID) -> None:
    claimed = db.claim_job(conn, worker_id="connections-test", queues=["receipts"])
    assert claimed is not None and claimed.id == job_id
    db.mark_succeeded(conn, job_id=claimed.id, lease_token=claimed.lease_token,
                      result=("application/json", {"sent": 1}, None))


def _sqlalchemy_url(db_url: str, driver: str) -> str:
    """The test database as SQLAlchemy's URL; a Unix socket's folder (the embedded server's) as ?host=."""
    from sqlalchemy.engine import URL

    parts = conninfo_to_dict(db_url)
    host = str(parts.get("host") or "")
    socket = host.startswith("/")
    return URL.create(f"postgresql+{driver}", username=parts.get("user"), password=parts.get("password"),
                      host=None if socket else host or None,
                      port=int(parts["port"]) if parts.get("port") else None, database=parts.get("dbname"),
                      query={"host": host} if socket else {}).render_as_string(hide_password=False)


def _asyncpg_params(db_url: str) -> dict[str, Any]:
    parts = conninfo_to_dict(db_url)
    return {k: v for k, v in {"host": parts.get("host"), "port": int(parts["port"]) if parts.get("port") else None,
                              "user": parts.get("user"), "password": parts.get("password"),
                              "database": parts.get("dbname")}.items() if v}


def _check_sync(conn: psycopg.Connection, listener: psycopg.Connection, commit_after: Callable[[Any], None],
                make: Callable[[], Any], rollback: Callable[[Any], None]) -> None:
    """The shared steps: rolled back → no job, nobody woken; committed → the job, a worker woken; read back."""
    handle = make()
    gone = send_receipt.enqueue(handle, Receipt(order=1), idempotency_key="rolled-back")
    assert gone.created and gone.type == "send_receipt" and isinstance(gone.id, uuid.UUID)
    assert gone.payload == {"order": 1}
    rollback(handle)
    assert db.get_job(conn, job_id=gone.id) is None
    _not_woken(listener)

    handle = make()
    kept = client.enqueue(handle, send_receipt, {"order": 2}, idempotency_key="committed")
    assert db.get_job(conn, job_id=kept.id) is None  # not before the commit
    commit_after(handle)
    assert db.get_job(conn, job_id=kept.id).status == "pending"
    assert _woken(listener) == ["receipts"]
    _finish(conn, kept.id)

    handle = make()
    job = client.get_job(handle, kept.id)
    assert job is not None and job.id == kept.id and job.status == "succeeded" and job.payload == {"order": 2}
    assert [a.outcome for a in client.attempts(handle, kept.id)] == ["succeeded"]
    assert client.result(handle, kept.id) == {"sent": 1}
    commit_after(handle)


# ---- psycopg2 ----

def test_connections_psycopg2(db_url: str, conn: psycopg.Connection, listener: psycopg.Connection) -> None:
    import psycopg2

    app = psycopg2.connect(db_url)
    try:
        _check_sync(conn, listener, commit_after=lambda c: c.commit(), make=lambda: app,
                    rollback=lambda c: c.rollback())
        with pytest.raises(UnknownTaskType) as refused:  # the driver's own error is its cause
            client.enqueue(app, "send_reciept", {"order": 3})
        assert refused.value.sqlstate == "QT422" and isinstance(refused.value.__cause__, psycopg2.Error)
        assert getattr(refused.value.__cause__, "pgcode", None) == "QT422"
        app.rollback()
    finally:
        app.close()


# ---- Django ----

@pytest.fixture
def django_connection(db_url: str) -> Iterator[Any]:
    import django
    from django.conf import settings

    parts = conninfo_to_dict(db_url)
    database = {"ENGINE": "django.db.backends.postgresql", "NAME": parts.get("dbname"), "USER": parts.get("user"),
                "PASSWORD": parts.get("password") or "", "HOST": parts.get("host") or "",
                "PORT": parts.get("port") or ""}
    if not settings.configured:
        settings.configure(DATABASES={"default": database}, INSTALLED_APPS=[], USE_TZ=True)
        django.setup()
    from django.db import connection

    connection.close()
    connection.settings_dict.update(database)
    yield connection
    connection.close()


def test_connections_django_in_atomic_and_in_autocommit(
    conn: psycopg.Connection, listener: psycopg.Connection, django_connection: Any
) -> None:
    from django.db import connection, transaction

    class Undo(Exception):
        pass

    with pytest.raises(Undo):
        with transaction.atomic():
            gone = send_receipt.enqueue(connection, Receipt(order=1))
            assert gone.payload == {"order": 1}  # jsonb parsed, though Django loads it as text
            raise Undo
    assert db.get_job(conn, job_id=gone.id) is None
    _not_woken(listener)

    with transaction.atomic():
        kept = send_receipt.enqueue(connection, Receipt(order=2))
        assert db.get_job(conn, job_id=kept.id) is None
    assert db.get_job(conn, job_id=kept.id).status == "pending"
    assert _woken(listener) == ["receipts"]

    now = send_receipt.enqueue(connection, Receipt(order=3))  # outside atomic(): Django's autocommit
    assert db.get_job(conn, job_id=now.id).status == "pending"
    _finish(conn, kept.id)
    assert client.result(connection, kept.id) == {"sent": 1}
    assert isinstance(client.get_job(connection, kept.id).id, uuid.UUID)


def test_connections_django_other_backends_are_refused() -> None:
    class FakeDjango:
        vendor = "sqlite"

        def ensure_connection(self) -> None:
            raise AssertionError("not reached")

    FakeDjango.__module__ = "django.db.backends.sqlite3.base"
    with pytest.raises(TypeError, match="sqlite"):
        client.enqueue(FakeDjango(), "send_receipt", {"order": 1})


# ---- SQLAlchemy, sync ----

@pytest.mark.parametrize("driver", ["psycopg", "psycopg2"])
def test_connections_sqlalchemy_session(db_url: str, conn: psycopg.Connection, listener: psycopg.Connection,
                                        driver: str) -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.orm import Session

    engine = create_engine(_sqlalchemy_url(db_url, driver))
    try:
        with Session(engine) as session:
            session.execute(text("create table orders (id int)"))
            session.commit()
        _check_sync(conn, listener, commit_after=lambda s: (s.commit(), s.close()), make=lambda: Session(engine),
                    rollback=lambda s: (s.rollback(), s.close()))
        # The job and the session's own write commit together.
        with Session(engine) as session:
            session.execute(text("insert into orders values (7)"))
            job = send_receipt.enqueue(session, Receipt(order=7))
            session.commit()
        assert conn.execute("select count(*) from orders").fetchone() == (1,)
        assert db.get_job(conn, job_id=job.id).status == "pending"
    finally:
        engine.dispose()


@pytest.mark.parametrize("driver", ["psycopg", "psycopg2"])
def test_connections_sqlalchemy_connection(db_url: str, conn: psycopg.Connection, listener: psycopg.Connection,
                                           driver: str) -> None:
    from sqlalchemy import create_engine

    engine = create_engine(_sqlalchemy_url(db_url, driver))
    try:
        _check_sync(conn, listener, commit_after=lambda c: (c.commit(), c.close()), make=engine.connect,
                    rollback=lambda c: (c.rollback(), c.close()))
        with engine.begin() as connection:  # a transaction already begun
            job = send_receipt.enqueue(connection, Receipt(order=8))
        assert db.get_job(conn, job_id=job.id).status == "pending"
        with engine.connect() as connection:  # closed without commit: rolled back
            gone = send_receipt.enqueue(connection, Receipt(order=9))
        assert db.get_job(conn, job_id=gone.id) is None
    finally:
        engine.dispose()


# ---- async: psycopg, asyncpg, SQLAlchemy ----

async def _check_async(conn: psycopg.Connection, listener: psycopg.Connection,
                       make: Callable[[], Awaitable[Any]], commit: Callable[[Any], Awaitable[Any]],
                       rollback: Callable[[Any], Awaitable[Any]]) -> None:
    handle = await make()
    gone = await send_receipt.enqueue_async(handle, Receipt(order=1))
    assert gone.payload == {"order": 1} and isinstance(gone.id, uuid.UUID)
    await rollback(handle)
    assert db.get_job(conn, job_id=gone.id) is None
    _not_woken(listener)

    handle = await make()
    kept = await client.enqueue_async(handle, send_receipt, {"order": 2})
    assert db.get_job(conn, job_id=kept.id) is None
    await commit(handle)
    assert db.get_job(conn, job_id=kept.id).status == "pending"
    assert _woken(listener) == ["receipts"]
    _finish(conn, kept.id)

    handle = await make()
    job = await client.get_job_async(handle, kept.id)
    assert job is not None and job.status == "succeeded" and job.payload == {"order": 2}
    assert [a.outcome for a in await client.attempts_async(handle, kept.id)] == ["succeeded"]
    assert await client.result_async(handle, kept.id) == {"sent": 1}
    many = await client.enqueue_many_async(handle, [client.Enqueue(send_receipt, {"order": n}) for n in (4, 5)])
    assert [j.payload["order"] for j in many] == [4, 5]
    await commit(handle)
    assert all(db.get_job(conn, job_id=j.id) is not None for j in many)
    assert _woken(listener) == ["receipts"]
    handle = await make()
    assert [(await client.cancel_async(handle, j.id)).status for j in many] == ["cancelled", "cancelled"]
    await commit(handle)
    assert {db.get_job(conn, job_id=j.id).status for j in many} == {"cancelled"}


def test_connections_psycopg_async(db_url: str, conn: psycopg.Connection, listener: psycopg.Connection) -> None:
    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(db_url) as aconn:
            await _check_async(conn, listener, make=lambda: _same(aconn), commit=lambda c: c.commit(),
                               rollback=lambda c: c.rollback())

    asyncio.run(main())


async def _same(value: Any) -> Any:
    return value


def test_connections_asyncpg(db_url: str, conn: psycopg.Connection, listener: psycopg.Connection) -> None:
    import asyncpg

    async def main() -> None:
        raw = await asyncpg.connect(**_asyncpg_params(db_url))
        transactions: list[Any] = []

        async def begin() -> Any:
            transactions.append(raw.transaction())
            await transactions[-1].start()
            return raw

        try:
            await _check_async(conn, listener, make=begin, commit=lambda c: transactions.pop().commit(),
                               rollback=lambda c: transactions.pop().rollback())
        finally:
            await raw.close()

    asyncio.run(main())


@pytest.mark.parametrize("driver", ["psycopg", "asyncpg"])
def test_connections_sqlalchemy_async_session_and_connection(
    db_url: str, conn: psycopg.Connection, listener: psycopg.Connection, driver: str
) -> None:
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    async def main() -> None:
        engine = create_async_engine(_sqlalchemy_url(db_url, driver))
        try:
            async def session() -> AsyncSession:
                return AsyncSession(engine)

            async def close_after(s: Any, end: str) -> None:
                await getattr(s, end)()
                await s.close()

            await _check_async(conn, listener, make=session, commit=lambda s: close_after(s, "commit"),
                               rollback=lambda s: close_after(s, "rollback"))
            await _check_async(conn, listener, make=lambda: engine.connect().start(),
                               commit=lambda c: close_after(c, "commit"), rollback=lambda c: close_after(c, "rollback"))
        finally:
            await engine.dispose()

    asyncio.run(main())


# ---- what is refused ----

@pytest.mark.parametrize("thing", [None, "postgresql://localhost/app", object(), 42])
def test_connections_anything_else_is_a_type_error_naming_what_is_accepted(thing: Any) -> None:
    with pytest.raises(TypeError, match="psycopg 3 Connection, a psycopg2 connection, django.db.connection"):
        client.enqueue(thing, "send_receipt", {"order": 1})
    with pytest.raises(TypeError, match="AsyncConnection, an asyncpg Connection"):
        asyncio.run(client.enqueue_async(thing, "send_receipt", {"order": 1}))


def test_connections_sync_and_async_kinds_say_which_function_to_use(db_url: str) -> None:
    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(db_url) as aconn:
            with pytest.raises(TypeError, match="use the \\*_async function"):
                client.enqueue(aconn, "send_receipt", {"order": 1})

    asyncio.run(main())
    with psycopg.connect(db_url) as sync:
        with pytest.raises(TypeError, match="sync connection: use the function without _async"):
            asyncio.run(client.enqueue_async(sync, "send_receipt", {"order": 1}))


def test_connections_dollar_placeholders() -> None:
    sql, args = connections.dollar("select f(%(a)s::int, %(b)s::jsonb, %(a)s::int) where x like 'p%%'",
                                   {"a": 1, "b": {"k": 1}, "unused": 2})
    assert sql == "select f($1::int, $2::jsonb, $1::int) where x like 'p%'"
    assert args == [1, {"k": 1}]
