"""worker/job/executor.py: an `async def` handler's job goes from the claim to the event loop with no
executor thread in between, and its outcome is handed to the completion strategy from there, without
the loop ever waiting on the database."""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import threading
from typing import Any, Callable, TypeVar

import psycopg

from pgqw import db
from pgqw.tasks import Registry
from pgqw.worker.job.completion import Batch, Inline
from pgqw.worker.job.deadlines import Deadlines
from pgqw.worker.job.executor import Executor
from pgqw.worker.job.recorder import Recorder
from pgqw.worker.job.slots import Running, Slots
from tests.worker.conftest import wait_for
from tests.worker.parts import Direct, claimed, log, settings

T = TypeVar("T")
LOOP_THREAD = "pgqw-async"


class Threads(Direct):
    """Direct, also noting the thread each database call is made on."""

    def __init__(self, conn: psycopg.Connection) -> None:
        super().__init__(conn)
        self.threads: list[str] = []

    def call(self, op: str, fn: Callable[[psycopg.Connection], T], *, deadline: float | None = None) -> T:
        self.threads.append(threading.current_thread().name)
        return super().call(op, fn, deadline=deadline)


def _tasks(seen: dict[str, str]) -> Registry:
    r = Registry()

    @r.task("async_ok", model=dict)
    async def ok(payload: dict, ctx: Any) -> dict:
        seen["ok"] = threading.current_thread().name
        await asyncio.sleep(0)
        return {"n": payload["n"]}

    @r.task("async_fails", model=dict)
    async def fails(payload: dict, ctx: Any) -> None:
        seen["fails"] = threading.current_thread().name
        await asyncio.sleep(0)
        raise ValueError("no good")

    @r.task("async_raises_cancelled", model=dict)
    async def raises_cancelled(payload: dict, ctx: Any) -> None:
        inner = asyncio.ensure_future(asyncio.sleep(10))
        inner.cancel()
        await inner  # an inner task's cancellation let through: not a cancel of this job

    @r.task("plain", model=dict)
    def plain(payload: dict, ctx: Any) -> None:
        return None

    return r


def _parts(conn: psycopg.Connection, seen: dict[str, str], *, batch: bool):
    slots = Slots(3, clock=lambda: 0.0)
    worker_log, out = log()
    database = Threads(conn)
    recorder = Recorder(settings(), slots, worker_log, database)
    completion = Batch(recorder) if batch else Inline(recorder)
    executor = Executor(settings(), _tasks(seen), slots, worker_log, database, completion, clock=lambda: 1.5)
    return executor, completion, slots, database, out


def _take(conn: psycopg.Connection, slots: Slots, kind: str) -> Running:
    run, _, _ = slots.take(claimed(conn, type=kind, payload={"n": 7}))
    return run


def test_async_path_dispatch_runs_the_handler_on_the_loop_and_batches_its_success(conn: psycopg.Connection) -> None:
    seen: dict[str, str] = {}
    executor, completion, slots, database, out = _parts(conn, seen, batch=True)
    threads: queue.Queue[Running | None] = queue.Queue()
    run = _take(conn, slots, "async_ok")
    executor.dispatch(run, threads)
    run.future.result(timeout=10)
    assert threads.empty()                      # no executor thread was handed the job
    assert seen["ok"] == LOOP_THREAD
    assert database.threads == []               # the loop queued the success, called nothing
    assert run.state == "marking" and completion.done.qsize() == 1
    assert completion.drain(timeout=1) == 1     # the batch thread's round records it
    assert db.get_job(conn, job_id=run.job.id).status == "succeeded"
    assert db.get_result(conn, job_id=run.job.id).value == {"n": 7}
    assert len(out.lines("success")) == 1 and slots.free_count() == 3
    plain = _take(conn, slots, "plain")
    executor.dispatch(plain, threads)
    assert threads.get_nowait() is plain        # a plain handler still goes to the executor threads
    executor.async_runner.close()


