"""The channels the queue notifies on, and the calls that subscribe to them or watch one job."""
from __future__ import annotations

import uuid

import psycopg

from ._exec import _value, _value_async

NOTIFY_CHANNEL = "pgqw_jobs"


# A job comes due later: payload '<ms> <queue>' ('<ms>+ <queue>': and more of that queue after it), <ms> on the
# server's clock when it was sent (enqueue_job, enqueue_jobs, mark_failed). Parsed by worker/connection/listener.py.
NOTIFY_AT_CHANNEL = "pgqw_jobs_at"


FINISHED_CHANNEL = "pgqw_finished"  # payload: the id of a job that reached a final state

_WATCH_JOB_SQL = "select pgqw.watch_job(%(job_id)s::uuid)"
_UNWATCH_JOB_SQL = "select pgqw.unwatch_job(%(job_id)s::uuid)"


def listen(conn: psycopg.Connection) -> None:
    """Subscribes an autocommit connection to the wake-ups enqueue_job, release_job,
    retry_dead and sweep_stuck send (payload: the queue name, or '*' for any queue), and to the times
    enqueue_job(s) and mark_failed announce for later (NOTIFY_AT_CHANNEL)."""
    conn.execute(f"listen {NOTIFY_CHANNEL}")
    conn.execute(f"listen {NOTIFY_AT_CHANNEL}")


def listen_finished(conn: psycopg.Connection) -> None:
    """Subscribes an autocommit connection to the notice sent when a job reaches a final state."""
    conn.execute(f"listen {FINISHED_CHANNEL}")


async def listen_finished_async(conn: psycopg.AsyncConnection) -> None:
    await conn.execute(f"listen {FINISHED_CHANNEL}")


def unlisten_finished(conn: psycopg.Connection) -> None:
    conn.execute(f"unlisten {FINISHED_CHANNEL}")


async def unlisten_finished_async(conn: psycopg.AsyncConnection) -> None:
    await conn.execute(f"unlisten {FINISHED_CHANNEL}")


def watch_job(conn: psycopg.Connection, *, job_id: uuid.UUID | str) -> str:
    """This session waits for the job to end: its end is notified on pgqw_finished from now on (LISTEN
    first). Returns the job's status; QN404 when there is no such job."""
    status: str = _value(conn, _WATCH_JOB_SQL, {"job_id": job_id})
    return status


async def watch_job_async(conn: psycopg.AsyncConnection, *, job_id: uuid.UUID | str) -> str:
    status: str = await _value_async(conn, _WATCH_JOB_SQL, {"job_id": job_id})
    return status


def unwatch_job(conn: psycopg.Connection, *, job_id: uuid.UUID | str) -> bool:
    return bool(_value(conn, _UNWATCH_JOB_SQL, {"job_id": job_id}))


async def unwatch_job_async(conn: psycopg.AsyncConnection, *, job_id: uuid.UUID | str) -> bool:
    return bool(await _value_async(conn, _UNWATCH_JOB_SQL, {"job_id": job_id}))
