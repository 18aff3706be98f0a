"""worker/job/executor.py: a task's handler run with its validated payload, and what came of it."""
from __future__ import annotations

import asyncio
import queue

import psycopg
from pydantic import BaseModel

from pgqw import db
from pgqw.tasks import File, PermanentError, Registry, Retry, TransientError
from pgqw.worker.job.completion import Inline
from pgqw.worker.job.executor import Executor, describe
from pgqw.worker.job.recorder import Failed, Recorder, Succeeded
from pgqw.worker.job.slots import Slots
from tests.worker.parts import Direct, claimed, log, settings


class Item(BaseModel):
    n: int = 1


def _executor(conn: psycopg.Connection, tasks: Registry):
    slots = Slots(2, clock=lambda: 0.0)
    worker_log, out = log()
    database = Direct(conn)
    recorder = Recorder(settings(), slots, worker_log, database)
    return Executor(settings(), tasks, slots, worker_log, database, Inline(recorder), clock=lambda: 1.5), slots, out


def _tasks() -> Registry:
    r = Registry()
    r.task("fine", model=Item)(lambda payload, ctx: {"n": payload.n, "attempt": ctx.attempt})
    r.task("file", model=Item)(lambda payload, ctx: File(b"%PDF-1.4 x", "application/pdf"))
    r.task("nothing", model=Item)(lambda payload, ctx: None)
    r.task("permanent", model=Item)(lambda payload, ctx: (_ for _ in ()).throw(PermanentError("never")))
    r.task("listed", model=Item, retry=Retry(permanent=(LookupError,)))(lambda payload, ctx: {}["missing"])
    r.task("crash", model=Item)(lambda payload, ctx: 1 / 0)
    r.task("transient", model=Item)(lambda payload, ctx: (_ for _ in ()).throw(TransientError("try later")))

    async def later(payload: Item, ctx) -> dict:
        await asyncio.sleep(0)
        return {"async": payload.n}

    r.task("async")(later)
    return r


def test_executor_outcomes_of_handlers(conn: psycopg.Connection) -> None:
    executor, slots, _ = _executor(conn, _tasks())
    got = {}
    for kind in (*_tasks().names(), "no_such_type"):
        run, _, _ = slots.take(claimed(conn, type=kind, payload={"n": 3}))
        got[kind] = executor.outcome(run)
        slots.free(run)
    executor.async_runner.close()
    assert got["fine"] == Succeeded(("application/json", {"n": 3, "attempt": 1}, None))
    assert got["file"] == Succeeded(("application/pdf", None, b"%PDF-1.4 x"))
    assert got["nothing"] == Succeeded(None)
    assert got["async"] == Succeeded(("application/json", {"async": 3}, None))
    assert got["permanent"] == Failed("never", retryable=False)
    assert got["listed"] == Failed("KeyError: 'missing'", retryable=False)   # listed in Retry.permanent
    assert got["crash"] == Failed("ZeroDivisionError: division by zero")
    assert got["transient"] == Failed("try later")
    # Claimed from psql, say: not a task of this worker. It is retried, for a worker that knows it.
    assert got["no_such_type"].retryable is True and "no task 'no_such_type'" in got["no_such_type"].error
    assert describe(ValueError()) == "ValueError"


def test_executor_payload_that_no_longer_validates_fails_permanently(conn: psycopg.Connection) -> None:
    executor, slots, _ = _executor(conn, _tasks())
    run, _, _ = slots.take(claimed(conn, type="fine", payload={"n": "many"}))
    outcome = executor.outcome(run)
    assert outcome == Failed("invalid payload: n: Input should be a valid integer, unable to parse string as an "
                             "integer", retryable=False)


def test_executor_context_says_job_attempt_and_stop(conn: psycopg.Connection) -> None:
    seen = {}
    r = Registry()

    @r.task("look", model=Item)
    def look(payload, ctx):
        seen.update(job_id=ctx.job_id, attempt=ctx.attempt, worker=ctx.worker_id, stopping=ctx.stopping)
        ctx.log.info("looked at %s", payload.n)

    executor, slots, _ = _executor(conn, r)
    run, _, _ = slots.take(claimed(conn, type="look", payload={"n": 2}))
    assert executor.outcome(run) == Succeeded(None)
    assert seen == {"job_id": run.job.id, "attempt": 1, "worker": "w1", "stopping": False}
    run.lost = True  # a heartbeat found the lease gone: a long handler can see it
    assert executor.context(run).stopping is True


def test_executor_records_the_result_with_the_success(conn: psycopg.Connection) -> None:
    executor, slots, out = _executor(conn, _tasks())
    run, _, _ = slots.take(claimed(conn, type="file", payload={}))
    executor.execute(run)
    assert db.get_job(conn, job_id=run.job.id).status == "succeeded"
    result = db.get_result(conn, job_id=run.job.id)
    assert (result.content_type, bytes(result.data)) == ("application/pdf", b"%PDF-1.4 x")
    assert out.lines("success") == [f"{run.tag()} in 1.50s: result application/pdf (0 KiB)  (running 0/2, peak 1)"]


def test_executor_loop_runs_jobs_until_told_to_stop(conn: psycopg.Connection) -> None:
    executor, slots, out = _executor(conn, _tasks())
    tasks: queue.Queue = queue.Queue()
    for _ in range(2):
        tasks.put(slots.take(claimed(conn, type="nothing", payload={}))[0])
    tasks.put(None)
    executor.loop(tasks)
    assert len(out.lines("success")) == 2 and slots.free_count() == 2
    assert {j.status for j in db.list_jobs(conn).jobs} == {"succeeded"}
