"""Testing your tasks without a worker process: run what a test enqueued, in-process, through the real
stored functions, and a throw-away queue schema per test session.

    # conftest.py
    pytest_plugins = ["pgqw.testing"]

    # test_orders.py
    from pgqw import client, testing
    from myapp.tasks import send_receipt

    def test_receipt_is_sent(pgqw_conn):
        job = send_receipt.enqueue(pgqw_conn, {"order": 42})
        [ran] = testing.run_jobs(pgqw_conn)
        assert ran.outcome == "succeeded" and client.result(pgqw_conn, job.id) == {"sent": 42}

run_jobs claims each due job of the given tasks (claim_job), runs its handler with a Context as the
worker does, and records what came of it (mark_succeeded with the result, mark_failed with the error
and whether it may be retried, or snooze_job for a handler that raised Snooze): the job's status,
attempts and result are what a worker would have left. A failed attempt's retry is due after its
backoff, and a snoozed job at its time, so one call runs each job once (a job snoozed to a time that
has already come runs again in the same call); call it again after moving run_at, or look at the attempt. Handlers run in the calling thread (an
`async def` handler on an event loop of its own); no heartbeat runs, so a handler longer than its lease
can be swept by a real worker on the same database.

The fixtures (this module as a pytest plugin):
    pgqw_database_url   the database: PGQW_TEST_DATABASE_URL, else PGQW_DATABASE_URL (or DATABASE_URL);
                        override it in your conftest (a Django test database's, for example)
    pgqw_schema         session: a schema `pgqw_test_<random>` migrated into that database, PGQW_SCHEMA
                        set to it for the session (so every pgqw call uses it), dropped at the end; the
                        login roles' settings are left alone
    pgqw_conn           an autocommit psycopg connection whose search_path starts with that schema, the
                        imported @task types registered; after the test the queue's tables are emptied
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

import psycopg

from . import config, connections, db
from .errors import Snooze
from .tasks import Context, Registry, Task, describe_error, registry, result_row

# The tables run by migrate that hold settings, not a test's data: kept between tests.
KEPT_TABLES = ("migrations", "queue_settings")


@dataclass
class Ran:
    """One attempt run_jobs ran: the job as the stored function left it, the attempt's outcome
    (succeeded, failed, dead, snoozed; cancelled when a cancel was asked for while it ran), the recorded
    error, and the handler's return value."""

    job: db.RecordedJob
    outcome: str
    error: str | None = None
    value: Any = None
    exception: BaseException | None = None


def _tasks(tasks: Registry | Iterable[Task[Any]] | None) -> dict[str, Task[Any]]:
    found = registry if tasks is None else tasks
    return {t.name: t for t in found}


def _run_coroutine(coro: Any) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # Called from a running event loop (an async test): the handler gets a loop of its own in a thread.
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    thread = threading.Thread(target=run, name="pgqw-testing-async")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def run_jobs(conn: Any, *, tasks: Registry | Iterable[Task[Any]] | None = None, queues: Sequence[str] | None = None,
             limit: int | None = None, worker_id: str = "pgqw-testing", raise_errors: bool = False) -> list[Ran]:
    """Runs the due jobs of these tasks (default: every @task imported) until none is left or `limit`
    attempts ran; returns what each attempt came to, in order. raise_errors: a handler's exception is
    raised after its attempt is recorded (as Celery's eager mode does). conn is a psycopg 3 connection,
    or a Django or SQLAlchemy connection on psycopg 3; in a transaction, everything happens in it."""
    raw = connections.driver(conn)
    if not isinstance(raw, psycopg.Connection):
        raise TypeError("pgqw.testing.run_jobs needs psycopg 3 under the connection (a psycopg Connection, or "
                        "Django or SQLAlchemy on psycopg)")
    by_name = _tasks(tasks)
    ran: list[Ran] = []
    while limit is None or len(ran) < limit:
        job = db.claim_job(raw, worker_id=worker_id, queues=queues, task_types=sorted(by_name))
        if job is None:
            break
        task = by_name[job.type]
        transacted: list[bool] = []
        ctx = Context(job=job, worker_id=worker_id,
                      log=logging.LoggerAdapter(logging.getLogger(f"pgqw.task.{job.type}"),
                                                {"job": f"{str(job.id)[:8]} attempt {job.attempts}/{job.max_attempts}"}),
                      on_progress=functools.partial(_progress, raw, job),
                      open_transaction=functools.partial(_transaction, raw, job, done=transacted),
                      read=lambda op, fn: fn(raw))
        try:
            payload = task.parse(job.payload)
            value = _run_coroutine(task.fn(payload, ctx)) if task.is_async else task.fn(payload, ctx)
            result = result_row(value)
        except Snooze as snooze:
            after = db.snooze_job(raw, job_id=job.id, lease_token=job.lease_token, until=snooze.until,
                                  delay_ms=snooze.delay_ms)
            # Past the job's snooze limit it is dead, its attempt failed with the job's last_error.
            ran.append(Ran(after, "snoozed" if after.status == "pending" else after.status,
                           after.last_error if after.status == "dead" else None, exception=snooze))
            continue
        except Exception as exc:
            after = db.mark_failed(raw, job_id=job.id, lease_token=job.lease_token, error=describe_error(exc),
                                   retryable=not task.is_permanent(exc))
            ran.append(Ran(after, "dead" if after.status == "dead" else "failed", describe_error(exc), exception=exc))
            if raise_errors:
                raise
            continue
        if transacted:  # ctx.transaction recorded the success: what the handler returned is not stored
            after = db.mark_succeeded(raw, job_id=job.id, lease_token=job.lease_token)  # already_recorded
        else:
            after = db.mark_succeeded(raw, job_id=job.id, lease_token=job.lease_token, result=result)
        ran.append(Ran(after, "succeeded", value=value))
    return ran


