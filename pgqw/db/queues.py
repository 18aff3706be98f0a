"""Queues: pause, resume, a limit on running jobs, a rate; the queue list; the database's settings."""
from __future__ import annotations

from decimal import Decimal

import psycopg

from ._exec import _all, _one
from .models import QueueInfo, QueueRow, QueueSettings

PAUSE_QUEUE_SQL = "select * from pgqw.pause_queue(%(queue)s::text, %(create)s::boolean)"


RESUME_QUEUE_SQL = "select * from pgqw.resume_queue(%(queue)s::text, %(create)s::boolean)"


def pause_queue(conn: psycopg.Connection, *, queue: str, create: bool = False) -> QueueRow:
    """A queue not known yet (no job, setting, worker, task type or schedule) is refused (QU404) unless create."""
    return _one(conn, QueueRow, PAUSE_QUEUE_SQL, {"queue": queue, "create": create})


def resume_queue(conn: psycopg.Connection, *, queue: str, create: bool = False) -> QueueRow:
    """A queue not known yet (no job, setting, worker, task type or schedule) is refused (QU404) unless create."""
    return _one(conn, QueueRow, RESUME_QUEUE_SQL, {"queue": queue, "create": create})


def set_queue_limit(conn: psycopg.Connection, *, queue: str, max_running: int | None,
                    create: bool = False) -> QueueRow:
    """At most max_running jobs of the queue processing at once across all workers; None: no limit. A queue
    not known yet is refused (QU404) unless create."""
    return _one(conn, QueueRow, "select * from pgqw.set_queue_limit(%(queue)s::text, %(max_running)s::integer,"
                " %(create)s::boolean)", {"queue": queue, "max_running": max_running, "create": create})


def set_queue_rate(conn: psycopg.Connection, *, queue: str,
                   jobs_per_second: Decimal | float | int | None, create: bool = False) -> QueueRow:
    """At most jobs_per_second of the queue's jobs started per second across all workers; None: no rate. A
    queue not known yet is refused (QU404) unless create."""
    return _one(conn, QueueRow, "select * from pgqw.set_queue_rate(%(queue)s::text, %(jobs_per_second)s::numeric,"
                " %(create)s::boolean)", {"queue": queue, "jobs_per_second": jobs_per_second, "create": create})


def list_queues(conn: psycopg.Connection) -> list[QueueInfo]:
    """Every known queue by name: paused, max_running, jobs_per_second, depth, running, age of the oldest ready job."""
    return _all(conn, QueueInfo, "select * from pgqw.list_queues()")


def get_queue_settings(conn: psycopg.Connection) -> QueueSettings:
    """The queue_settings row: what every function uses when its argument is left out."""
    return _one(conn, QueueSettings, "select * from pgqw.queue_settings")
