"""The connection an application already has, as the client's stored-function calls need it.

pgqw.client runs its statements in the caller's transaction on any of these:

    psycopg 3          psycopg.Connection, psycopg.AsyncConnection (the *_async functions)
    psycopg2           a psycopg2 connection
    Django             django.db.connection (or django.db.connections[alias]), PostgreSQL backend,
                       psycopg 3 or psycopg2, inside transaction.atomic() or in autocommit
    SQLAlchemy         a Session or Connection (psycopg or psycopg2 driver); an AsyncSession or
                       AsyncConnection (psycopg or asyncpg driver; the *_async functions)
    asyncpg            an asyncpg.Connection (the *_async functions)

Each is reduced to its driver's connection. A SQLAlchemy Session or Connection is first made to begin
its transaction (as its own first statement would), so its commit commits the job and its rollback
leaves none; a Django connection is connected first (ensure_connection). The statements are the ones
pgqw.db runs (psycopg's `%(name)s` placeholders, each with an explicit cast); for asyncpg they are
rewritten to `$n`. Values come back as psycopg 3 gives them, whatever loaders the application set on
its connection (Django loads jsonb as text): the cursor gets its own json, jsonb, uuid and bytea
loaders (psycopg 3, psycopg2), or text jsonb is parsed (asyncpg's default codec, SQLAlchemy's too).

Anything else is a TypeError that names what is accepted. No module here imports Django, SQLAlchemy,
psycopg2 or asyncpg unless the application already has: an object of theirs cannot exist otherwise.
"""
from __future__ import annotations

import json
import re
import sys
import uuid
from typing import Any, Mapping

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Json, Jsonb

ACCEPTED = ("a psycopg 3 Connection, a psycopg2 connection, django.db.connection, or a SQLAlchemy Session or "
            "Connection (psycopg or psycopg2 driver)")
ACCEPTED_ASYNC = ("a psycopg 3 AsyncConnection, an asyncpg Connection, or a SQLAlchemy AsyncSession or "
                  "AsyncConnection (psycopg or asyncpg driver)")

Row = dict[str, Any]

_JSON_OIDS = frozenset({114, 3802})  # json, jsonb
_UUID_OID = 2950
_BYTEA_OID = 17


def _module(obj: Any) -> str:
    return type(obj).__module__ or ""


def _loaded(name: str) -> Any:
    """The module if the application imported it (an object of its types can exist only then)."""
    return sys.modules.get(name)


# ---- which kind of connection ----

def is_async(conn: Any) -> bool:
    """Whether conn is one of the async kinds (the *_async client functions take those)."""
    if isinstance(conn, psycopg.AsyncConnection):
        return True
    if _loaded("asyncpg") is not None and _is_asyncpg(conn):
        return True
    sa_async = _loaded("sqlalchemy.ext.asyncio")
    return sa_async is not None and isinstance(conn, (sa_async.AsyncSession, sa_async.AsyncConnection))


def _is_asyncpg(conn: Any) -> bool:
    asyncpg = _loaded("asyncpg")
    return asyncpg is not None and isinstance(conn, asyncpg.Connection)


def _is_psycopg2(conn: Any) -> bool:
    ext = _loaded("psycopg2.extensions")
    return ext is not None and isinstance(conn, ext.connection)


def _django_raw(conn: Any) -> Any | None:
    """A Django connection's driver connection, connected; None when conn is not Django's."""
    if not _module(conn).startswith("django.") or not hasattr(conn, "ensure_connection"):
        return None
    if getattr(conn, "vendor", None) != "postgresql":
        raise TypeError(f"a Django connection of the {getattr(conn, 'vendor', '?')!r} backend: pgqw needs "
                        "django.db.backends.postgresql")
    conn.ensure_connection()
    return conn.connection


def _sqlalchemy_raw(conn: Any) -> Any | None:
    """A SQLAlchemy Session's or Connection's driver connection, its transaction begun; None when conn
    is neither."""
    orm = _loaded("sqlalchemy.orm")
    engine = _loaded("sqlalchemy.engine")
    if orm is not None and isinstance(conn, orm.Session):
        conn = conn.connection()  # begins the session's transaction (or joins the one it has)
    elif engine is None or not isinstance(conn, engine.Connection):
        return None
    if not conn.in_transaction():
        conn.begin()  # as its own first statement would: the caller's commit() commits the job
    return conn.connection.driver_connection


def driver(conn: Any) -> Any:
    """The psycopg 3 or psycopg2 connection under a sync connection of any accepted kind."""
    if isinstance(conn, psycopg.Connection) or _is_psycopg2(conn):
        return conn
    if is_async(conn):
        raise TypeError(f"{_what(conn)} is an async connection: use the *_async function (enqueue_async, "
                        "Task.enqueue_async, ...)")
    raw = _django_raw(conn)
    if raw is None:
        raw = _sqlalchemy_raw(conn)
    if raw is not None and (isinstance(raw, psycopg.Connection) or _is_psycopg2(raw)):
        return raw
    if raw is not None:
        raise TypeError(f"{_what(conn)} runs on the {_what(raw)} driver: pgqw takes psycopg 3 or psycopg2 there")
    raise TypeError(f"pgqw needs a database connection: {ACCEPTED}; got {_what(conn)}")


