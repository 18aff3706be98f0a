"""The worker: wires its parts together and runs them. It holds no queue logic of its own.

Threads for the queue's own work and for plain handlers (blocking code); one event loop for the
`async def` handlers:
  main       loop.MainLoop: sweeps (maintenance/sweeper.py), claims for free slots (job/claimer.py) and
             prunes old finished jobs (maintenance/pruner.py), then waits (wakeup.py)
  executors  `concurrency` threads running plain handlers (job/executor.py); outcomes go to the
             completion strategy (job/completion.py), which records them with job/recorder.py
  async      the event loop running `async def` handlers as tasks, started at the first (executor.py:
             dispatched there from the claim, with no executor thread in between)
  recorder   with WORKER_BATCH_MARK, records the successes in batches (completion.Batch)
  heartbeat  extends the lease of every job still held (connection/heartbeat.py)
  deadlines  ends a job at its deadline: an async handler cancelled, a plain one's thread given up on and
             replaced, the attempt recorded timed out (job/deadlines.py)
  listener   LISTENs and wakes main (connection/listener.py), with WORKER_LISTEN
  scheduler  enqueues the due slots of the schedules table (maintenance/scheduler.py), unless SCHEDULER=0
Held jobs and the cap are job/slots.py; connections and the retry rule connection/database.py; the log
format log.py; signals, the grace and the hand-back shutdown.py.
"""
from __future__ import annotations

import os
import queue
import threading
from typing import Callable, TextIO

from pgqw import hooks
from pgqw.config import Settings
from pgqw.tasks import Registry, load
from pgqw.worker.connection.database import Database, route_pool_log
from pgqw.worker.connection.heartbeat import Heartbeat
from pgqw.worker.connection.listener import Listener
from pgqw.worker.connection.presence import Presence
from pgqw.worker.job.claimer import ClaimRequest, claimer_for
from pgqw.worker.job.completion import completion_for
from pgqw.worker.job.deadlines import Deadlines
from pgqw.worker.job.executor import Executor
from pgqw.worker.job.recorder import Recorder
from pgqw.worker.job.slots import Running, Slots
from pgqw.worker.log import JOB_EVENTS, Log, describe_database, route_task_log
from pgqw.worker.loop import MainLoop
from pgqw.worker.maintenance.pruner import Pruner
from pgqw.worker.maintenance.scheduler import Scheduler
from pgqw.worker.maintenance.sweeper import Sweeper
from pgqw.worker.recycle import Gate, Recycle
from pgqw.worker.service import Part
from pgqw.worker.shutdown import Shutdown, Signals
from pgqw.worker.wakeup import Wakeup


