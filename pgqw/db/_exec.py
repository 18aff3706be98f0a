"""What every wrapper shares: the schema substitution and the one way a statement is run.

Each statement text goes through `_q` (pgqw.schema.qualify: `pgqw.` becomes PGQW_SCHEMA's name, cached
per text), then runs on a cursor of the caller's connection with its parameters; psycopg prepares a
text on the server once it has run it prepare_threshold times, so one text per statement keeps that.
The rows come back typed: `row` is the dataclass each is read into, through class_row.
"""
from __future__ import annotations

from typing import Any, Mapping, TypeVar

import psycopg
from psycopg.rows import class_row, scalar_row

from pgqw.schema import qualify as _q

T = TypeVar("T")
Params = Mapping[str, Any] | None


def _maybe(conn: psycopg.Connection, row: type[T], sql: str, params: Params = None) -> T | None:
    """The statement's first row, or None when it returns none."""
    with conn.cursor(row_factory=class_row(row)) as cur:
        cur.execute(_q(sql), params)
        found: T | None = cur.fetchone()
        return found


def _one(conn: psycopg.Connection, row: type[T], sql: str, params: Params = None) -> T:
    """The statement's one row: a stored function that always answers one (else AssertionError)."""
    found = _maybe(conn, row, sql, params)
    assert found is not None
    return found


def _all(conn: psycopg.Connection, row: type[T], sql: str, params: Params = None) -> list[T]:
    """Every row of the statement, in its order."""
    with conn.cursor(row_factory=class_row(row)) as cur:
        cur.execute(_q(sql), params)
        found: list[T] = cur.fetchall()
        return found


def _column(conn: psycopg.Connection, sql: str, params: Params = None) -> list[Any]:
    """The first column of every row of the statement, in its order."""
    with conn.cursor(row_factory=scalar_row) as cur:
        cur.execute(_q(sql), params)
        return cur.fetchall()


def _value(conn: psycopg.Connection, sql: str, params: Params = None) -> Any:
    """The first column of the statement's first row, or None when it returns no row."""
    row = conn.execute(_q(sql), params).fetchone()
    return None if row is None else row[0]


async def _maybe_async(conn: psycopg.AsyncConnection, row: type[T], sql: str, params: Params = None) -> T | None:
    async with conn.cursor(row_factory=class_row(row)) as cur:
        await cur.execute(_q(sql), params)
        found: T | None = await cur.fetchone()
        return found


async def _all_async(conn: psycopg.AsyncConnection, row: type[T], sql: str, params: Params = None) -> list[T]:
    async with conn.cursor(row_factory=class_row(row)) as cur:
        await cur.execute(_q(sql), params)
        found: list[T] = await cur.fetchall()
        return found


async def _value_async(conn: psycopg.AsyncConnection, sql: str, params: Params = None) -> Any:
    cur = await conn.execute(_q(sql), params)
    row = await cur.fetchone()
    return None if row is None else row[0]


__all__ = ["_q", "_maybe", "_one", "_all", "_column", "_value", "_maybe_async", "_all_async", "_value_async"]
