"""pg-queue-worker: a job queue whose state machine lives in PostgreSQL stored functions.

    import pgqw

    @pgqw.task(queue="emails")
    def send_receipt(payload: Receipt, ctx: pgqw.Context) -> dict: ...

    send_receipt.enqueue(conn, Receipt(order=42))    # in your transaction (psycopg, psycopg2, Django, SQLAlchemy)
    pgqw.Queue(DATABASE_URL)                          # or bound to a pool:
    send_receipt.defer(Receipt(order=42))

The names here are the public API; pgqw.client, pgqw.testing, pgqw.hooks and pgqw.contrib.django say
more. They are imported when first used, so `import pgqw.app` (the API, which runs no task code) does not
load the task machinery.
"""
from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import client, hooks
    from .client import JobNotFinished, JobNotFound, JobTimeout, Queue, workflow
    from .errors import Snooze
    from .tasks import Context, File, PermanentError, Retry, Schedule, Task, task

try:
    __version__ = version("pg-queue-worker")
except PackageNotFoundError:  # imported from a checkout that is not installed
    __version__ = "0+unknown"

# Public name → (module, attribute; None: the module itself).
_PUBLIC: dict[str, tuple[str, str | None]] = {
    "client": ("pgqw.client", None), "hooks": ("pgqw.hooks", None),
    "JobNotFinished": ("pgqw.client", "JobNotFinished"), "JobNotFound": ("pgqw.client", "JobNotFound"),
    "JobTimeout": ("pgqw.client", "JobTimeout"), "Queue": ("pgqw.client", "Queue"),
    "Context": ("pgqw.tasks", "Context"), "File": ("pgqw.tasks", "File"),
    "PermanentError": ("pgqw.tasks", "PermanentError"), "Retry": ("pgqw.tasks", "Retry"),
    "Schedule": ("pgqw.tasks", "Schedule"), "Task": ("pgqw.tasks", "Task"), "task": ("pgqw.tasks", "task"),
    "Snooze": ("pgqw.errors", "Snooze"), "workflow": ("pgqw.client", "workflow"),
}

__all__ = [
    "Context", "File", "JobNotFinished", "JobNotFound", "JobTimeout", "PermanentError", "Queue", "Retry",
    "Schedule", "Snooze", "Task", "__version__", "client", "hooks", "task", "workflow",
]
assert set(__all__) == {"__version__", *_PUBLIC}


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'pgqw' has no attribute {name!r}")
    module, attribute = _PUBLIC[name]
    value = importlib.import_module(module)
    if attribute is not None:
        value = getattr(value, attribute)
    globals()[name] = value
    return value