class Worker:
    """One worker process. run() returns the exit code (0 after a clean stop)."""

    def __init__(self, settings: Settings, conninfo: str, *, tasks: Registry | None = None,
                 out: TextIO | None = None, around: hooks.Hooks | None = None) -> None:
        s = self.settings = settings
        self.conninfo = conninfo
        # The task types this worker runs: the modules of --tasks / PGQW_TASKS (pgqw.demo by default).
        self.registry = tasks if tasks is not None else load(s.task_modules)
        self.log = Log(s.worker_id, out, quiet=frozenset() if s.log_jobs else JOB_EVENTS, log_format=s.log_format)
        self.wake = Wakeup()                # main loop: claim now, and when jobs come due later (wakeup.py)
        self.stopping = threading.Event()   # first signal: no more claims
        self.exiting = threading.Event()    # shutdown done: background threads stop retrying
        self.reason = ""

        self.slots = Slots(s.concurrency, on_free=self.wake.set)
        self.database = Database(conninfo, s, self.log, self.exiting)
        self.tasks: queue.Queue[Running | None] = queue.Queue()
        self.recorder = Recorder(s, self.slots, self.log, self.database)
        self.heartbeat = Heartbeat(s, self.slots, self.log, self.database.once, on_db_error=self._db_error,
                                   exiting=self.exiting)
        # How jobs are claimed (WORKER_BATCH_CLAIM) and how successes are recorded (WORKER_BATCH_MARK):
        # each chosen once, here. The batch completion claims for the slots each batch of successes
        # frees, in the transaction that records them.
        # Every claim asks first whether the worker stops, or should make way for a fresh process
        # (recycle.py: WORKER_MAX_JOBS, WORKER_MAX_MEMORY_MB, WORKER_MAX_LEAKED).
        recycle = Recycle(s.max_jobs or None, s.max_memory_mb or None, s.max_leaked,
                          counts=lambda: self.slots.counts, leaked=lambda: self.slots.counts["leaked"])
        self.claimer = claimer_for(s.batch_claim)(
            ClaimRequest(s.worker_id, s.queues, s.lease_ms, tuple(self.registry.names())),
            self.slots, self.log, self.database.once, dispatch=lambda run: self.executor.dispatch(run, self.tasks),
            on_lease=self.heartbeat.adopt,
            stopping=Gate(recycle.reason, stopping=self.stopping.is_set, stop=self.stop, log=self.log))
        self.completion = completion_for(s, self.recorder, self.claimer, self.exiting)
        # Around each attempt: the hooks the task modules registered (pgqw.hooks.registry), or around's.
        self.executor = Executor(s, self.registry, self.slots, self.log, self.database, self.completion,
                                 stopping=self.stopping.is_set, around=around)
        # At a job's deadline: the attempt recorded, the slot freed; an executor thread given up on is replaced.
        self.deadlines = Deadlines(s, self.slots, self.log, self.database, on_leak=self._replace_executor,
                                   exiting=self.exiting)
        self.executors = 0                      # executor threads started (a leaked one is replaced)
        self.sweeper = Sweeper(self.slots, self.log, self.database.once)
        self.presence = Presence(s, self.registry, self.database.once)
        self.listener: Listener | None = None   # with WORKER_LISTEN, from run() on
        self.services: list[Part] = []          # the background services started, from run() on
        self.loop = MainLoop(s, self.claimer, self.sweeper, self.database, self.log,
                             wake=self.wake, stopping=self.stopping, alive=self.presence.alive,
                             pruner=Pruner(s, self.log, self.database.once) if s.prune else None,
                             listening=lambda: self.listener is not None and self.listener.connected())
        # Periodic jobs (scheduler.py): the code's schedules registered at start; its own thread, in every
        # worker unless SCHEDULER=0.
        self.scheduler = Scheduler(self.registry, self.log, self.database.once, exiting=self.exiting)
        self.shutdown = Shutdown(s, self.slots, self.log, self.database)

    def run(self) -> int:
        Signals(self.log, self.stop, stopping=self.stopping.is_set).install()
        route_pool_log(self.log)
        listen_conn = self.database.start()
        # The first sweep comes before anything starts, and any error ends startup: a database
        # without the queue (not migrated) is reported, not retried forever.
        try:
            route_task_log(self.log)
            # Registered before "worker started": once the line is out, the API knows its task types.
            self.presence.start()
            self.scheduler.register()  # after the task types: a schedule needs its type registered
            self._log_started()
            self.sweeper.sweep()
        except BaseException:
            self._close()
            if listen_conn is not None:
                listen_conn.close()
            raise
        # From here on lines are written by a thread of their own (log.py says why), until the end.
        self.log.start()
        services: list[Part] = [self.heartbeat, self.completion, self.deadlines]  # Inline runs nothing of its own
        if self.settings.scheduler:
            services.append(self.scheduler)
        if self.settings.listen:
            self.listener = Listener(lambda: self.database.connect("listen"), self.settings.queues, self.wake,
                                     self.log, self.exiting, conn=listen_conn, on_db_error=self.database.db_error)
            services.append(self.listener)
        self.services = services
        for service in services:
            service.start()
        for _ in range(self.settings.concurrency):
            self._replace_executor()
        try:
            self.loop.run()
        finally:
            self.shutdown.run(self.reason or "main loop ended")
            try:
                self.presence.stop()
            except Exception as exc:  # noqa: BLE001 - the row expires by itself
                self.log("error", f"stop_worker: {exc!r} (the worker shows as gone once its presence expires)",
                         error=repr(exc))
            self._close()
            self.executor.async_runner.close()
            self.shutdown.summary()
            self.log.close()
        return 0

    def stop(self, reason: str = "stop requested") -> None:
        """Begins a graceful stop (what the first SIGTERM/SIGINT does)."""
        self.reason = self.reason or reason
        self.stopping.set()
        self.wake.set()

    def _close(self) -> None:
        self.exiting.set()  # background threads stop retrying; the listener closes within a second
        for service in self.services:
            service.stop()  # each wakes its own wait (the heartbeat's on the slots)
        self.slots.poke()   # whatever else waits on the slots
        self.database.stop()

    def _db_error(self, op: str, exc: BaseException, delay: float) -> None:
        self.database.check_pool()
        self.database.db_error(op, exc, delay)

    def _replace_executor(self) -> None:
        """One more executor thread: at start, and in place of one given up on at a job's deadline."""
        self.executors += 1
        self._thread(f"exec-{self.executors}", lambda: self.executor.loop(self.tasks))

    def _thread(self, name: str, target: Callable[[], None]) -> None:
        threading.Thread(target=target, name=f"pgqw-{name}", daemon=True).start()

    def _log_started(self) -> None:
        s = self.settings
        lease = f"{s.lease_ms}ms" if s.lease_ms else "queue_settings"
        heartbeat = f"{s.heartbeat_interval_ms}ms" if s.heartbeat_interval_ms else "a third of the lease"
        retry = f"base {s.retry_base_delay_ms}ms" if s.retry_base_delay_ms is not None else "queue_settings"
        self.log(
            "worker started:",
            f"pid {os.getpid()}, concurrency {s.concurrency}, queues {','.join(s.queues) if s.queues else 'all'}, "
            f"listen {'on' if s.listen else 'off'}, batch claim {'on' if s.batch_claim else 'off'}, "
            f"batch mark {'on' if s.batch_mark else 'off'}, job lines {'on' if s.log_jobs else 'off'}, "
            f"poll {s.poll_interval_ms}ms, sweep {s.sweep_interval_ms}ms, "
            f"heartbeat {heartbeat}, lease {lease}, retry {retry}, "
            f"grace {s.shutdown_grace_ms}ms, tasks {','.join(self.registry.names())}, "
            f"database {describe_database(self.conninfo)}",
            pid=os.getpid(), concurrency=s.concurrency, queues=list(s.queues) if s.queues else None,
            tasks=self.registry.names(), database=describe_database(self.conninfo),
        )
        every = s.heartbeat_interval_ms or (max(1, s.lease_ms // 3) if s.lease_ms else None)
        if s.lease_ms and every is not None and every >= s.lease_ms:
            self.heartbeat.warn(every, s.lease_ms)
