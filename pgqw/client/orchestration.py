"""Jobs that wait for each other (workflows), groups of jobs with a callback (batches), and acting on
many jobs by filter (retry_dead_jobs, cancel_jobs).

    a = client.Enqueue(fetch, {"url": url})
    b = client.Enqueue(resize, {"size": 100})
    c = client.Enqueue(resize, {"size": 800})
    d = client.Enqueue(publish, {})
    flow = client.workflow(a, b.after(a), c.after(a), d.after(b, c)).enqueue(conn)
    flow.id, flow.jobs, flow[d].id        # one workflow id; the jobs in the order given; d's job

A workflow is enqueued by one enqueue_jobs call in the caller's transaction: parents before children,
each parent of the workflow named by its place in the call, every job with the workflow's id (made here,
before the database, so it can be stored beside the caller's own rows in the same transaction). An item
is a node: `b` and `b.after(a)` are the same one, so a child may name either. A parent that is not
listed, an item listed twice, or a cycle is a ValueError before the database is asked (enqueue_jobs
itself refuses a parent it cannot have with QW422, pgqw.errors.InvalidDependency). A job with parents is
`blocked` until every parent succeeded (with run_anyway: until every one is final), then `pending`;
one whose parent was cancelled or expired is cancelled with it.

A batch (enqueue_batch) is jobs with an optional callback: a job enqueued once, when every job of the
batch is final, whose payload is the callback's plus "batch": the batch's id and its counts (BatchSummary
is a model of it for the callback task's payload). Nothing here decides a job's state: the stored
functions do. Every call on a connection has an _async twin (on a psycopg AsyncConnection for the reads and the actions
by filter, as their sync ones need psycopg 3).
"""
from __future__ import annotations

import uuid
from collections.abc import Awaitable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable, Sequence, TypeVar

import psycopg
import pydantic
from psycopg.types.json import Jsonb

from .. import connections, db, errors
from ..db import orchestration as db_orchestration
from ..db.orchestration import ENQUEUE_BATCH_SQL
from ..schema import qualify as _q
from .calls import fetch, translated
from .calls_async import fetch_async
from .options import Enqueue, elements, in_given_order, order, parse_id, spec

R = TypeVar("R")

# What a batch's callback may set besides its task and payload (enqueue_batch's p_callback keys).
CALLBACK_OPTIONS = ("queue", "priority", "max_attempts")


class NodeJobs(Mapping[Enqueue, "db.EnqueuedJob"]):
    """A workflow's jobs by node: `jobs[item]` is the job of the item (or of what after() made of it)."""

    def __init__(self, nodes: Sequence[Enqueue], jobs: Sequence[db.EnqueuedJob]) -> None:
        self._nodes = tuple(nodes)
        self._jobs = {n._node: j for n, j in zip(nodes, jobs, strict=True)}

    def __getitem__(self, node: Enqueue) -> db.EnqueuedJob:
        if not isinstance(node, Enqueue) or node._node not in self._jobs:
            raise KeyError(node)
        return self._jobs[node._node]

    def __iter__(self) -> Iterator[Enqueue]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)


@dataclass(frozen=True)
class EnqueuedWorkflow:
    """What Workflow.enqueue made: the workflow's id, its jobs in the order its nodes were given, and
    `by_node` (also `flow[item]`): the job of each node."""

    id: uuid.UUID
    jobs: list[db.EnqueuedJob]
    by_node: NodeJobs = field(repr=False)

    def __getitem__(self, node: Enqueue) -> db.EnqueuedJob:
        return self.by_node[node]