def test_async_path_an_outcome_with_a_call_of_its_own_is_recorded_off_the_loop(conn: psycopg.Connection) -> None:
    seen: dict[str, str] = {}
    executor, _, slots, database, out = _parts(conn, seen, batch=False)
    failing, fine = _take(conn, slots, "async_fails"), _take(conn, slots, "async_ok")
    for run in (failing, fine):
        executor.dispatch(run, queue.Queue())
    for run in (failing, fine):
        run.future.result(timeout=10)
    executor.async_runner.close()
    assert seen == {"fails": LOOP_THREAD, "ok": LOOP_THREAD}
    assert sorted(op.split(" ")[0] for op in database.ops) == ["mark_failed", "mark_succeeded"]
    assert database.threads and LOOP_THREAD not in database.threads  # the loop never waited on the database
    assert db.get_job(conn, job_id=failing.job.id).last_error == "ValueError: no good"
    assert db.get_job(conn, job_id=fine.job.id).status == "succeeded"
    assert len(out.lines("failed")) == 1 and len(out.lines("success")) == 1 and slots.free_count() == 3


def test_async_path_a_job_past_its_deadline_before_it_starts_is_not_run(conn: psycopg.Connection) -> None:
    seen: dict[str, str] = {}
    executor, _, slots, database, _ = _parts(conn, seen, batch=False)
    run = _take(conn, slots, "async_ok")
    run.state = "timing out"                    # what the deadlines' watch sets at the job's deadline
    executor.dispatch(run, queue.Queue())
    with contextlib.suppress(concurrent.futures.CancelledError):  # cancelled, or it saw the state first
        assert run.future.result(timeout=10) is None
    executor.async_runner.close()
    assert seen == {} and database.ops == []    # deadlines.py records the attempt, not the executor


def test_async_path_a_deadline_while_the_outcome_waits_to_be_recorded_does_not_end_it(
        conn: psycopg.Connection) -> None:
    """The handler has returned and its outcome waits for a thread of the loop's pool (all busy): the
    job is marking from the moment the handler returned, so its deadline passing then neither cancels
    the recording nor records the attempt timed out."""
    seen: dict[str, str] = {}
    executor, _, slots, database, _ = _parts(conn, seen, batch=False)
    pool, gate = concurrent.futures.ThreadPoolExecutor(1), threading.Event()

    async def use_pool() -> None:
        asyncio.get_running_loop().set_default_executor(pool)

    executor.async_runner.run(use_pool())
    pool.submit(gate.wait, 10)                  # the pool's one thread is busy
    run, _, _ = slots.take(claimed(conn, type="async_ok", payload={"n": 1}, timeout_ms=60_000))
    deadlines = Deadlines(settings(), slots, log()[0], database, clock=lambda: 1e9)  # every deadline has passed
    executor.dispatch(run, queue.Queue())
    wait_for("the handler ran", lambda: seen.get("ok"))
    executor.async_runner.run(asyncio.sleep(0))  # after the task's next steps: it waits for the pool
    assert run.state == "marking" and database.ops == []
    assert deadlines.check() == []              # nothing running is due
    gate.set()
    run.future.result(timeout=10)
    executor.async_runner.close()
    pool.shutdown()
    assert db.get_job(conn, job_id=run.job.id).status == "succeeded"
    assert [a.outcome for a in db.get_attempts(conn, job_id=run.job.id)] == ["succeeded"]
    assert slots.free_count() == 3


def test_async_path_a_cancelled_error_the_handler_raises_itself_fails_the_attempt(conn: psycopg.Connection) -> None:
    seen: dict[str, str] = {}
    executor, _, slots, _, out = _parts(conn, seen, batch=False)
    run = _take(conn, slots, "async_raises_cancelled")
    executor.dispatch(run, queue.Queue())
    run.future.result(timeout=10)
    executor.async_runner.close()
    job = db.get_job(conn, job_id=run.job.id)
    assert job.status == "failed" and job.last_error == "RuntimeError: the handler raised CancelledError"
    assert len(out.lines("failed")) == 1 and slots.free_count() == 3   # recorded, its slot given back
