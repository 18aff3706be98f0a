"""Work that depends on other work: batches, workflows and their reads, limits per key, and the bulk
actions (retry or cancel every job a filter matches, in bounded calls; their _async twins on a psycopg
AsyncConnection)."""
from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Sequence

import psycopg
from psycopg.types.json import Jsonb

from ._exec import _all, _all_async, _maybe, _maybe_async, _one, _value, _value_async
from .jobs import jobs_json
from .models import BatchStatus, EnqueuedJob, ParentResult, QueueRow, WorkflowJob

ENQUEUE_BATCH_SQL = ("select (e.job).*, e.created from pgqw.enqueue_batch(%(jobs)s::jsonb, %(callback)s::jsonb,"
                     " %(key)s::text) e")


def enqueue_batch(conn: psycopg.Connection, *, jobs: Sequence[dict[str, Any]],
                  callback: dict[str, Any] | None = None, idempotency_key: str | None = None) -> list[EnqueuedJob]:
    """The jobs (as enqueue_jobs takes them) as one batch; callback ({type, payload, queue, priority,
    max_attempts}) is enqueued once every one of them has ended, with their counts in payload["batch"].
    Rows in input order; each job's batch_id is the batch's id."""
    return _all(conn, EnqueuedJob, ENQUEUE_BATCH_SQL, {
        "jobs": jobs_json(jobs), "callback": None if callback is None else Jsonb(callback), "key": idempotency_key})


# Both take {"id": the batch's or the workflow's id as text}.
BATCH_STATUS_SQL = "select * from pgqw.batch_status(%(id)s::uuid)"
WORKFLOW_JOBS_SQL = ("select (w.job).*, w.depends_on, w.run_anyway, w.run_anyway_for"
                     " from pgqw.workflow_jobs(%(id)s::uuid) w")


def batch_status(conn: psycopg.Connection, *, batch_id: uuid.UUID | str) -> BatchStatus:
    """The batch's jobs counted by status, and its callback's job once enqueued (QN404: no such batch)."""
    return _one(conn, BatchStatus, BATCH_STATUS_SQL, {"id": str(batch_id)})


async def batch_status_async(conn: psycopg.AsyncConnection, *, batch_id: uuid.UUID | str) -> BatchStatus:
    """batch_status on an async connection."""
    found = await _maybe_async(conn, BatchStatus, BATCH_STATUS_SQL, {"id": str(batch_id)})
    assert found is not None  # batch_status answers one row or raises
    return found


def workflow_jobs(conn: psycopg.Connection, *, workflow_id: uuid.UUID | str) -> list[WorkflowJob]:
    """Every job of the workflow with the parents it waits for, parents first (QN404: no job of it)."""
    return _all(conn, WorkflowJob, WORKFLOW_JOBS_SQL, {"id": str(workflow_id)})


async def workflow_jobs_async(conn: psycopg.AsyncConnection, *,
                              workflow_id: uuid.UUID | str) -> list[WorkflowJob]:
    """workflow_jobs on an async connection."""
    return await _all_async(conn, WorkflowJob, WORKFLOW_JOBS_SQL, {"id": str(workflow_id)})


def parent_results(conn: psycopg.Connection, *, job_id: uuid.UUID | str) -> list[ParentResult]:
    """The parents of the job with their status and result."""
    return _all(conn, ParentResult, "select * from pgqw.parent_results(%(id)s::uuid)", {"id": str(job_id)})


def set_queue_key_limit(conn: psycopg.Connection, *, queue: str, max_running: int | None,
                        create: bool = False) -> QueueRow:
    """At most max_running of the queue's jobs processing per concurrency_key (None: no limit)."""
    found = _maybe(conn, QueueRow, "select * from pgqw.set_queue_key_limit(%(q)s::text, %(n)s::integer, %(c)s::boolean)",
                   {"q": queue, "n": max_running, "c": create})
    assert found is not None
    return found


def _filter(type: str | None, queue: str | None, error: str | None, since: datetime | None,
            until: datetime | None, workflow_id: uuid.UUID | str | None, batch_id: uuid.UUID | str | None,
            limit: int) -> dict[str, Any]:
    return {"type": type, "queue": queue, "error": error, "since": since, "until": until,
            "workflow": None if workflow_id is None else str(workflow_id),
            "batch": None if batch_id is None else str(batch_id), "limit": limit}


RETRY_DEAD_JOBS_SQL = ("select pgqw.retry_dead_jobs(%(type)s::text, %(queue)s::text, %(error)s::text,"
                       " %(since)s::timestamptz, %(until)s::timestamptz, %(workflow)s::uuid, %(batch)s::uuid,"
                       " %(limit)s::integer)")
CANCEL_JOBS_SQL = ("select pgqw.cancel_jobs(%(type)s::text, %(queue)s::text, %(error)s::text,"
                   " %(since)s::timestamptz, %(until)s::timestamptz, %(workflow)s::uuid, %(batch)s::uuid,"
                   " %(statuses)s::text[], %(limit)s::integer)")