class Workflow:
    """Jobs that depend on each other, enqueued together: `workflow(a, b.after(a)).enqueue(conn)`.
    The graph is checked when it is made (a parent not listed, an item listed twice, a cycle: ValueError);
    `id` is the workflow id every job gets (a new uuid4 unless one is given)."""

    def __init__(self, nodes: Sequence[Enqueue], id: uuid.UUID | str | None = None) -> None:
        if not nodes:
            raise ValueError("a workflow has at least one job")
        self.nodes = tuple(nodes)
        self.id = uuid.uuid4() if id is None else parse_id(id, "a workflow id")
        order(self.nodes)  # the graph's checks, before anything is sent
        for n, node in enumerate(self.nodes, 1):
            if node.workflow_id is not None and parse_id(node.workflow_id, "a workflow id") != self.id:
                raise ValueError(f"item {n} has a workflow_id of its own ({node.workflow_id}): a workflow's "
                                 "jobs all have its id (give it as workflow(..., id=))")

    def _statement(self) -> tuple[str, dict[str, Any], list[int]]:
        sent, placed = elements(self.nodes, workflow_id=self.id)
        return _q(db.ENQUEUE_JOBS_SQL), {"jobs": db.jobs_json(sent)}, placed

    def _made(self, rows: list[dict[str, Any]], placed: list[int]) -> EnqueuedWorkflow:
        jobs = in_given_order([db.EnqueuedJob(**r) for r in rows], placed)
        return EnqueuedWorkflow(self.id, jobs, NodeJobs(self.nodes, jobs))

    def enqueue(self, conn: Any) -> EnqueuedWorkflow:
        """Every job of the workflow in one enqueue_jobs call, in the connection's current transaction."""
        sql, params, placed = self._statement()
        return self._made(fetch(conn, sql, params), placed)

    async def enqueue_async(self, conn: Any) -> EnqueuedWorkflow:
        """enqueue() on an async connection."""
        sql, params, placed = self._statement()
        return self._made(await fetch_async(conn, sql, params), placed)

    def __repr__(self) -> str:
        return f"Workflow(id={self.id}, {len(self.nodes)} jobs)"


def workflow(*nodes: Enqueue, id: uuid.UUID | str | None = None) -> Workflow:
    """The workflow of these items (Enqueue, with their parents given by `.after(...)` or depends_on):
    `workflow(a, b.after(a), c.after(a), d.after(b, c)).enqueue(conn)`."""
    return Workflow(nodes, id=id)


def _psycopg(conn: Any, call: str) -> psycopg.Connection:
    raw = connections.driver(conn)
    if not isinstance(raw, psycopg.Connection):
        raise TypeError(f"{call}() needs psycopg 3 under the connection (a psycopg Connection, or Django or "
                        "SQLAlchemy on psycopg)")
    return raw


async def _psycopg_async(conn: Any, call: str) -> psycopg.AsyncConnection:
    raw = await connections.driver_async(conn)
    if not isinstance(raw, psycopg.AsyncConnection):
        raise TypeError(f"{call}() needs psycopg 3 under the connection (a psycopg AsyncConnection, or a "
                        "SQLAlchemy AsyncSession or AsyncConnection on psycopg)")
    return raw


def _unless_not_found(exc: psycopg.Error) -> None:
    """A refusal other than QN404 (nothing to read) raised, as pgqw.errors' class for it."""
    if errors.is_error(exc, errors.JobNotFound):
        return
    error = translated(exc, {})
    if error is None:
        raise exc
    raise error from exc


def _found(conn: Any, call: str, read: Callable[[psycopg.Connection], R]) -> R | None:
    """A read that the database refuses with QN404 when there is nothing to read, as None: in a
    transaction of its own, or a savepoint of the caller's (so the refusal leaves the caller's
    transaction usable). Another refusal is raised as pgqw.errors' class for it."""
    raw = _psycopg(conn, call)
    try:
        with raw.transaction():
            return read(raw)
    except psycopg.Error as exc:
        _unless_not_found(exc)
        return None


async def _found_async(conn: Any, call: str, read: Callable[[psycopg.AsyncConnection], Awaitable[R]]) -> R | None:
    """_found on an async connection."""
    raw = await _psycopg_async(conn, call)
    try:
        async with raw.transaction():
            return await read(raw)
    except psycopg.Error as exc:
        _unless_not_found(exc)
        return None


def get_workflow(conn: Any, workflow_id: uuid.UUID | str) -> list[db.WorkflowJob] | None:
    """The workflow's jobs (workflow_jobs), parents before their children, each with its parents' ids
    (depends_on) and run_anyway; None when no job has this workflow id. Needs psycopg 3 under the
    connection."""
    wanted = parse_id(workflow_id, "a workflow id")
    return _found(conn, "get_workflow", lambda raw: db.workflow_jobs(raw, workflow_id=wanted))


