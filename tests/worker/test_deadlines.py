"""worker/job/deadlines.py with the executor, in process, against the database: at a job's deadline an
async handler is cancelled and the attempt recorded timed out at once; a plain handler that does not
return has its slot given back and its thread counted leaked (a new one takes its place), and its late
result is refused; a job whose deadline came before it started is not run; a cancel reaches an async
handler that does not look, at the end of its lease.

Timeouts are a few hundred ms of the real clock (the database must see the deadline pass); every wait is
on the database's or the worker's state, with a deadline."""
from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any, Callable, Iterator

import psycopg
import pytest
from pydantic import BaseModel

from pgqw import db
from pgqw.tasks import Registry
from pgqw.worker.connection.heartbeat import Heartbeat
from pgqw.worker.job.completion import Inline
from pgqw.worker.job.deadlines import Deadlines
from pgqw.worker.job.executor import Executor
from pgqw.worker.job.recorder import Recorder
from pgqw.worker.job.slots import Running, Slots
from pgqw.worker.shutdown import Shutdown
from tests.helpers import enqueue, job_row, one, rows
from tests.worker.conftest import wait_for
from tests.worker.parts import Direct, claimed, log, registered, settings


class Item(BaseModel):
    n: int = 1


class Parts:
    """A worker's slots, executor and deadlines' watch (running on its thread), over one connection."""

    def __init__(self, conn: psycopg.Connection, tasks: Registry) -> None:
        self.conn = conn
        self.slots = Slots(2)
        self.log, self.out = log()
        self.database = Direct(conn)
        recorder = Recorder(settings(), self.slots, self.log, self.database)
        self.executor = Executor(settings(), tasks, self.slots, self.log, self.database, Inline(recorder))
        self.tasks: queue.Queue[Running | None] = queue.Queue()
        self.threads: list[threading.Thread] = []
        self.exiting = threading.Event()
        self.deadlines = Deadlines(settings(), self.slots, self.log, self.database, on_leak=self.executor_thread,
                                   exiting=self.exiting)

    def executor_thread(self) -> None:
        thread = threading.Thread(target=self.executor.loop, args=(self.tasks,), daemon=True)
        self.threads.append(thread)
        thread.start()

    def start(self, **job: Any) -> Running:
        """A job of job["type"] enqueued, claimed (that type only) and handed to the executor threads."""
        lease_ms = job.pop("lease_ms", None)
        registered(self.conn, job["type"])
        enqueue(self.conn, **job)
        found = db.claim_job(self.conn, worker_id="w1", lease_ms=lease_ms, task_types=[job["type"]])
        assert found is not None
        run, _, _ = self.slots.take(found)
        self.tasks.put(run)
        return run

    def close(self) -> None:
        self.exiting.set()
        self.deadlines.stop()
        for _ in self.threads:
            self.tasks.put(None)
        self.executor.async_runner.close()


@pytest.fixture
def parts(conn: psycopg.Connection) -> Iterator[Callable[[Registry], Parts]]:
    made: list[Parts] = []

    def make(tasks: Registry) -> Parts:
        p = Parts(conn, tasks)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def _outcome(conn: psycopg.Connection, job_id: Any) -> str | None:
    return one(conn, "select outcome from job_attempts where job_id = %s order by attempt desc limit 1",
               [job_id])["outcome"]


def test_deadlines_async_handler_is_cancelled_at_its_deadline_and_recorded_at_once(
    conn: psycopg.Connection, parts: Callable[[Registry], Parts]
) -> None:
    cancelled = threading.Event()
    deadlines_seen: list[Any] = []
    tasks = Registry()

    async def hangs(payload: Item, ctx) -> None:
        deadlines_seen.append(ctx.deadline)
        try:
            await asyncio.Event().wait()  # never set
        except asyncio.CancelledError:
            cancelled.set()
            raise

    tasks.task("hangs", model=Item)(hangs)
    p = parts(tasks)
    p.deadlines.start()
    p.executor_thread()
    run = p.start(type="hangs", timeout_ms=300, max_attempts=2)
    wait_for("the attempt timed out", lambda: _outcome(conn, run.job.id) == "timed_out", timeout=10)
    assert cancelled.wait(5), "the handler's task was not cancelled"
    assert deadlines_seen == [run.job.deadline_at] and run.job.deadline_at is not None
    row = job_row(conn, run.job.id)
    assert row["status"] == "failed" and row["last_error"].startswith("timed out after 300 ms")
    wait_for("the slot freed", lambda: p.slots.free_count() == 2, timeout=5)
    assert p.slots.counts["timed out"] == 1 and p.slots.counts["leaked"] == 0  # an async handler leaks nothing
    [line] = p.out.lines("timed out")
    assert line.startswith(f"{run.tag()} in 0.") and "timed out after 300 ms" in line and "next run" in line
    # The executor thread moved on at once: it runs the next job.
    tasks.task("quick", model=Item)(lambda payload, ctx: {"ok": True})
    nxt = p.start(type="quick")
    wait_for("the next job succeeded", lambda: job_row(conn, nxt.job.id)["status"] == "succeeded", timeout=5)


