"""The worker's log: one line per event on stdout, flushed at once.

    16:43:07.167Z [w1] start   ba1b4d28 attempt 1/5  (running 5/5, peak 5)

Tests and operators grep these lines by event (the word after the worker id), so an event's name and
the shape of its line are part of the worker's interface (docs/worker.md lists them).
"""
from __future__ import annotations

import sys
import threading
import uuid
from datetime import datetime, timezone
from typing import Callable, TextIO

import psycopg
from psycopg.conninfo import conninfo_to_dict


def clock(at: datetime | None = None) -> str:
    """16:43:07.167Z"""
    at = (at or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return f"{at:%H:%M:%S}.{at.microsecond // 1000:03d}Z"


def short(job_id: uuid.UUID | str) -> str:
    return str(job_id)[:8]


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def describe_database(conninfo: str) -> str:
    """host:port/dbname (or dbname via socket DIR), without the password."""
    try:
        parts = conninfo_to_dict(conninfo)
    except psycopg.Error:
        return "?"
    host, port, name = str(parts.get("host") or ""), parts.get("port"), parts.get("dbname", "")
    if not host or host.startswith("/"):
        return f"{name} via socket {host or 'default'}"
    return f"{host}{':' + str(port) if port else ''}/{name}"


# The lines a worker writes for every job that goes well; WORKER_LOG_JOBS=0 leaves them out.
JOB_EVENTS = frozenset({"start", "success"})


class Log:
    """`log(event, text)` writes `<time> [<worker id>] <event padded to 7> <text>`, unless the event is
    one of `quiet` (then it writes nothing)."""

    def __init__(self, worker_id: str, out: TextIO | None = None,
                 now: Callable[[], datetime | None] = lambda: None, *, quiet: frozenset[str] = frozenset()) -> None:
        self.worker_id = worker_id
        self.quiet = quiet
        self.out = out or sys.stdout
        self._now = now  # a fixed time in tests; None: the current time
        self._lock = threading.RLock()  # reentrant: a signal handler may log while this thread holds it

    def line(self, event: str, text: str = "") -> str:
        return f"{clock(self._now())} [{self.worker_id}] {event:<7} {text}".rstrip()

    def __call__(self, event: str, text: str = "") -> None:
        if event in self.quiet:
            return
        line = self.line(event, text)
        with self._lock:
            try:
                self.out.write(line + "\n")
                self.out.flush()
            except (OSError, ValueError):
                pass  # stdout closed: keep working, the database has the record


def route_task_log(log: Log) -> None:
    """What handlers log through ctx.log (the pgqw.task.<type> loggers), in the worker's format:
    `task  <job> attempt n/m: message`, at INFO and above."""
    import logging

    class ToWorkerLog(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            job = getattr(record, "job", "")
            log("task", f"{job}: {record.getMessage()}" if job else record.getMessage())

    task_logger = logging.getLogger("pgqw.task")
    task_logger.setLevel(logging.INFO)
    task_logger.propagate = False
    task_logger.handlers[:] = [ToWorkerLog()]