async def driver_async(conn: Any) -> Any:
    """The psycopg AsyncConnection or asyncpg connection under an async connection of any accepted kind."""
    if isinstance(conn, psycopg.AsyncConnection) or _is_asyncpg(conn):
        return conn
    sa_async = _loaded("sqlalchemy.ext.asyncio")
    if sa_async is not None and isinstance(conn, (sa_async.AsyncSession, sa_async.AsyncConnection)):
        if isinstance(conn, sa_async.AsyncSession):
            conn = await conn.connection()
        if not conn.in_transaction():
            await conn.begin()
        raw = (await conn.get_raw_connection()).driver_connection
        if isinstance(raw, psycopg.AsyncConnection):
            return raw
        if _is_asyncpg(raw):
            return _SQLAlchemyAsyncpg(conn)
        raise TypeError(f"{_what(conn)} runs on the {_what(raw)} driver: pgqw takes psycopg 3 or asyncpg there")
    if isinstance(conn, psycopg.Connection) or _is_psycopg2(conn) or _module(conn).startswith(("django.", "sqlalchemy.")):
        raise TypeError(f"{_what(conn)} is a sync connection: use the function without _async")
    raise TypeError(f"pgqw needs an async database connection: {ACCEPTED_ASYNC}; got {_what(conn)}")


def _what(obj: Any) -> str:
    return f"{_module(obj)}.{type(obj).__qualname__}"


# ---- running a statement ----

def _plain(value: Any) -> Any:
    """A psycopg 3 parameter as the other drivers take it: JSON as text, a UUID as text."""
    if isinstance(value, (Jsonb, Json)):
        return json.dumps(value.obj)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def fetch(conn: Any, sql: str, params: Mapping[str, Any]) -> list[Row]:
    """Runs one statement on a sync connection of any accepted kind; its rows as dicts."""
    raw = driver(conn)
    if isinstance(raw, psycopg.Connection):
        with raw.cursor(row_factory=dict_row) as cur:
            _psycopg_loaders(cur)
            cur.execute(sql, params)
            return cur.fetchall() if cur.description is not None else []
    return _psycopg2_fetch(raw, sql, params)


async def fetch_async(conn: Any, sql: str, params: Mapping[str, Any]) -> list[Row]:
    """Runs one statement on an async connection of any accepted kind; its rows as dicts."""
    raw = await driver_async(conn)
    if isinstance(raw, psycopg.AsyncConnection):
        async with raw.cursor(row_factory=dict_row) as cur:
            _psycopg_loaders(cur)
            await cur.execute(sql, params)
            return await cur.fetchall() if cur.description is not None else []
    if isinstance(raw, _SQLAlchemyAsyncpg):
        return await raw.fetch(sql, params)
    statement, args = dollar(sql, params)
    prepared = await raw.prepare(statement)
    records = await prepared.fetch(*args)
    oids = [a.type.oid for a in prepared.get_attributes()]
    return [_typed(dict(r.items()), oids) for r in records]


def _psycopg_loaders(cur: Any) -> None:
    """psycopg's own loaders on this cursor, whatever the connection's (Django loads jsonb as text)."""
    from psycopg.types.json import JsonbLoader, JsonLoader
    from psycopg.types.string import ByteaLoader
    from psycopg.types.uuid import UUIDLoader

    for name, loader in (("json", JsonLoader), ("jsonb", JsonbLoader), ("uuid", UUIDLoader), ("bytea", ByteaLoader)):
        cur.adapters.register_loader(name, loader)


def _psycopg2_fetch(raw: Any, sql: str, params: Mapping[str, Any]) -> list[Row]:
    import psycopg2.extensions
    import psycopg2.extras

    with raw.cursor() as cur:
        # On this cursor only: JSON parsed (Django's backend loads jsonb as text), uuid as uuid.UUID.
        psycopg2.extras.register_default_json(cur, loads=json.loads)
        psycopg2.extras.register_default_jsonb(cur, loads=json.loads)
        psycopg2.extensions.register_type(
            psycopg2.extensions.new_type((_UUID_OID,), "PGQW_UUID", lambda v, c: None if v is None else uuid.UUID(v)),
            cur)
        cur.execute(sql, {k: _plain(v) for k, v in params.items()})
        if cur.description is None:
            return []
        names = [d.name for d in cur.description]
        return [{n: bytes(v) if isinstance(v, memoryview) else v for n, v in zip(names, row)}
                for row in cur.fetchall()]


_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%")


def dollar(sql: str, params: Mapping[str, Any]) -> tuple[str, list[Any]]:
    """A statement with `%(name)s` placeholders as asyncpg takes it: `$1`, `$2`, ... and the values in
    that order (a name used twice is one `$n`); `%%` is `%`."""
    order: dict[str, int] = {}

    def number(m: re.Match[str]) -> str:
        if m.group(0) == "%%":
            return "%"
        return f"${order.setdefault(m.group(1), len(order) + 1)}"

    statement = _PLACEHOLDER.sub(number, sql)
    return statement, [_plain(params[name]) for name in order]


def _typed(row: Row, oids: list[int]) -> Row:
    """asyncpg's values as psycopg 3 gives them: JSON parsed (its default codec gives text)."""
    for (name, value), oid in zip(list(row.items()), oids):
        if oid in _JSON_OIDS and isinstance(value, str):
            row[name] = json.loads(value)
    return row


class _SQLAlchemyAsyncpg:
    """An AsyncConnection on asyncpg: its statements go through SQLAlchemy (exec_driver_sql), whose
    adapter opens the asyncpg transaction that its commit and rollback end; a statement on the bare
    asyncpg connection would run outside it."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def fetch(self, sql: str, params: Mapping[str, Any]) -> list[Row]:
        statement, args = dollar(sql, params)
        result = await self.conn.exec_driver_sql(statement, tuple(args))
        if not result.returns_rows:
            return []
        oids = [d[1] for d in result.cursor.description]
        return [_typed(dict(r), oids) for r in result.mappings().all()]

