"""Small helpers shared by tests: building jobs and reading rows as dicts."""
from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg.rows import dict_row

from pgqw import db
from pgqw.listing import EXAMPLE_LISTING

LISTING = EXAMPLE_LISTING


def enqueue(conn: psycopg.Connection, key: str | None = None, **kwargs: Any) -> db.EnqueuedJob:
    kwargs.setdefault("type", "listing_flyer")
    kwargs.setdefault("payload", dict(LISTING))
    return db.enqueue_job(conn, idempotency_key=key or f"k-{uuid.uuid4()}", **kwargs)


def rows(conn: psycopg.Connection, query: str, params: Any = None) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(query, params)
        return cur.fetchall()


def one(conn: psycopg.Connection, query: str, params: Any = None) -> dict[str, Any]:
    found = rows(conn, query, params)
    assert len(found) == 1, found
    return found[0]


def job_row(conn: psycopg.Connection, job_id: Any) -> dict[str, Any]:
    return one(conn, "select * from jobs where id = %s", [job_id])


def snapshot(conn: psycopg.Connection) -> list[Any]:
    """Every row of the queue's tables, to prove a failed call changed nothing."""
    return [
        rows(conn, "select * from jobs order by id"),
        rows(conn, "select * from job_attempts order by job_id, attempt"),
        rows(conn, "select job_id, content_type, value, md5(data) from job_results order by job_id"),
        rows(conn, "select * from queue_settings"),
        rows(conn, "select * from task_types order by name"),
        rows(conn, "select * from workers order by id"),
    ]
