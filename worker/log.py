"""The worker's log: one line per event on stdout, in order, flushed as soon as it is written.

    16:43:07.167Z [w1] start   ba1b4d28 attempt 1/5  (running 5/5, peak 5)

Tests and operators grep these lines by event (the word after the worker id), so an event's name and
the shape of its line are part of the worker's interface (docs/worker.md lists them). With
WORKER_LOG_FORMAT=json each line is one JSON object instead: the same event and text, and the fields
its caller gave (`log(event, text, job_id=..., outcome=...)`), for a log shipper to index.

What handlers log through ctx.log goes to Python's logging (pgqw.task.<type>), for the application's
own handlers; the worker prints it as `task` lines only when no other handler takes it (route_task_log).
"""
from __future__ import annotations

import json
import logging
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Any, Callable, MutableMapping, TextIO

import psycopg
from psycopg.conninfo import conninfo_to_dict

from pgqw.config import LOG_FORMATS

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


def iso(at: datetime | None = None) -> str:
    """2025-01-01T16:43:07.167Z (the time now, or at's)"""
    if at is not None:
        at = at.astimezone(timezone.utc)
        return f"{at:%Y-%m-%dT%H:%M:%S}.{at.microsecond // 1000:03d}Z"
    whole, part = divmod(time.time_ns() // 1_000_000, 1000)
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(whole))}.{part:03d}Z"


def short(job_id: uuid.UUID | str) -> str:
    return str(job_id)[:8]


def job_fields(job: Any) -> dict[str, Any]:
    """A job's fields in a JSON line and on a task's log records (job: a db.Job)."""
    return {"job_id": str(job.id), "type": job.type, "queue": job.queue, "attempt": job.attempts,
            "max_attempts": job.max_attempts}


def ms(seconds: float) -> float:
    """A duration in the JSON lines: milliseconds, to a tenth."""
    return round(seconds * 1000, 1)


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
# A JSON line's `level`, by event (any other event: info). A `task` line has its record's level.
LEVELS = {
    "error": "error", "db error": "error", "db pool": "error", "schedule error": "error", "hook error": "error",
    "dead": "error", "failed": "warning", "warning": "warning", "lost": "warning", "not handed back": "warning",
    "ignored late result": "warning", "exit": "warning", "timed out": "warning", "leaked": "warning",
    "died": "error",
}


class Log:
    """`log(event, text, **fields)` writes `<time> [<worker id>] <event padded to 7> <text>`, unless the
    event is one of `quiet` (then it writes nothing). With log_format "json" it writes one JSON object
    instead: `time`, `level`, `worker`, `event`, the fields (JSON values: job_id, type, queue, attempt,
    outcome, duration_ms, error, ...) and `message`, the text. The text format leaves the fields out.

    By default each line is written and flushed by the caller. After start() a writer thread does the
    writing: a caller only appends its line to a list, and the writer writes what has gathered with one
    write and one flush. Lines come out in the order they were logged, as soon as the writer runs. Why: a
    flush is a system call, and CPython lets other threads take the interpreter lock during it; the main
    loop, logging a `start` line per claimed job, then waited behind the executor threads on every line
    and claimed smaller batches (docs/benchmarks.md, "The worker runtime"). close() writes what is
    left and stops the writer."""

    def __init__(self, worker_id: str, out: TextIO | None = None,
                 now: Callable[[], datetime | None] = lambda: None, *, quiet: frozenset[str] = frozenset(),
                 log_format: str = "text") -> None:
        if log_format not in LOG_FORMATS:
            raise ValueError(f"log format {log_format!r}: text or json")
        self.worker_id = worker_id
        self.quiet = quiet
        self.json = log_format == "json"
        self.out = out or sys.stdout
        self._now = now  # a fixed time in tests; None: the current time
        # Reentrant: a signal handler may log while the thread it interrupted holds it.
        self._cond = threading.Condition(threading.RLock())
        self._pending: list[str] = []   # lines logged, not yet written (with a writer)
        self._writer: threading.Thread | None = None
        self._closing = False

    def line(self, event: str, text: str = "", /, **fields: Any) -> str:
        if self.json:
            record = {"time": iso(self._now()), "level": LEVELS.get(event, "info"), "worker": self.worker_id,
                      "event": event.rstrip(":"), **fields, "message": text}
            return json.dumps(record, ensure_ascii=False, default=str)
        return f"{clock(self._now())} [{self.worker_id}] {event:<7} {text}".rstrip()

    def __call__(self, event: str, text: str = "", /, **fields: Any) -> None:
        if event in self.quiet:
            return
        line = self.line(event, text, **fields) + "\n"
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


# The job's fields on a task's log records (`extra`), as in the JSON lines.
TASK_FIELDS = ("job_id", "type", "queue", "attempt", "max_attempts", "worker")


class TaskLogger(logging.LoggerAdapter):  # type: ignore[type-arg,unused-ignore]  # generic in typeshed only
    """ctx.log: the task type's logger, with the job's fields added to every record (`extra`). A
    handler's own `extra=` is kept beside them (the job's fields win a clash)."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        own = kwargs.get("extra")
        kwargs["extra"] = {**own, **self.extra} if own else self.extra  # type: ignore[dict-item]
        return msg, kwargs


class ToWorkerLog(logging.Handler):
    """The worker's own line for a task's record (`task  <job> attempt n/m: message`, at INFO and above),
    written only when no other handler takes the record: none on a logger it passes on its way to the
    root (the rule Python applies before its last-resort handler). An application that configured
    logging prints the record its way instead; one that did not gets the worker's line."""

    def __init__(self, log: Log) -> None:
        super().__init__(logging.INFO)
        self.log = log
        self._loggers: dict[str, logging.Logger] = {}

    def handled_elsewhere(self, record: logging.LogRecord) -> bool:
        logger = self._loggers.get(record.name)
        if logger is None:  # logging.getLogger takes the logging module's lock: once per name
            logger = self._loggers.setdefault(record.name, logging.getLogger(record.name))
        node: logging.Logger | None = logger
        while node is not None:
            if any(h is not self for h in node.handlers):
                return True
            if not node.propagate:
                return False
            node = node.parent
        return False

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if self.handled_elsewhere(record):
                return
            message = record.getMessage()
            fields = {k: getattr(record, k) for k in TASK_FIELDS if k in record.__dict__ and k != "worker"}
            job_id = fields.get("job_id")
            if job_id is not None:
                message = f"{short(job_id)} attempt {fields.get('attempt')}/{fields.get('max_attempts')}: {message}"
            if record.exc_info and record.exc_info[1] is not None:
                fields["error"] = first_line(record.exc_info[1])
            self.log("task", message, level=record.levelname.lower(), logger=record.name, **fields)
        except Exception:  # noqa: BLE001 - logging's rule: a handler never raises into the caller
            self.handleError(record)


def route_task_log(log: Log) -> None:
    """What handlers log through ctx.log (the pgqw.task.<type> loggers): propagated to the root logger,
    so the application's handlers get it, and written as the worker's `task` lines when no other handler
    takes it (ToWorkerLog). The loggers log INFO and above unless the application set a level (on
    pgqw.task, or one of INFO or below on a logger above it)."""
    task_logger = logging.getLogger("pgqw.task")
    if task_logger.level == logging.NOTSET and task_logger.getEffectiveLevel() > logging.INFO:
        task_logger.setLevel(logging.INFO)
    # One worker's line handler at a time: a worker run again in the same process replaces its own.
    task_logger.handlers[:] = [h for h in task_logger.handlers if not isinstance(h, ToWorkerLog)] + [ToWorkerLog(log)]
