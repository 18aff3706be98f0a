"""Helpers for the in-process tests of the worker's parts: real database, no worker process."""
from __future__ import annotations

import contextlib
import dataclasses
import io
import re
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterator, TypeVar

import psycopg

from pgqw import db
from pgqw.config import Settings
from pgqw.worker.log import Log
from tests.helpers import enqueue

T = TypeVar("T")
AT = datetime(2025, 1, 1, 16, 43, 7, 167_000, tzinfo=timezone.utc)  # every test log line's time


def settings(**changes: Any) -> Settings:
    """Quiet settings for worker w1: no simulated latency or failures, retries at once."""
    base = Settings(worker_id="w1", concurrency=2, retry_base_delay_ms=0, retry_max_jitter_ms=0)
    return dataclasses.replace(base, **changes)


class Lines(io.StringIO):
    """A log's output; lines(event) are the texts logged for one event."""

    def lines(self, event: str) -> list[str]:
        found = []
        for line in self.getvalue().splitlines():
            head = f"16:43:07.167Z [w1] {event}"
            if line.startswith(head) and (len(line) == len(head) or line[len(head)] == " "):
                found.append(line[len(head):].strip())
        return found


def log() -> tuple[Log, Lines]:
    out = Lines()
    return Log("w1", out, now=lambda: AT), out


class Direct:
    """The worker's Database, reduced to one real connection: no pool, no retries."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
        self.ops: list[str] = []
        self.errors: list[tuple[str, str, float]] = []
        self.checks = 0

    def call(self, op: str, fn: Callable[[psycopg.Connection], T], *, deadline: float | None = None) -> T:
        self.ops.append(op)
        return fn(self.conn)

    def once(self, fn: Callable[[psycopg.Connection], T]) -> T:
        return fn(self.conn)

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        yield self.conn

    def check_pool(self) -> None:
        self.checks += 1

    def db_error(self, op: str, exc: BaseException, delay: float) -> None:
        self.errors.append((op, str(exc), delay))


class LostReply(Direct):
    """Every call commits, then its reply is lost and the worker's retry makes the same call again:
    what the database answers to that second call is what the worker sees."""

    def call(self, op: str, fn: Callable[[psycopg.Connection], T], *, deadline: float | None = None) -> T:
        self.ops.append(op)
        fn(self.conn)
        return fn(self.conn)


class _SentCursor:
    """A cursor that notes each stored function it calls, with its parameters, then calls it."""

    def __init__(self, cur: psycopg.Cursor, sent: list[tuple[str, dict[str, Any]]]) -> None:
        self._cur = cur
        self._sent = sent

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> _SentCursor:
        called = re.search(r"\bfrom\s+(?:\w+\.)?(\w+)\s*\(", str(query))  # schema-qualified
        self._sent.append((called.group(1) if called else str(query), dict(params or {})))
        self._cur.execute(query, params, **kwargs)
        return self

    def __enter__(self) -> _SentCursor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._cur.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)


class _SentConnection:
    def __init__(self, conn: psycopg.Connection, sent: list[tuple[str, dict[str, Any]]]) -> None:
        self._conn = conn
        self._sent = sent

    def cursor(self, *args: Any, **kwargs: Any) -> _SentCursor:
        return _SentCursor(self._conn.cursor(*args, **kwargs), self._sent)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class Recording(Direct):
    """Direct, noting what each call sent: sent is a list of (stored function, the wrapper's
    parameters as pgqw.db passed them), in call order."""

    def __init__(self, conn: psycopg.Connection) -> None:
        super().__init__(conn)
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def call(self, op: str, fn: Callable[[psycopg.Connection], T], *, deadline: float | None = None) -> T:
        self.ops.append(op)
        return fn(_SentConnection(self.conn, self.sent))  # type: ignore[arg-type]

    def once(self, fn: Callable[[psycopg.Connection], T]) -> T:
        return fn(_SentConnection(self.conn, self.sent))  # type: ignore[arg-type]


def registered(conn: psycopg.Connection, type_: str) -> None:
    """The task type a test's own registry defines, registered as a worker's start would (no code defaults),
    unless it already is (the template's types keep their own)."""
    if db.get_task_type(conn, name=type_) is None:
        db.register_task_types(conn, types=[{"name": type_, "payload_schema": {}}])


def claimed(conn: psycopg.Connection, worker: str = "w1", lease_ms: int | None = None, **job: Any) -> db.ClaimedJob:
    if "type" in job:
        registered(conn, job["type"])
    enqueue(conn, **job)
    found = db.claim_job(conn, worker_id=worker, lease_ms=lease_ms)
    assert found is not None
    return found


def steal(conn: psycopg.Connection, job: db.Job, thief: str = "w2") -> db.ClaimedJob:
    """The job's lease runs out (claim it with a short lease), a sweep hands it on and another
    worker claims it, with a lease token of its own (returned). Jobs with longer leases are left
    alone. conn must be the owner's: sweep_stuck_at and claim_job_at take the time."""
    assert job.lease_expires_at is not None
    db.sweep_stuck_at(conn, now=job.lease_expires_at + timedelta(milliseconds=1))
    again = db.claim_job_at(conn, worker_id=thief, now=datetime.now(timezone.utc))
    assert again is not None and again.id == job.id
    return again
