"""Cancellation in the worker: a heartbeat's answer sets the handler's ctx.cancelled (and ctx.stopping),
and the attempt is recorded cancelled, whatever the handler then returns or raises; a cancel that
comes after the last heartbeat turns the refused success into a cancelled attempt."""
from __future__ import annotations

import psycopg
from pydantic import BaseModel

from pgqw import db
from pgqw.tasks import Registry
from pgqw.worker.connection.heartbeat import Heartbeat
from pgqw.worker.job.completion import Inline
from pgqw.worker.job.executor import Executor
from pgqw.worker.job.recorder import Recorder
from pgqw.worker.job.slots import Slots
from tests.helpers import job_row, one, rows
from tests.worker.parts import Direct, claimed, log, settings


class Item(BaseModel):
    n: int = 1


def _worker(conn: psycopg.Connection, tasks: Registry):
    slots = Slots(2, clock=lambda: 0.0)
    worker_log, out = log()
    database = Direct(conn)
    recorder = Recorder(settings(), slots, worker_log, database)
    executor = Executor(settings(), tasks, slots, worker_log, database, Inline(recorder), clock=lambda: 1.5)
    beat = Heartbeat(settings(), slots, worker_log, database.once, clock=lambda: 0.0)
    return executor, beat, slots, out


def test_worker_cancel_told_by_heartbeat_sets_ctx_and_records_cancelled(conn: psycopg.Connection) -> None:
    seen: list[tuple[bool, bool]] = []
    tasks = Registry()
    beat_holder: list[Heartbeat] = []

    def long_job(payload: Item, ctx) -> dict:
        seen.append((ctx.cancelled, ctx.stopping))
        db.cancel_job(conn, job_id=ctx.job_id)   # an operator cancels it while it runs
        beat_holder[0].beat()                     # the next heartbeat (within one interval)
        seen.append((ctx.cancelled, ctx.stopping))
        return {"partial": True}                  # not stored: the job was cancelled

    tasks.task("long", model=Item)(long_job)
    executor, beat, slots, out = _worker(conn, tasks)
    beat_holder.append(beat)
    run, _, _ = slots.take(claimed(conn, type="long"))
    executor.execute(run)
    executor.async_runner.close()
    assert seen == [(False, False), (True, True)]
    row = job_row(conn, run.job.id)
    assert row["status"] == "cancelled" and row["finished_at"] is not None
    assert one(conn, "select outcome from job_attempts where job_id = %s", [run.job.id]) == {"outcome": "cancelled"}
    assert rows(conn, "select * from job_results") == []
    assert len(out.lines("cancel requested")) == 1
    [line] = out.lines("cancelled")
    assert line.startswith(f"{run.tag()} in 1.50s")
    assert slots.free_count() == 2 and slots.counts["cancelled"] == 1


def test_worker_cancel_handler_that_raises_on_cancel_is_recorded_cancelled(conn: psycopg.Connection) -> None:
    tasks = Registry()
    beat_holder: list[Heartbeat] = []

    def stops(payload: Item, ctx) -> None:
        db.cancel_job(conn, job_id=ctx.job_id)
        beat_holder[0].beat()
        if ctx.cancelled:
            raise RuntimeError("stopped early")

    tasks.task("stops", model=Item)(stops)
    executor, beat, slots, out = _worker(conn, tasks)
    beat_holder.append(beat)
    run, _, _ = slots.take(claimed(conn, type="stops"))
    executor.execute(run)
    assert job_row(conn, run.job.id)["status"] == "cancelled"
    assert out.lines("cancelled") == [f"{run.tag()} in 1.50s: RuntimeError: stopped early  (running 0/2, peak 1)"]


def test_worker_cancel_after_the_last_heartbeat_turns_the_success_into_cancelled(conn: psycopg.Connection) -> None:
    tasks = Registry()

    def quick(payload: Item, ctx) -> dict:
        db.cancel_job(conn, job_id=ctx.job_id)  # no heartbeat between this and the result
        assert not ctx.cancelled
        return {"done": True}

    tasks.task("quick", model=Item)(quick)
    executor, _, slots, out = _worker(conn, tasks)
    run, _, _ = slots.take(claimed(conn, type="quick"))
    executor.execute(run)
    assert job_row(conn, run.job.id)["status"] == "cancelled"
    assert rows(conn, "select * from job_results") == []
    assert len(out.lines("cancelled")) == 1 and out.lines("ignored late result") == []
