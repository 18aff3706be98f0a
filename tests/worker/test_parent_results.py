"""ctx.parent_results in the worker: a handler of a job with parents reads each parent's result (a JSON
value, a File for bytes) by parent id, through the worker's database; a run_anyway job whose parent died
reads None for it and its status from ctx.parent_statuses; a job without parents reads {}."""
from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

from pgqw import db
from pgqw.tasks import Context, File, Registry, result_row
from pgqw.worker.job.completion import Inline
from pgqw.worker.job.executor import Executor
from pgqw.worker.job.recorder import Recorder
from pgqw.worker.job.slots import Slots
from tests.helpers import enqueue
from tests.worker.parts import Direct, log, registered, settings


def _executor(conn: psycopg.Connection, tasks: Registry) -> tuple[Slots, Executor, Direct]:
    slots = Slots(5, clock=lambda: 0.0)
    worker_log, _ = log()
    database = Direct(conn)
    executor = Executor(settings(), tasks, slots, worker_log, database,
                        Inline(Recorder(settings(), slots, worker_log, database)), clock=lambda: 1.0)
    return slots, executor, database


def _ended(conn: psycopg.Connection, job_id: uuid.UUID, result: Any = None, *, dead: bool = False) -> None:
    """The parent run as a worker runs it: claimed, then its success (with its result) or its death."""
    job = db.claim_job(conn, worker_id="w2", task_types=["parent_step"])
    assert job is not None and job.id == job_id
    if dead:
        db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token, error="gave up", retryable=False)
    else:
        db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token, result=result_row(result))


def _run_child(conn: psycopg.Connection, tasks: Registry, type_: str) -> tuple[db.Job, Direct]:
    slots, executor, database = _executor(conn, tasks)
    job = db.claim_job(conn, worker_id="w1", task_types=[type_])
    assert job is not None
    run, _, _ = slots.take(job)
    executor.execute(run)
    after = db.get_job(conn, job_id=job.id)
    assert after is not None
    return after, database


def test_parent_results_gives_each_parents_result_by_id(conn: psycopg.Connection) -> None:
    registered(conn, "parent_step")
    registered(conn, "joins_parents")
    r = Registry()
    seen: dict[uuid.UUID, Any] = {}

    @r.task("joins_parents")
    def joins_parents(payload: dict, ctx: Context) -> dict:
        seen.update(ctx.parent_results())
        return {"parents": len(seen)}

    first = enqueue(conn, type="parent_step", payload={})
    second = enqueue(conn, type="parent_step", payload={})
    third = enqueue(conn, type="parent_step", payload={})
    child = enqueue(conn, type="joins_parents", payload={}, depends_on=[first.id, second.id, third.id])
    assert child.status == "blocked"
    _ended(conn, first.id, {"rows": 3, "names": ["a", "b"]})
    _ended(conn, second.id, File(b"%PDF-1.7", "application/pdf"))
    _ended(conn, third.id, None)
    after, database = _run_child(conn, r, "joins_parents")
    assert after.status == "succeeded"
    assert seen == {first.id: {"rows": 3, "names": ["a", "b"]}, second.id: File(b"%PDF-1.7", "application/pdf"),
                    third.id: None}
    assert any(op.startswith("parent_results") for op in database.ops)  # read through the worker's database


def test_parent_results_of_a_run_anyway_job_after_a_dead_parent(conn: psycopg.Connection) -> None:
    registered(conn, "parent_step")
    registered(conn, "cleans_up")
    r = Registry()
    seen: list[tuple[dict, dict]] = []

    @r.task("cleans_up")
    def cleans_up(payload: dict, ctx: Context) -> None:
        seen.append((ctx.parent_results(), ctx.parent_statuses()))

    good = enqueue(conn, type="parent_step", payload={})
    bad = enqueue(conn, type="parent_step", payload={}, max_attempts=1)
    child = enqueue(conn, type="cleans_up", payload={}, depends_on=[good.id, bad.id], run_anyway=True)
    _ended(conn, good.id, {"ok": True})
    assert db.get_job(conn, job_id=child.id).status == "blocked"  # type: ignore[union-attr]
    _ended(conn, bad.id, dead=True)
    assert db.get_job(conn, job_id=child.id).status == "pending"  # type: ignore[union-attr]
    after, _ = _run_child(conn, r, "cleans_up")
    assert after.status == "succeeded"
    assert seen == [({good.id: {"ok": True}, bad.id: None}, {good.id: "succeeded", bad.id: "dead"})]


def test_parent_results_of_a_job_without_parents_is_empty(conn: psycopg.Connection) -> None:
    registered(conn, "alone")
    r = Registry()
    seen: list[dict] = []

    @r.task("alone")
    def alone(payload: dict, ctx: Context) -> None:
        seen.append(ctx.parent_results())

    enqueue(conn, type="alone", payload={})
    after, _ = _run_child(conn, r, "alone")
    assert after.status == "succeeded" and seen == [{}]


def test_parent_results_without_a_runner_is_refused() -> None:
    import logging

    job = db.Job(**{name: None for name in db.Job.__dataclass_fields__})  # type: ignore[arg-type]
    ctx = Context(job=job, worker_id="w1", log=logging.LoggerAdapter(logging.getLogger("t"), {}))
    with pytest.raises(RuntimeError):
        ctx.parent_results()