async def get_workflow_async(conn: Any, workflow_id: uuid.UUID | str) -> list[db.WorkflowJob] | None:
    """get_workflow() on an async connection (psycopg 3 under it)."""
    wanted = parse_id(workflow_id, "a workflow id")
    return await _found_async(conn, "get_workflow_async",
                              lambda raw: db.workflow_jobs_async(raw, workflow_id=wanted))


# -- batches --

class BatchSummary(pydantic.BaseModel):
    """What a batch's callback finds under "batch" in its payload: a field of this type in the callback
    task's model (`batch: BatchSummary | None = None`) reads it."""

    id: uuid.UUID
    total: int
    succeeded: int
    dead: int
    cancelled: int
    expired: int


@dataclass(frozen=True)
class EnqueuedBatch:
    """What enqueue_batch made: the batch's id and its jobs in the order given. created is False when
    the call replayed an idempotency key: the batch and its jobs are the ones made the first time, in
    enqueue order (the items given again are not used)."""

    id: uuid.UUID
    jobs: list[db.EnqueuedJob]

    @property
    def created(self) -> bool:
        return any(j.created for j in self.jobs)


def callback_json(callback: Enqueue) -> dict[str, Any]:
    """A batch's callback as enqueue_batch's p_callback: its type, its payload checked by the task's model,
    and queue, priority and max_attempts when given (any other option: ValueError)."""
    if not isinstance(callback, Enqueue):
        raise TypeError(f"a batch's callback is a pgqw.client.Enqueue, got {type(callback).__name__}")
    made = spec(callback)
    unset = Enqueue(callback.task, callback.payload)
    extra = [name for name in ("idempotency_key", "run_at", "delay", "unique_for", "timeout_ms", "timeout",
                               "expires_at", "expire_after", "expire_after_ms", "depends_on", "run_anyway", "serial_key",
                               "concurrency_key", "workflow_id")
             if getattr(callback, name) != getattr(unset, name)]
    if extra:
        raise ValueError(f"a batch's callback takes queue, priority and max_attempts only, got {', '.join(extra)}")
    out = {"type": made["type"], "payload": made["payload"]}
    out.update({k: made[k] for k in CALLBACK_OPTIONS if made[k] is not None})
    return out


def _batch_statement(items: Sequence[Enqueue], callback: Enqueue | None,
                     idempotency_key: str | None) -> tuple[str, dict[str, Any], list[int]]:
    if not items:
        raise ValueError("a batch has at least one job")
    if idempotency_key is not None and not isinstance(idempotency_key, str):
        raise TypeError(f"idempotency_key must be str, got {type(idempotency_key).__name__}")
    sent, placed = elements(items)
    made = None if callback is None else Jsonb(callback_json(callback))
    return (_q(ENQUEUE_BATCH_SQL), {"jobs": db.jobs_json(sent), "callback": made, "key": idempotency_key},
            placed)


def _batch(rows: list[dict[str, Any]], placed: list[int]) -> EnqueuedBatch:
    jobs = [db.EnqueuedJob(**r) for r in rows]
    if any(j.created for j in jobs):  # made now: one row per element sent, back in the order given
        jobs = in_given_order(jobs, placed)
    # Else a replayed key: the batch made the first time, its jobs in enqueue order, whatever was sent now.
    batch_id = jobs[0].batch_id
    assert batch_id is not None
    return EnqueuedBatch(batch_id, jobs)


def enqueue_batch(conn: Any, items: Sequence[Enqueue], *, callback: Enqueue | None = None,
                  idempotency_key: str | None = None) -> EnqueuedBatch:
    """The items as one batch (enqueue_batch), in the connection's current transaction; they may depend on
    each other as in enqueue_many. callback: a job enqueued once every job of the batch is final, its
    payload plus "batch" (BatchSummary). The same idempotency_key again answers the batch made the first
    time (created False)."""
    sql, params, placed = _batch_statement(items, callback, idempotency_key)
    return _batch(fetch(conn, sql, params), placed)


