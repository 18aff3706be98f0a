"""pg-queue-worker: a job queue whose state machine lives in PostgreSQL stored functions.

    import pgqw

    @pgqw.task(queue="emails")
    def send_receipt(payload: Receipt, ctx: pgqw.Context) -> dict: ...

    send_receipt.enqueue(conn, Receipt(order=42))    # in your transaction (psycopg, psycopg2, Django, SQLAlchemy)
    pgqw.Queue(DATABASE_URL)                          # or bound to a pool:
    send_receipt.defer(Receipt(order=42))

The names here are the public API; pgqw.client, pgqw.testing and pgqw.contrib.django say more.
"""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from . import client, hooks
from .client import JobNotFinished, JobNotFound, JobTimeout, Queue
from .tasks import Context, File, PermanentError, Retry, Schedule, Task, task

try:
    __version__ = version("pg-queue-worker")
except PackageNotFoundError:  # imported from a checkout that is not installed
    __version__ = "0+unknown"

__all__ = [
    "Context", "File", "JobNotFinished", "JobNotFound", "JobTimeout", "PermanentError", "Queue", "Retry",
    "Schedule", "Task", "__version__", "client", "hooks", "task",
]
