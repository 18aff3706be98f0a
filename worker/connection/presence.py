"""Presence: the worker registers its task types and itself at start, says it is alive with every
sweep (register_worker; alive for three sweep intervals), and that it stopped at a clean exit
(stop_worker). What the workers table shows: who is alive, with which queues and task types, and so
which waiting jobs no live worker can take."""
from __future__ import annotations

import os
import socket

from pgqw import db
from pgqw.config import Settings
from pgqw.tasks import Registry
from pgqw.worker.connection.database import Run


class Presence:
    def __init__(self, settings: Settings, tasks: Registry, run: Run) -> None:
        self.settings = settings
        self.tasks = tasks
        self.run = run
        self.ttl_ms = min(max(3 * settings.sweep_interval_ms, 3000), 3_600_000)

    def register(self) -> None:
        """The task types (their schemas and the code's defaults) and this worker, at start."""
        self.run(lambda conn: db.register_task_types(conn, types=[t.registration() for t in self.tasks]))
        self.alive()

    def alive(self) -> None:
        s = self.settings
        self.run(lambda conn: db.register_worker(
            conn, worker_id=s.worker_id, task_types=self.tasks.names(), queues=s.queues,
            concurrency=s.concurrency, hostname=socket.gethostname(), pid=os.getpid(), ttl_ms=self.ttl_ms))

    def stopped(self) -> None:
        self.run(lambda conn: db.stop_worker(conn, worker_id=self.settings.worker_id))

    # The service protocol's names (service.py): registered at start, stopped at a clean exit. Each is
    # one try: at start an error ends startup; at the exit the row expires by itself.
    start = register
    stop = stopped
