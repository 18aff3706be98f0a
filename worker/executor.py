"""Running a job: the handler of its type, with a Context, and what came of it (an Outcome).

`concurrency` executor threads take started jobs from a queue; each runs the handler, then hands the
outcome to the recorder. Nothing here talks to the queue's state: a handler's own database calls go
through ctx.db (retried on connection errors, so a dropped connection does not cost an attempt), and
ctx.finish stores the handler's output and the job's success in one transaction.
"""
from __future__ import annotations

import queue
import time
from typing import Any, Callable, Mapping

import psycopg

from pgqw import db
from pgqw.config import Settings
from pgqw.listing import InvalidPayload
from pgqw.worker.database import Database, WorkerExiting
from pgqw.worker.handlers import Context, Handler, PermanentError, TransientError
from pgqw.worker.log import Log, short
from pgqw.worker.recorder import NOT_HELD, Failed, Outcome, Recorder, Refused, ResultRefused, Succeeded
from pgqw.worker.slots import Running, Slots


def describe(exc: BaseException) -> str:
    """The error text recorded for a failed attempt."""
    if isinstance(exc, (PermanentError, TransientError)):
        return str(exc) or type(exc).__name__
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Executor:
    def __init__(
        self, settings: Settings, handlers: Mapping[str, Handler], slots: Slots, log: Log, database: Database,
        recorder: Recorder, *, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.handlers = dict(handlers)
        self.slots = slots
        self.log = log
        self.database = database
        self.recorder = recorder
        self.clock = clock

    def context(self, run: Running) -> Context:
        job = run.job
        op = f"{job.type} {short(job.id)}"

        def complete(store: Callable[[psycopg.Connection], Any]) -> Any:
            """The handler's output and the job's success in one transaction (see worker/handlers.py).
            A retry after a lost reply is answered already_recorded by mark_succeeded and commits."""
            def in_transaction(conn: psycopg.Connection) -> Any:
                with conn.transaction():
                    result = store(conn)
                    db.mark_succeeded(conn, job_id=job.id, worker_id=self.settings.worker_id, attempt=job.attempts)
                return result

            self.slots.move(run, "marking")
            try:
                result = self.database.call(f"{op} complete", in_transaction)
            except psycopg.Error as exc:
                if exc.sqlstate in NOT_HELD:
                    raise ResultRefused(exc) from exc
                raise
            run.recorded = True
            return result

        return Context(settings=self.settings, worker_id=self.settings.worker_id,
                       db=lambda fn: self.database.call(op, fn), complete=complete)

    def outcome(self, run: Running) -> Outcome:
        """Runs the job's handler. WorkerExiting (the process is exiting) is raised."""
        job = run.job
        handler = self.handlers.get(job.type)
        try:
            if handler is None:
                raise PermanentError(
                    f"unknown job type {job.type!r} (this worker handles {', '.join(sorted(self.handlers))})")
            note = handler(job, self.context(run))
        except WorkerExiting:
            raise
        except ResultRefused as exc:
            return Refused(exc.error)
        except (PermanentError, InvalidPayload) as exc:
            return Failed(describe(exc), retryable=False)
        except Exception as exc:
            return Failed(describe(exc))
        return Succeeded(note, recorded=run.recorded)

    def execute(self, run: Running) -> None:
        outcome = self.outcome(run)
        self.recorder.record(run, outcome, self.clock() - run.started)

    def loop(self, tasks: "queue.Queue[Running | None]") -> None:
        """One executor thread: jobs from tasks until None, or until the process exits."""
        while (run := tasks.get()) is not None:
            try:
                self.execute(run)
            except WorkerExiting:
                return
            except BaseException as exc:  # never lose an executor thread
                self.log("error", f"{run.tag()}: unexpected {describe(exc)}")
                self.slots.free(run)