async def enqueue_batch_async(conn: Any, items: Sequence[Enqueue], *, callback: Enqueue | None = None,
                              idempotency_key: str | None = None) -> EnqueuedBatch:
    """enqueue_batch() on an async connection."""
    sql, params, placed = _batch_statement(items, callback, idempotency_key)
    return _batch(await fetch_async(conn, sql, params), placed)


def get_batch(conn: Any, batch_id: uuid.UUID | str) -> db.BatchStatus | None:
    """The batch's jobs counted by status (batch_status), its callback job's id once enqueued (or the
    error that kept it from being enqueued), and when every job was final; None when there is no such
    batch. Needs psycopg 3 under the connection."""
    wanted = parse_id(batch_id, "a batch id")
    return _found(conn, "get_batch", lambda raw: db.batch_status(raw, batch_id=wanted))


async def get_batch_async(conn: Any, batch_id: uuid.UUID | str) -> db.BatchStatus | None:
    """get_batch() on an async connection (psycopg 3 under it)."""
    wanted = parse_id(batch_id, "a batch id")
    return await _found_async(conn, "get_batch_async",
                              lambda raw: db.batch_status_async(raw, batch_id=wanted))


# -- many jobs by filter --

def _checked(given: dict[str, Any], all_jobs: bool, verb: str) -> dict[str, Any]:
    """The filters retry_dead_all and cancel_all take, but for a timedelta (_dated's): a Task as its
    name, ids parsed. No filter at all is refused unless all_jobs."""
    out = {k: v for k, v in given.items() if v is not None}
    if not out and not all_jobs:
        raise ValueError(f"name the jobs to {verb} with at least one filter (type, queue, error, since, until, "
                         "workflow_id, batch_id), or pass all_jobs=True")
    if "type" in out and not isinstance(out["type"], str):
        name = getattr(out["type"], "name", None)
        if not isinstance(name, str):
            raise TypeError(f"type is a task or a type name, got {type(out['type']).__name__}")
        out["type"] = name
    for key, what in (("workflow_id", "a workflow id"), ("batch_id", "a batch id")):
        if key in out:
            out[key] = parse_id(out[key], what)
    return out


def _ago(filters: dict[str, Any]) -> bool:
    """Whether since or until is a timedelta (so _dated needs the database's now)."""
    return any(isinstance(filters.get(k), timedelta) for k in ("since", "until"))


def _dated(out: dict[str, Any], now: datetime | None) -> dict[str, Any]:
    """The checked filters with a timedelta as that long before now (the database's), since and until
    checked."""
    for key in ("since", "until"):
        if isinstance(out.get(key), timedelta):
            assert now is not None
            out[key] = now - out[key]
    for key in ("since", "until"):
        value = out.get(key)
        if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
            raise TypeError(f"{key} is an aware datetime or a timedelta (that long ago), got {value!r}")
    if "since" in out and "until" in out and out["since"] >= out["until"]:
        raise ValueError("since must be earlier than until")
    return out


def _filters(raw: psycopg.Connection, given: dict[str, Any], all_jobs: bool, verb: str) -> dict[str, Any]:
    """The filters retry_dead_all and cancel_all take: a Task as its name, ids parsed, a timedelta as
    that long before the database's now. No filter at all is refused unless all_jobs."""
    out = _checked(given, all_jobs, verb)
    if not _ago(out):
        return _dated(out, None)
    with raw.transaction():  # not an implicit transaction that every bounded call would then be a savepoint of
        now = db.server_now(raw)
    return _dated(out, now)


async def _filters_async(raw: psycopg.AsyncConnection, given: dict[str, Any], all_jobs: bool,
                         verb: str) -> dict[str, Any]:
    """_filters on an async connection."""
    out = _checked(given, all_jobs, verb)
    return _dated(out, await _server_now_async(raw) if _ago(out) else None)


async def _server_now_async(raw: psycopg.AsyncConnection) -> datetime:
    """db.server_now_async in a transaction of its own (or a savepoint of the caller's)."""
    async with raw.transaction():
        return await db.server_now_async(raw)


def _statuses(statuses: Sequence[str] | None) -> list[str] | None:
    if isinstance(statuses, str):
        raise TypeError("statuses is a list of statuses, not one text")
    return None if statuses is None else list(statuses)


