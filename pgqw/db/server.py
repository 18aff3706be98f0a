"""The database server itself: its clock and its login roles."""
from __future__ import annotations

from datetime import datetime

import psycopg

from ._exec import _column, _value, _value_async


def server_now(conn: psycopg.Connection) -> datetime:
    """The database server's clock (the one enqueue_schedule_slots checks slots against)."""
    now: datetime = _value(conn, "select now()")
    return now


async def server_now_async(conn: psycopg.AsyncConnection) -> datetime:
    """server_now() on an async connection."""
    now: datetime = await _value_async(conn, "select now()")
    return now


def login_roles(conn: psycopg.Connection, names: list[str]) -> set[str]:
    """Which of the named roles exist and may log in (db/security/roles.sql makes them)."""
    return set(_column(conn, "select rolname::text from pg_roles where rolname = any(%(names)s::text[]) and rolcanlogin",
                       {"names": names}))