def _progress(conn: psycopg.Connection, job: db.ClaimedJob, text: str) -> None:
    """ctx.progress in run_jobs: written at once under the attempt's lease token (heartbeat)."""
    db.heartbeat(conn, leases=[(job.id, job.lease_token)], progress=[text])


@contextlib.contextmanager
def _transaction(conn: psycopg.Connection, job: db.ClaimedJob, result: Any, *, done: list[bool]) -> Iterator[psycopg.Connection]:
    """ctx.transaction in run_jobs: the block and mark_succeeded in one transaction (a savepoint when conn is
    already in one) on the caller's connection."""
    row = result_row(result)
    with conn.transaction():
        yield conn
        db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token, result=row)
    done.append(True)


# ---- the pytest fixtures ----

try:
    import pytest
except ImportError:  # not under pytest: run_jobs alone
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture(scope="session")
    def pgqw_database_url() -> str:
        url = os.environ.get("PGQW_TEST_DATABASE_URL") or config.read("database_url")
        if not url:
            pytest.fail("pgqw.testing needs a database: set PGQW_TEST_DATABASE_URL or PGQW_DATABASE_URL, or override "
                        "the pgqw_database_url fixture")
        return url

    @pytest.fixture(scope="session")
    def pgqw_schema(pgqw_database_url: str) -> Iterator[str]:
        from .migrate import migrate

        name = f"pgqw_test_{uuid.uuid4().hex[:10]}"
        before = os.environ.get("PGQW_SCHEMA")
        migrate(pgqw_database_url, schema=name, create_roles=False, role_settings=False)
        os.environ["PGQW_SCHEMA"] = name
        try:
            yield name
        finally:
            if before is None:
                os.environ.pop("PGQW_SCHEMA", None)
            else:
                os.environ["PGQW_SCHEMA"] = before
            with psycopg.connect(pgqw_database_url, autocommit=True) as admin:
                admin.execute(f"drop schema if exists {name} cascade")

    @pytest.fixture
    def pgqw_conn(pgqw_database_url: str, pgqw_schema: str) -> Iterator[psycopg.Connection]:
        from .tasks import register

        conn = psycopg.connect(pgqw_database_url, autocommit=True, options=f"-csearch_path={pgqw_schema},public")
        try:
            register(conn, registry)
            yield conn
        finally:
            conn.close()
            with psycopg.connect(pgqw_database_url, autocommit=True) as admin:
                tables = [r[0] for r in admin.execute(
                    "select tablename from pg_tables where schemaname = %s and tablename <> all(%s)",
                    [pgqw_schema, list(KEPT_TABLES)])]
                if tables:
                    admin.execute("truncate " + ", ".join(f"{pgqw_schema}.{t}" for t in tables) + " cascade")
