"""What handlers log through ctx.log: Python logging records (pgqw.task.<type>) that reach the
application's handlers with the job's fields, and the worker's own `task` line when nothing else
takes them."""
from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from pgqw.tasks import Registry
from pgqw.worker.job.completion import Inline
from pgqw.worker.job.executor import Executor
from pgqw.worker.job.recorder import Outcome, Recorder, Succeeded
from pgqw.worker.job.slots import Running, Slots
from pgqw.worker.log import Log, route_task_log
from tests.worker.parts import AT, Direct, Lines, claimed, settings


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def root_handlers(*handlers: logging.Handler) -> Iterator[None]:
    """The root logger with exactly these handlers meanwhile (pytest's own capture handlers set aside,
    in place, so pytest finds its list as it left it)."""
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers[:] = list(handlers)
    try:
        yield
    finally:
        root.handlers[:] = saved


def _tasks() -> Registry:
    r = Registry()

    @r.task("look", model=dict)
    def look(payload: dict, ctx) -> None:
        ctx.log.info("looked at %s", payload["n"], extra={"customer": 7})
        ctx.log.debug("a detail")

    @r.task("crash", model=dict)
    def crash(payload: dict, ctx) -> None:
        try:
            raise ZeroDivisionError("division by zero")
        except ZeroDivisionError:
            ctx.log.exception("could not divide")
            raise

    return r


def _run(conn: psycopg.Connection, type_: str, *, log_format: str = "text") -> tuple[Running, Outcome, Lines]:
    """One attempt of a job of type_ (queue reports) run by an executor, its task log routed to the worker's log."""
    out = Lines()
    worker_log = Log("w1", out, now=lambda: AT, log_format=log_format)
    route_task_log(worker_log)
    slots = Slots(2, clock=lambda: 0.0)
    database = Direct(conn)
    executor = Executor(settings(), _tasks(), slots, worker_log, database,
                        Inline(Recorder(settings(), slots, worker_log, database)), clock=lambda: 1.5)
    run, _, _ = slots.take(claimed(conn, type=type_, payload={"n": 2}, queue="reports"))
    return run, executor.outcome(run), out


def test_task_log_reaches_the_root_handler_with_the_job_fields(conn: psycopg.Connection) -> None:
    collect = Collect()
    with root_handlers(collect):
        run, outcome, out = _run(conn, "look")
    assert outcome == Succeeded(None)
    [record] = [r for r in collect.records if r.name.startswith("pgqw.task")]  # INFO and above by default
    job = run.job
    assert record.name == "pgqw.task.look" and record.levelno == logging.INFO
    assert record.getMessage() == "looked at 2"
    assert (record.job_id, record.type, record.queue, record.attempt, record.max_attempts, record.worker) == (
        str(job.id), "look", "reports", 1, job.max_attempts, "w1")
    assert record.customer == 7  # the handler's own extra is kept beside the job's fields
    # The application's handler took it: the worker does not print it a second time.
    assert out.lines("task") == []


def test_task_log_is_a_worker_line_when_logging_is_not_configured(conn: psycopg.Connection) -> None:
    with root_handlers():
        run, _, out = _run(conn, "look")
    assert out.lines("task") == [f"{run.tag()}: looked at 2"]


def test_task_log_json_line_carries_the_record_level_logger_and_error(conn: psycopg.Connection) -> None:
    with root_handlers():
        run, _, out = _run(conn, "crash", log_format="json")
    [line] = [json.loads(t) for t in out.getvalue().splitlines() if '"event": "task"' in t]
    job = run.job
    assert line == {"time": "2025-01-01T16:43:07.167Z", "level": "error", "worker": "w1", "event": "task",
                    "logger": "pgqw.task.crash", "job_id": str(job.id), "type": "crash", "queue": "reports",
                    "attempt": 1, "max_attempts": job.max_attempts, "error": "division by zero",
                    "message": f"{run.tag()}: could not divide"}


def test_task_log_level_set_by_the_application_is_kept(conn: psycopg.Connection) -> None:
    task_logger = logging.getLogger("pgqw.task")
    before = task_logger.level
    collect = Collect()
    task_logger.setLevel(logging.DEBUG)
    try:
        with root_handlers(collect):
            _, _, out = _run(conn, "look")
    finally:
        task_logger.setLevel(before)
    assert [r.getMessage() for r in collect.records if r.name == "pgqw.task.look"] == ["looked at 2", "a detail"]
    assert out.lines("task") == []


def test_task_log_handler_on_the_pgqw_logger_counts_as_configured(conn: psycopg.Connection) -> None:
    """Any handler on the way to the root takes the record (the rule of Python's last resort)."""
    collect = Collect()
    pgqw_logger = logging.getLogger("pgqw")
    pgqw_logger.addHandler(collect)
    try:
        with root_handlers():
            _, _, out = _run(conn, "look")
    finally:
        pgqw_logger.removeHandler(collect)
    assert [r.getMessage() for r in collect.records] == ["looked at 2"]
    assert out.lines("task") == []