def retry_dead_jobs(conn: psycopg.Connection, *, type: str | None = None, queue: str | None = None,
                    error: str | None = None, since: datetime | None = None, until: datetime | None = None,
                    workflow_id: uuid.UUID | str | None = None, batch_id: uuid.UUID | str | None = None,
                    limit: int = 1000) -> int:
    """Retries up to limit dead jobs matching every filter given; how many (fewer than limit: no more)."""
    return int(_value(conn, RETRY_DEAD_JOBS_SQL, _filter(type, queue, error, since, until, workflow_id, batch_id,
                                                          limit)))


def cancel_jobs(conn: psycopg.Connection, *, type: str | None = None, queue: str | None = None,
                error: str | None = None, since: datetime | None = None, until: datetime | None = None,
                workflow_id: uuid.UUID | str | None = None, batch_id: uuid.UUID | str | None = None,
                statuses: Sequence[str] | None = None, limit: int = 1000) -> int:
    """Cancels (or, running, asks to stop) up to limit jobs matching every filter given; how many."""
    return int(_value(conn, CANCEL_JOBS_SQL, _cancel_filter(type, queue, error, since, until, workflow_id, batch_id,
                                                            statuses, limit)))


def _cancel_filter(type: str | None, queue: str | None, error: str | None, since: datetime | None,
                   until: datetime | None, workflow_id: uuid.UUID | str | None, batch_id: uuid.UUID | str | None,
                   statuses: Sequence[str] | None, limit: int) -> dict[str, Any]:
    params = _filter(type, queue, error, since, until, workflow_id, batch_id, limit)
    params["statuses"] = None if statuses is None else list(statuses)
    return params


def _all_batches(conn: psycopg.Connection, call: Any, filters: dict[str, Any]) -> int:
    """Repeats a bounded bulk call until one changes fewer than its limit. Each call is its own transaction
    (conn.transaction() commits it, outside a transaction of the caller's; inside one it is a savepoint and
    the caller's commit decides), so the rows one call locks are let go before the next."""
    limit = filters["limit"]
    total = 0
    while True:
        with conn.transaction():
            n = call(conn, **filters)
        total += n
        if n < limit:
            return total


def retry_dead_all(conn: psycopg.Connection, *, type: str | None = None, queue: str | None = None,
                   error: str | None = None, since: datetime | None = None, until: datetime | None = None,
                   workflow_id: uuid.UUID | str | None = None, batch_id: uuid.UUID | str | None = None,
                   limit: int = 1000) -> int:
    """retry_dead_jobs in bounded calls until no dead job matches; the total retried."""
    return _all_batches(conn, retry_dead_jobs, {
        "type": type, "queue": queue, "error": error, "since": since, "until": until,
        "workflow_id": workflow_id, "batch_id": batch_id, "limit": limit})


def cancel_all(conn: psycopg.Connection, *, type: str | None = None, queue: str | None = None,
               error: str | None = None, since: datetime | None = None, until: datetime | None = None,
               workflow_id: uuid.UUID | str | None = None, batch_id: uuid.UUID | str | None = None,
               statuses: Sequence[str] | None = None, limit: int = 1000) -> int:
    """cancel_jobs in bounded calls until no job matches; the total cancelled or asked to stop."""
    return _all_batches(conn, cancel_jobs, {
        "type": type, "queue": queue, "error": error, "since": since, "until": until,
        "workflow_id": workflow_id, "batch_id": batch_id, "statuses": statuses, "limit": limit})


async def _all_batches_async(conn: psycopg.AsyncConnection, sql: str, params: dict[str, Any]) -> int:
    """_all_batches on an async connection: the bounded statement again until one call changes fewer than
    its limit, each call in a transaction of its own (a savepoint inside the caller's)."""
    total = 0
    while True:
        async with conn.transaction():
            n = int(await _value_async(conn, sql, params))
        total += n
        if n < params["limit"]:
            return total


async def retry_dead_all_async(conn: psycopg.AsyncConnection, *, type: str | None = None, queue: str | None = None,
                               error: str | None = None, since: datetime | None = None,
                               until: datetime | None = None, workflow_id: uuid.UUID | str | None = None,
                               batch_id: uuid.UUID | str | None = None, limit: int = 1000) -> int:
    """retry_dead_all on an async connection."""
    return await _all_batches_async(conn, RETRY_DEAD_JOBS_SQL, _filter(type, queue, error, since, until, workflow_id,
                                                                        batch_id, limit))


async def cancel_all_async(conn: psycopg.AsyncConnection, *, type: str | None = None, queue: str | None = None,
                           error: str | None = None, since: datetime | None = None, until: datetime | None = None,
                           workflow_id: uuid.UUID | str | None = None, batch_id: uuid.UUID | str | None = None,
                           statuses: Sequence[str] | None = None, limit: int = 1000) -> int:
    """cancel_all on an async connection."""
    return await _all_batches_async(conn, CANCEL_JOBS_SQL, _cancel_filter(type, queue, error, since, until,
                                                                           workflow_id, batch_id, statuses, limit))