def test_deadlines_sync_handler_slot_is_freed_thread_counted_leaked_late_result_refused(
    conn: psycopg.Connection, parts: Callable[[Registry], Parts]
) -> None:
    release = threading.Event()
    tasks = Registry()

    def blocks(payload: Item, ctx) -> dict:
        release.wait(30)       # a handler that does not return (until the test lets it)
        return {"late": True}

    tasks.task("blocks", model=Item)(blocks)
    tasks.task("quick", model=Item)(lambda payload, ctx: {"ok": True})
    p = parts(tasks)
    p.deadlines.start()
    p.executor_thread()
    first_thread = p.threads[0]
    run = p.start(type="blocks", timeout_ms=300, max_attempts=1)
    wait_for("the attempt timed out", lambda: _outcome(conn, run.job.id) == "timed_out", timeout=10)
    row = job_row(conn, run.job.id)
    assert row["status"] == "dead" and row["last_error"].startswith("timed out after 300 ms")
    wait_for("the slot given back", lambda: p.slots.free_count() == 2, timeout=5)
    assert first_thread.is_alive() and run.leaked         # the handler still runs on it
    assert p.slots.counts["leaked"] == 1 and len(p.threads) == 2  # ... and a new thread took its place
    [leaked] = p.out.lines("leaked")
    assert leaked.startswith(f"{run.tag()}: its handler still runs past its deadline")
    assert p.out.lines("timed out")[0].endswith("→ dead  (running 0/2, peak 1)")
    # The worker keeps its concurrency: the new thread runs the next job.
    nxt = p.start(type="quick")
    wait_for("the next job succeeded", lambda: job_row(conn, nxt.job.id)["status"] == "succeeded", timeout=5)
    # The handler returns at last: its result is refused (its token no longer holds the job), the thread ends.
    release.set()
    first_thread.join(10)
    assert not first_thread.is_alive()
    [late] = p.out.lines("ignored late result")
    assert late.startswith(f"{run.tag()}: job {run.job.id} attempt 1 is no longer held by its lease")
    assert job_row(conn, run.job.id)["status"] == "dead"
    assert rows(conn, "select * from job_results where job_id = %s", [run.job.id]) == []
    # The stopped line counts them.
    Shutdown(settings(), p.slots, p.log, p.database).summary()
    [stopped] = p.out.lines("stopped")
    assert "1 timed out, 1 leaked" in stopped


def test_deadlines_a_job_whose_deadline_came_before_its_handler_started_is_not_run(
    conn: psycopg.Connection, parts: Callable[[Registry], Parts]
) -> None:
    ran: list[int] = []
    tasks = Registry()
    tasks.task("never", model=Item)(lambda payload, ctx: ran.append(1))
    p = parts(tasks)
    run, _, _ = p.slots.take(claimed(conn, type="never", timeout_ms=1))
    p.deadlines.clock = lambda: run.started + 1.0  # a second later, by the worker's clock
    assert p.deadlines.check() == [run]
    assert run.state == "timing out" and not run.leaked
    p.executor.execute(run)
    assert ran == []
    assert _outcome(conn, run.job.id) == "timed_out" and p.slots.free_count() == 2


def test_deadlines_cancel_reaches_an_async_handler_that_does_not_look(
    conn: psycopg.Connection, parts: Callable[[Registry], Parts]
) -> None:
    cancelled = threading.Event()
    tasks = Registry()

    async def ignores(payload: Item, ctx) -> None:
        try:
            await asyncio.Event().wait()  # never reads ctx.cancelled
        except asyncio.CancelledError:
            cancelled.set()
            raise

    tasks.task("ignores", model=Item)(ignores)
    p = parts(tasks)
    beat = Heartbeat(settings(), p.slots, p.log, p.database.once)
    p.deadlines.start()
    p.executor_thread()
    run = p.start(type="ignores", lease_ms=600)  # no timeout: no deadline until the cancel
    assert run.deadline is None
    db.cancel_job(conn, job_id=run.job.id)
    beat.beat()                                  # the heartbeat tells it, and brings its deadline forward
    assert run.cancelled and run.deadline is not None and run.deadline <= run.started + 0.6
    wait_for("the job cancelled", lambda: job_row(conn, run.job.id)["status"] == "cancelled", timeout=10)
    assert cancelled.wait(5)
    assert _outcome(conn, run.job.id) == "cancelled"
    wait_for("the slot freed", lambda: p.slots.free_count() == 2, timeout=5)
    [line] = p.out.lines("cancelled")
    assert "stopped at the end of its lease" in line


def test_deadlines_watch_sleeps_without_jobs_and_wakes_for_a_new_one(conn: psycopg.Connection) -> None:
    """due_in: None without a deadline held, the time left with one (what the watch sleeps for)."""
    slots = Slots(2)
    worker_log, _ = log()
    watch = Deadlines(settings(), slots, worker_log, Direct(conn), clock=lambda: 0.0)
    run, _, _ = slots.take(claimed(conn, type="t", payload={}))
    with slots.lock:
        assert watch.due_in() is None
    timed, _, _ = slots.take(claimed(conn, type="t", payload={}, timeout_ms=5000))
    with slots.lock:
        left = watch.due_in()
    assert left is not None and left == pytest.approx(timed.deadline, abs=1e-9) and run.deadline is None