def retry_dead_jobs(conn: Any, *, type: Any = None, queue: str | None = None, error: str | None = None,
                    since: datetime | timedelta | None = None, until: datetime | timedelta | None = None,
                    workflow_id: uuid.UUID | str | None = None, batch_id: uuid.UUID | str | None = None,
                    all_jobs: bool = False) -> int:
    """Every dead job matching all the given filters back to pending (retry_dead each), in bounded
    calls (retry_dead_all); how many were retried. type: a task or a type name; error: a part of
    last_error, any case; since/until: finished in [since, until), a datetime or a timedelta meaning
    that long ago (on the database's clock)."""
    raw = _psycopg(conn, "retry_dead_jobs")
    filters = _filters(raw, {"type": type, "queue": queue, "error": error, "since": since, "until": until,
                             "workflow_id": workflow_id, "batch_id": batch_id}, all_jobs, "retry")
    return int(db.retry_dead_all(raw, **filters))


def cancel_jobs(conn: Any, *, type: Any = None, queue: str | None = None, error: str | None = None,
                since: datetime | timedelta | None = None, until: datetime | timedelta | None = None,
                workflow_id: uuid.UUID | str | None = None, batch_id: uuid.UUID | str | None = None,
                statuses: Sequence[str] | None = None, all_jobs: bool = False) -> int:
    """Every unfinished job matching all the given filters cancelled (cancel_job each; a running one is
    asked to stop and counted), in bounded calls (cancel_all); how many changed. statuses: of blocked,
    pending, failed, processing (None: all four); since/until: created in [since, until). Other filters
    as retry_dead_jobs'."""
    raw = _psycopg(conn, "cancel_jobs")
    wanted = _statuses(statuses)
    filters = _filters(raw, {"type": type, "queue": queue, "error": error, "since": since, "until": until,
                             "workflow_id": workflow_id, "batch_id": batch_id}, all_jobs, "cancel")
    if wanted is not None:
        filters["statuses"] = wanted
    return int(db.cancel_all(raw, **filters))


async def retry_dead_jobs_async(conn: Any, *, type: Any = None, queue: str | None = None, error: str | None = None,
                                since: datetime | timedelta | None = None,
                                until: datetime | timedelta | None = None,
                                workflow_id: uuid.UUID | str | None = None,
                                batch_id: uuid.UUID | str | None = None, all_jobs: bool = False) -> int:
    """retry_dead_jobs() on an async connection (psycopg 3 under it), each bounded call in a
    transaction of its own."""
    raw = await _psycopg_async(conn, "retry_dead_jobs_async")
    filters = await _filters_async(raw, {"type": type, "queue": queue, "error": error, "since": since,
                                         "until": until, "workflow_id": workflow_id, "batch_id": batch_id},
                                   all_jobs, "retry")
    return await db_orchestration.retry_dead_all_async(raw, **filters)


async def cancel_jobs_async(conn: Any, *, type: Any = None, queue: str | None = None, error: str | None = None,
                            since: datetime | timedelta | None = None, until: datetime | timedelta | None = None,
                            workflow_id: uuid.UUID | str | None = None, batch_id: uuid.UUID | str | None = None,
                            statuses: Sequence[str] | None = None, all_jobs: bool = False) -> int:
    """cancel_jobs() on an async connection (psycopg 3 under it), each bounded call in a transaction of
    its own."""
    raw = await _psycopg_async(conn, "cancel_jobs_async")
    wanted = _statuses(statuses)
    filters = await _filters_async(raw, {"type": type, "queue": queue, "error": error, "since": since,
                                         "until": until, "workflow_id": workflow_id, "batch_id": batch_id},
                                   all_jobs, "cancel")
    if wanted is not None:
        filters["statuses"] = wanted
    return await db_orchestration.cancel_all_async(raw, **filters)


__all__ = [
    "BatchSummary", "EnqueuedBatch", "EnqueuedWorkflow", "NodeJobs", "Workflow", "cancel_jobs",
    "cancel_jobs_async", "enqueue_batch", "enqueue_batch_async", "get_batch", "get_batch_async", "get_workflow",
    "get_workflow_async", "retry_dead_jobs", "retry_dead_jobs_async", "workflow",
]
