"""Running a job: its task's handler with the validated payload and a Context, and what came of it.

`concurrency` executor threads take started jobs from a queue; each runs the handler, then hands the
outcome to the recorder, which stores the handler's result with the job's success in one call.
Nothing here decides the queue's state: which failures are permanent is the task's definition
(pgqw.tasks: PermanentError, a payload that no longer validates, Retry.permanent), and everything
else is the stored functions' to judge. `async def` handlers run on one event loop thread.

The hooks registered with pgqw.hooks run around each attempt of a task, where its handler runs: on
the executor thread, or inside the handler's own asyncio task. They see the outcome; they never change it.
"""
from __future__ import annotations

import asyncio
import copy
import logging
import queue
import threading
import time
from typing import Any, Callable, Coroutine

from pgqw import hooks
from pgqw.config import Settings
from pgqw.tasks import Context, Registry, Task, describe_error, result_row
from pgqw.worker.database import Database, WorkerExiting
from pgqw.worker.log import Log, TaskLogger
from pgqw.worker.recorder import Cancelled, Failed, Outcome, Recorder, Succeeded
from pgqw.worker.slots import Running, Slots

# The error text recorded for a failed attempt: the task definitions' rule (pgqw.testing records the same).
describe = describe_error


class AsyncRunner:
    """One event loop in a thread of its own, started at the first async handler, for them all."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="pgqw-async", daemon=True).start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def close(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)


class Executor:
    def __init__(
        self, settings: Settings, tasks: Registry, slots: Slots, log: Log, database: Database,
        recorder: Recorder, *, clock: Callable[[], float] = time.monotonic,
        stopping: Callable[[], bool] = lambda: False, around: hooks.Hooks | None = None,
    ) -> None:
        self.around = hooks.registry if around is None else around  # the hooks around each attempt
        self.settings = settings
        self.tasks = tasks
        self.slots = slots
        self.log = log
        self.database = database
        self.recorder = recorder
        self.clock = clock
        self.stopping = stopping
        self.async_runner = AsyncRunner()
        self._loggers: dict[str, logging.Logger] = {}

    def context(self, run: Running) -> Context:
        logger = self._loggers.get(run.job.type)
        if logger is None:  # logging.getLogger takes the logging module's lock: once per type
            logger = self._loggers.setdefault(run.job.type, logging.getLogger(f"pgqw.task.{run.job.type}"))
        return Context(job=run.job, worker_id=self.settings.worker_id,
                       log=TaskLogger(logger, {**run.fields(), "worker": self.settings.worker_id}),
                       stop_requested=lambda: run.lost or run.state != "running" or self.stopping(),
                       cancel_requested=lambda: run.cancelled)

    def outcome(self, run: Running) -> Outcome:
        """Runs the job's handler, inside the hooks. WorkerExiting (the process is exiting) is raised."""
        job = run.job
        task = self.tasks.get(job.type)
        if task is None:  # a claim takes only this worker's types; a job claimed from psql may not be one
            return Failed(f"this worker has no task {job.type!r} (it runs {', '.join(self.tasks.names())})")
        if task.is_async:
            return self.async_runner.run(self._attempt_async(run, task))
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
        """The attempt's outcome (a failure for an exception); the hooks entered are told of it."""
        error: Exception | None
        outcome: Outcome
        if isinstance(ended, Exception):
            error, outcome = ended, Failed(describe(ended), retryable=not task.is_permanent(ended))
        else:
            error, outcome = None, ended
        if entered is not None:
            failed = outcome if isinstance(outcome, Failed) else None
            entered.leave(hooks.Outcome(
                outcome=hooks.CANCELLED if run.cancelled else hooks.FAILED if failed else hooks.SUCCEEDED,
                duration=time.perf_counter() - started, error=error,
                message=failed.error if failed else None, retryable=bool(failed and failed.retryable)))
        return outcome

    def _hook_error(self, run: Running, hook: hooks.Hook, exc: Exception, when: str) -> None:
        self.log("hook error", f"{run.tag()}: {hooks.hook_name(hook)} raised {when} the handler: {describe(exc)} "
                               "(the attempt goes on)", **run.fields(), hook=hooks.hook_name(hook), error=describe(exc))

    def execute(self, run: Running) -> None:
        outcome = self.outcome(run)
        if run.cancelled:
            # Cancelled while it ran: whatever the handler did, the attempt ends cancelled.
            outcome = Cancelled(note=outcome.error if isinstance(outcome, Failed) else None)
        self.recorder.record(run, outcome, self.clock() - run.started)

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
