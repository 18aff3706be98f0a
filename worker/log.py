"""The worker's log: one line per event on stdout, in order, flushed as soon as it is written.

    16:43:07.167Z [w1] start   ba1b4d28 attempt 1/5  (running 5/5, peak 5)

Tests and operators grep these lines by event (the word after the worker id), so an event's name and
the shape of its line are part of the worker's interface (docs/worker.md lists them).
"""
from __future__ import annotations

import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Callable, TextIO

import psycopg
from psycopg.conninfo import conninfo_to_dict


_second: tuple[int, str] = (-1, "")  # the last whole second formatted, and its HH:MM:SS


def clock(at: datetime | None = None) -> str:
    """16:43:07.167Z (the time now, or at's)"""
    global _second
    if at is not None:
        at = at.astimezone(timezone.utc)
        return f"{at:%H:%M:%S}.{at.microsecond // 1000:03d}Z"
    ms = time.time_ns() // 1_000_000
    whole, part = divmod(ms, 1000)
    second = _second
    if second[0] != whole:  # a new second: formatted once, for every line logged in it
        second = _second = (whole, time.strftime("%H:%M:%S", time.gmtime(whole)))
    return f"{second[1]}.{part:03d}Z"


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
    one of `quiet` (then it writes nothing).

    By default each line is written and flushed by the caller. After start() a writer thread does the
    writing: a caller only appends its line to a list, and the writer writes what has gathered with one
    write and one flush. Lines come out in the order they were logged, as soon as the writer runs. Why: a
    flush is a system call, and CPython lets other threads take the interpreter lock during it; the main
    loop, logging a `start` line per claimed job, then waited behind the executor threads on every line
    and claimed smaller batches (docs/benchmarks.md, "The worker runtime"). close() writes what is
    left and stops the writer."""

    def __init__(self, worker_id: str, out: TextIO | None = None,
                 now: Callable[[], datetime | None] = lambda: None, *, quiet: frozenset[str] = frozenset()) -> None:
        self.worker_id = worker_id
        self.quiet = quiet
        self.out = out or sys.stdout
        self._now = now  # a fixed time in tests; None: the current time
        # Reentrant: a signal handler may log while the thread it interrupted holds it.
        self._cond = threading.Condition(threading.RLock())
        self._pending: list[str] = []   # lines logged, not yet written (with a writer)
        self._writer: threading.Thread | None = None
        self._closing = False

    def line(self, event: str, text: str = "") -> str:
        return f"{clock(self._now())} [{self.worker_id}] {event:<7} {text}".rstrip()

    def __call__(self, event: str, text: str = "") -> None:
        if event in self.quiet:
            return
        line = self.line(event, text) + "\n"
        with self._cond:
            if self._writer is None:
                self._write(line)
            else:
                # The writer takes every pending line at once: only the first line of a batch needs to
                # wake it (a wake-up per line was a thread switch per line).
                if not self._pending:
                    self._cond.notify()
                self._pending.append(line)

    def start(self) -> None:
        """Lines are written by a thread of their own from now on (until close())."""
        with self._cond:
            if self._writer is None and not self._closing:
                self._writer = threading.Thread(target=self._run, name="pgqw-log", daemon=True)
                self._writer.start()

    def close(self, timeout: float = 5.0) -> None:
        """Writes every line logged so far and stops the writer; later lines are written by the caller."""
        with self._cond:
            writer, self._closing = self._writer, True
            self._cond.notify()
        if writer is not None:
            writer.join(timeout)
        with self._cond:
            self._writer, self._closing = None, False
            if self._pending:  # the writer did not finish in time: write the rest here
                lines, self._pending = self._pending, []
                self._write("".join(lines))

    def unwritten(self) -> str:
        """The lines not written yet (for a last write on the way out, with no lock taken)."""
        return "".join(list(self._pending))

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                lines, self._pending = self._pending, []
                if not lines:
                    return      # closing, and everything is written
            self._write("".join(lines))

    def _write(self, text: str) -> None:
        try:
            self.out.write(text)
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
