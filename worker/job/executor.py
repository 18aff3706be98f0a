"""Running a job: its task's handler with the validated payload and a Context, and what came of it.

`concurrency` executor threads take started jobs from a queue; each runs the handler, then hands the
outcome to the completion strategy (completion.py), which records it: the handler's result is stored
with the job's success in one call.
Nothing here decides the queue's state: which failures are permanent is the task's definition
(pgqw.tasks: PermanentError, a payload that no longer validates, Retry.permanent), and everything
else is the stored functions' to judge.

`async def` handlers run on one event loop, in a thread of its own (event_loop.py), and never through
the executor threads: dispatch() starts a claimed job's handler there as a task at once, and the task
hands its outcome to the completion strategy itself. A success the batch completion records with
others is only queued, on the loop; an outcome recorded with a call of its own (a failure, a snooze,
a file, WORKER_BATCH_MARK=0, a progress still to write) is recorded on a thread of the loop's pool, so
the loop never waits on the database. A job with an async handler thus costs no thread hand-off.

The hooks registered with pgqw.hooks run around each attempt of a task, where its handler runs: on
the executor thread, or inside the handler's own asyncio task. They see the outcome; they never change it.

At a job's deadline (deadlines.py) an async handler's task is cancelled, and its executor moves on at
once; a plain handler runs on in its executor thread, which is given up on (`leaked`): whatever it returns
is recorded as usual, and refused (its lease token no longer holds the job), and then the thread ends, a
new one having taken its place. A job whose deadline came before its handler started is not run.

ctx.progress keeps the value on the job's Running for the heartbeat (slots.progress); one the heartbeat
has not written when the handler ends is written before the outcome is recorded. ctx.transaction gives
the handler a pooled connection in a transaction whose end records the success (mark_succeeded, with the
last progress, on that connection): the block's writes and the success commit together. A refusal there
(QL409: the token no longer holds the job; QK409: a cancel was asked for) rolls it all back, and the
attempt is handled as the recorder handles that refusal; after a committed block the job has succeeded,
and what the handler returns is not recorded again.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import logging
import queue
import time
from typing import Any, Callable, Iterator

import psycopg

from pgqw import db, errors, hooks
from pgqw.config import Settings
from pgqw.errors import Snooze
from pgqw.tasks import Context, Registry, Task, describe_error, result_row
from pgqw.worker.connection.database import Database
from pgqw.worker.job.completion import Completion
from pgqw.worker.job.event_loop import EventLoop, LoopTask
from pgqw.worker.job.recorder import NOT_HELD, Cancelled, Failed, Outcome, Snoozed, Succeeded
from pgqw.worker.job.slots import Running, Slots
from pgqw.worker.log import Log, TaskLogger, short
from pgqw.worker.service import WorkerExiting

# The error text recorded for a failed attempt: the task definitions' rule (pgqw.testing records the same).
describe = describe_error


class Executor:
    def __init__(
        self, settings: Settings, tasks: Registry, slots: Slots, log: Log, database: Database,
        completion: Completion, *, clock: Callable[[], float] = time.monotonic,
        stopping: Callable[[], bool] = lambda: False, around: hooks.Hooks | None = None,
    ) -> None:
        self.around = hooks.registry if around is None else around  # the hooks around each attempt
        self.settings = settings
        self.tasks = tasks
        self.slots = slots
        self.log = log
        self.database = database
        self.completion = completion  # records each outcome (inline, or successes in batches)
        self.clock = clock
        self.stopping = stopping
        self.async_runner = EventLoop()
        self._loggers: dict[str, logging.Logger] = {}

    def context(self, run: Running) -> Context:
        logger = self._loggers.get(run.job.type)
        if logger is None:  # logging.getLogger takes the logging module's lock: once per type
            logger = self._loggers.setdefault(run.job.type, logging.getLogger(f"pgqw.task.{run.job.type}"))
        return Context(job=run.job, worker_id=self.settings.worker_id,
                       log=TaskLogger(logger, {**run.fields(), "worker": self.settings.worker_id}),
                       stop_requested=lambda: run.lost or run.state != "running" or self.stopping(),
                       cancel_requested=lambda: run.cancelled,
                       on_progress=lambda text: self.slots.progress(run, text),
                       open_transaction=lambda result: self._transaction(run, result),
                       read=lambda op, fn: self.database.call(f"{op} {short(run.job.id)}", fn))

    @contextlib.contextmanager
    def _transaction(self, run: Running, result: Any) -> Iterator[psycopg.Connection]:
        """ctx.transaction: the block on a pooled connection in a transaction, then the job's last
        progress and its success (mark_succeeded with result) in the same transaction. A refusal of
        the success is kept on the run (run.transacted) for execute(), then raised into the handler."""
        row = result_row(result)
        job = run.job
        recording = False
        try:
            with self.database.connection() as conn, conn.transaction():
                yield conn
                recording = True
                if not self.slots.move(run, "marking"):
                    # Its deadline came, or the worker gave it back at shutdown: the attempt is ending
                    # without this handler, so its writes are not committed.
                    raise RuntimeError(f"the attempt is {run.state}: the transaction is rolled back")
                with self.slots.lock:
                    text, run.progress = run.progress, None
                if text is not None:
                    self._write_progress(run, text, conn)
                db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token, result=row)
        except psycopg.Error as exc:
            if recording and errors.is_error(exc, *NOT_HELD, errors.CancelRequested):
                run.transacted = exc
            raise
        run.transacted = "succeeded"

    def _write_progress(self, run: Running, text: str, conn: psycopg.Connection | None = None) -> None:
        """A progress the heartbeat has not written: written now, under the lease token (on conn, in a
        savepoint of its transaction; else a call of its own). A refusal is logged, not raised."""
        job = run.job
        lease_ms = self.settings.lease_ms or run.lease_ms
        try:
            if conn is not None:
                with conn.transaction():
                    db.heartbeat(conn, leases=[(job.id, job.lease_token)], lease_ms=lease_ms, progress=[text])
            else:
                self.database.call(f"heartbeat {short(job.id)}", lambda c: db.heartbeat(
                    c, leases=[(job.id, job.lease_token)], lease_ms=lease_ms, progress=[text]))
        except psycopg.Error as exc:
            self.log("error", f"{run.tag()}: progress not written: {exc.sqlstate} {exc.diag.message_primary}",
                     **run.fields(), sqlstate=exc.sqlstate, error=exc.diag.message_primary)

    def outcome(self, run: Running) -> Outcome | None:
        """Runs the job's handler, inside the hooks. WorkerExiting (the process is exiting) is raised.
        None: its deadline came first (deadlines.py records the attempt)."""
        job = run.job
        task = self.tasks.get(job.type)
        if task is None:  # a claim takes only this worker's types; a job claimed from psql may not be one
            return Failed(f"this worker has no task {job.type!r} (it runs {', '.join(self.tasks.names())})")
        if task.is_async:
            return self._async_outcome(run, task)
        # Set before the state is read, as the deadlines' watch sets the state before it reads this (under
        # the GIL): either this thread sees the job timing out and does not run it, or the watch sees
        # the handler running and gives this thread up (run.leaked).
        run.in_handler = True
        try:
            if run.state != "running":
                return None
            return self._attempt(run, task)
        finally:
            run.in_handler = False

    def dispatch(self, run: Running, threads: queue.Queue[Running | None]) -> None:
        """Hands a started job to where its handler runs: an async handler's task on the event loop, at
        once; a plain handler to the executor threads' queue."""
        task = self.tasks.get(run.job.type)
        if task is not None and task.is_async:
            self.start_async(run, task)
        else:
            threads.put(run)

    def start_async(self, run: Running, task: Task[Any]) -> LoopTask:
        """An async handler's job run on the event loop, from its handler to its recorded outcome; the
        future set before the state is read (see outcome()), so a deadline either cancels its task or
        comes before it starts."""
        future = run.future = self.async_runner.start(self._execute_async(run, task))
        if run.state == "timing out":  # (the task itself may have moved it on to "marking" already)
            future.cancel()
        return future

    async def _execute_async(self, run: Running, task: Task[Any]) -> None:
        """execute() of an async handler, as a task on the event loop."""
        try:
            if run.state != "running":
                return  # its deadline came first: deadlines.py records the attempt
            outcome = await self._attempt_async(run, task)
            if run.transacted is None:
                # Marking from here on, before any wait: a deadline no longer ends it, shutdown waits for it.
                if not self.slots.move(run, "marking"):
                    return  # its deadline came meanwhile (deadlines.py records it), or it is being handed back
                outcome = self.settled(run, outcome)
            if run.transacted is None and run.progress is None and self.completion.hands_off(outcome):
                self.finish(run, outcome)  # only queued for the batch: nothing waits here
            else:
                await asyncio.get_running_loop().run_in_executor(None, self.finish, run, outcome)
        except (asyncio.CancelledError, WorkerExiting):
            return  # cancelled at its deadline (deadlines.py records it), or the process is exiting
        except BaseException as exc:  # noqa: BLE001 - never lose a slot
            self.log("error", f"{run.tag()}: unexpected {describe(exc)}", **run.fields(), error=describe(exc))
            self.slots.free(run)

    def _async_outcome(self, run: Running, task: Task[Any]) -> Outcome | None:
        """outcome() of an async handler: its outcome from the event loop (nothing recorded), or None once
        its task was cancelled at its deadline (the future set before the state is read)."""
        future = run.future = self.async_runner.start(self._attempt_async(run, task))
        try:
            if run.state != "running":
                future.cancel()
            return future.result()
        except concurrent.futures.CancelledError:
            return None
        finally:
            run.future = None

    def _attempt(self, run: Running, task: Task[Any]) -> Outcome:
        """A plain handler on this thread, inside the hooks."""
        job = run.job
        entered = self._enter(run)
        started = time.perf_counter()
        try:
            result = result_row(task.fn(task.parse(job.payload), self.context(run)))
        except WorkerExiting:
            if entered is not None:
                entered.close()
            raise
        except Exception as exc:  # noqa: BLE001 - whatever a handler raises is its attempt's outcome
            return self._ended(run, task, entered, started, exc)
        return self._ended(run, task, entered, started, Succeeded(result=result))

    async def _attempt_async(self, run: Running, task: Task[Any]) -> Outcome:
        """outcome() of an async handler: the hooks run in the handler's own task, on the event loop."""
        entered = self._enter(run)
        started = time.perf_counter()
        try:
            result = result_row(await task.fn(task.parse(run.job.payload), self.context(run)))
        except WorkerExiting:
            if entered is not None:
                entered.close()
            raise
        except asyncio.CancelledError as exc:
            if run.state != "timing out":
                # Raised by the handler itself (a cancelled inner task let through), not a cancel at its
                # deadline: a failure like any other, so the attempt is recorded and its slot freed.
                said = f": {exc}" if str(exc) else ""
                return self._ended(run, task, entered, started, RuntimeError(f"the handler raised CancelledError{said}"))
            if entered is not None:  # cancelled at its deadline
                error = TimeoutError("cancelled at its deadline")
                entered.leave(hooks.Outcome(outcome=hooks.CANCELLED if run.cancelled else hooks.FAILED,
                                            duration=time.perf_counter() - started, error=error,
                                            message=str(error), retryable=not run.cancelled))
            raise
        except Exception as exc:  # noqa: BLE001 - whatever a handler raises is its attempt's outcome
            return self._ended(run, task, entered, started, exc)
        return self._ended(run, task, entered, started, Succeeded(result=result))

    def _enter(self, run: Running) -> hooks.Entered | None:
        if not len(self.around):
            return None
        job = run.job
        attempt = hooks.Attempt(job_id=job.id, type=job.type, queue=job.queue, attempt=job.attempts,
                                max_attempts=job.max_attempts, payload=copy.deepcopy(job.payload),
                                worker_id=self.settings.worker_id)
        return self.around.enter(attempt, lambda hook, exc, when: self._hook_error(run, hook, exc, when))

    def _ended(self, run: Running, task: Task[Any], entered: hooks.Entered | None, started: float,
               ended: Succeeded | Exception) -> Outcome:
        """The attempt's outcome (a failure for an exception, a snooze for Snooze); the hooks entered are
        told of it."""
        error: Exception | None
        outcome: Outcome
        if isinstance(ended, Snooze):  # not a failure: the job is put off, the attempt given back
            error, outcome = None, Snoozed(delay_ms=ended.delay_ms, until=ended.until)
        elif isinstance(ended, Exception):
            error, outcome = ended, Failed(describe(ended), retryable=not task.is_permanent(ended))
        else:
            error, outcome = None, ended
        if entered is not None:
            failed = outcome if isinstance(outcome, Failed) else None
            entered.leave(hooks.Outcome(
                outcome=hooks.CANCELLED if run.cancelled else hooks.FAILED if failed
                else hooks.SNOOZED if isinstance(outcome, Snoozed) else hooks.SUCCEEDED,
                duration=time.perf_counter() - started, error=error,
                message=failed.error if failed else None, retryable=bool(failed and failed.retryable)))
        return outcome

    def _hook_error(self, run: Running, hook: hooks.Hook, exc: Exception, when: str) -> None:
        self.log("hook error", f"{run.tag()}: {hooks.hook_name(hook)} raised {when} the handler: {describe(exc)} "
                               "(the attempt goes on)", **run.fields(), hook=hooks.hook_name(hook), error=describe(exc))

    def execute(self, run: Running) -> None:
        """Runs the job's handler and records its outcome; returns once it is recorded (an async
        handler's as its task on the event loop records it, dispatch()'s way)."""
        task = self.tasks.get(run.job.type)
        if task is not None and task.is_async:
            with contextlib.suppress(concurrent.futures.CancelledError):
                self.start_async(run, task).result()
            return
        outcome = self.outcome(run)
        if outcome is None:
            return  # its deadline came first: deadlines.py recorded the attempt
        self.finish(run, self.settled(run, outcome))

    @staticmethod
    def settled(run: Running, outcome: Outcome) -> Outcome:
        """The outcome to record, decided once: a job cancelled while it ran ends cancelled, whatever
        its handler did. (A cancel that comes later is the database's to see: mark_succeeded refuses
        with QK409, and the recorder records the cancellation.)"""
        if run.cancelled and run.transacted is None:
            return Cancelled(note=outcome.error if isinstance(outcome, Failed) else None)
        return outcome

    def finish(self, run: Running, outcome: Outcome) -> None:
        """What came of a handler (settled()), recorded: by its own transaction, or by the completion
        strategy after the last progress."""
        if run.transacted is not None:
            # ctx.transaction recorded the success, or its refusal rolled the block back.
            refusal = None if run.transacted == "succeeded" else run.transacted
            self.completion.recorder.transacted(run, refusal, self.clock() - run.started)
            return
        with self.slots.lock:
            text, run.progress = run.progress, None
        if text is not None and not run.lost:
            self._write_progress(run, text)  # the last progress, before the outcome ends the attempt
        self.completion.record(run, outcome, self.clock() - run.started)

    def loop(self, tasks: queue.Queue[Running | None]) -> None:
        """One executor thread: jobs from tasks until None, or until the process exits."""
        while (run := tasks.get()) is not None:
            try:
                self.execute(run)
            except WorkerExiting:
                return
            except BaseException as exc:  # never lose an executor thread
                self.log("error", f"{run.tag()}: unexpected {describe(exc)}", **run.fields(), error=describe(exc))
                self.slots.free(run)
            if run.leaked:
                return  # given up on at the job's deadline: another thread took this one's place
