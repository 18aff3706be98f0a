"""pgqw.hooks around each attempt, run by the worker's executor (in process, real database): their
order, what they see, and that nothing they do changes what the worker records."""
from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

from pgqw import db, hooks
from pgqw.tasks import PermanentError, Registry
from pgqw.worker.job.completion import Inline
from pgqw.worker.job.executor import Executor
from pgqw.worker.job.recorder import Failed, Recorder, Succeeded
from pgqw.worker.job.slots import Slots
from tests.worker.parts import Direct, Lines, claimed, log, settings

current: contextvars.ContextVar[str] = contextvars.ContextVar("current", default="none")


class Item(BaseModel):
    n: int


def _tasks(seen: dict[str, Any]) -> Registry:
    r = Registry()
    r.task("fine", model=dict)(lambda payload, ctx: {"ok": True})
    r.task("typed", model=Item)(lambda payload, ctx: None)
    r.task("crash", model=dict)(lambda payload, ctx: 1 / 0)

    def never(payload: dict, ctx: object) -> None:
        raise PermanentError("never")

    r.task("never", model=dict)(never)

    @r.task("later", model=dict)
    async def later(payload: dict, ctx: object) -> dict:
        await asyncio.sleep(0)
        seen["handler"] = (current.get(), threading.current_thread().name, asyncio.current_task())
        return {"async": True}

    return r


def _executor(conn: psycopg.Connection, around: hooks.Hooks, seen: dict[str, Any] | None = None
              ) -> tuple[Executor, Slots, Lines]:
    slots = Slots(2, clock=lambda: 0.0)
    worker_log, out = log()
    database = Direct(conn)
    recorder = Recorder(settings(), slots, worker_log, database)
    executor = Executor(settings(), _tasks({} if seen is None else seen), slots, worker_log, database, Inline(recorder),
                        clock=lambda: 1.5, around=around)
    return executor, slots, out


def test_hooks_nest_in_registration_order(conn: psycopg.Connection) -> None:
    calls: list[str] = []
    around = hooks.Hooks()

    def named(name: str) -> hooks.Hook:
        def hook(attempt: hooks.Attempt) -> hooks.Around:
            calls.append(f"{name} before")
            outcome = yield
            calls.append(f"{name} after {outcome.outcome}")
        return hook

    for name in ("outer", "middle", "inner"):
        around.around_attempt(named(name))
    executor, slots, _ = _executor(conn, around)
    run, _, _ = slots.take(claimed(conn, type="fine", payload={}))
    assert executor.outcome(run) == Succeeded(("application/json", {"ok": True}, None))
    assert calls == ["outer before", "middle before", "inner before",
                     "inner after succeeded", "middle after succeeded", "outer after succeeded"]


def test_hooks_see_the_attempt_and_its_outcome(conn: psycopg.Connection) -> None:
    seen: list[tuple[hooks.Attempt, hooks.Outcome]] = []
    around = hooks.Hooks()

    @around.around_attempt
    def watch(attempt: hooks.Attempt) -> hooks.Around:
        seen.append((attempt, (yield)))

    executor, slots, _ = _executor(conn, around)
    runs = [slots.take(claimed(conn, type=t, payload={"n": 1}, queue="reports"))[0] for t in ("fine", "crash")]
    assert executor.outcome(runs[0]) == Succeeded(("application/json", {"ok": True}, None))
    assert executor.outcome(runs[1]) == Failed("ZeroDivisionError: division by zero", retryable=True)
    executor.async_runner.close()
    (attempt, succeeded), (_, failed) = seen
    job = runs[0].job
    assert attempt == hooks.Attempt(job_id=job.id, type="fine", queue="reports", attempt=1,
                                    max_attempts=job.max_attempts, payload={"n": 1}, worker_id="w1")
    assert (succeeded.outcome, succeeded.error, succeeded.message, succeeded.failed) == ("succeeded", None, None, False)
    assert succeeded.duration >= 0
    assert failed.outcome == "failed" and failed.failed and isinstance(failed.error, ZeroDivisionError)
    assert (failed.message, failed.retryable) == ("ZeroDivisionError: division by zero", True)


def test_hook_sees_a_permanent_failure_and_a_bad_payload_as_not_retryable(conn: psycopg.Connection) -> None:
    seen: list[hooks.Outcome] = []
    around = hooks.Hooks()

    @around.around_attempt
    def watch(attempt: hooks.Attempt) -> hooks.Around:
        seen.append((yield))

    executor, slots, _ = _executor(conn, around)
    for type_, payload in (("never", {}), ("typed", {"n": "many"})):  # a payload that no longer validates
        executor.outcome(slots.take(claimed(conn, type=type_, payload=payload))[0])
    assert [(o.outcome, o.retryable, o.message) for o in seen] == [
        ("failed", False, "never"), ("failed", False, seen[1].message)]
    assert seen[1].message is not None and seen[1].message.startswith("invalid payload")


def test_hook_exception_does_not_change_the_outcome(conn: psycopg.Connection) -> None:
    ran: list[str] = []
    around = hooks.Hooks()

    @around.around_attempt
    def fails_before(attempt: hooks.Attempt) -> hooks.Around:
        raise RuntimeError("before went wrong")
        yield

    @around.around_attempt
    def fails_after(attempt: hooks.Attempt) -> hooks.Around:
        outcome = yield
        ran.append(outcome.outcome)
        raise LookupError("after went wrong")

    @around.around_attempt
    def fine(attempt: hooks.Attempt) -> hooks.Around:
        ran.append("fine before")
        ran.append(f"fine after {(yield).outcome}")

    executor, slots, out = _executor(conn, around)
    good = slots.take(claimed(conn, type="fine", payload={}))[0]
    bad = slots.take(claimed(conn, type="crash", payload={}))[0]
    executor.execute(good)
    executor.execute(bad)
    assert db.get_job(conn, job_id=good.job.id).status == "succeeded"
    assert db.get_result(conn, job_id=good.job.id).value == {"ok": True}
    after = db.get_job(conn, job_id=bad.job.id)
    assert after.status in ("failed", "dead") and after.last_error == "ZeroDivisionError: division by zero"
    # The other hooks ran as usual; the one that failed after its yield had seen the outcome.
    assert ran == ["fine before", "fine after succeeded", "succeeded", "fine before", "fine after failed", "failed"]
    name = "tests.worker.test_hooks.test_hook_exception_does_not_change_the_outcome.<locals>"
    assert out.lines("hook error") == [
        f"{good.tag()}: {name}.fails_before raised before the handler: RuntimeError: before went wrong (the attempt goes on)",
        f"{good.tag()}: {name}.fails_after raised after the handler: LookupError: after went wrong (the attempt goes on)",
        f"{bad.tag()}: {name}.fails_before raised before the handler: RuntimeError: before went wrong (the attempt goes on)",
        f"{bad.tag()}: {name}.fails_after raised after the handler: LookupError: after went wrong (the attempt goes on)",
    ]
    assert len(out.lines("success")) == 1 and len(out.lines("failed")) == 1


def test_hook_that_does_not_yield_once_is_reported(conn: psycopg.Connection) -> None:
    around = hooks.Hooks()

    @around.around_attempt
    def never_yields(attempt: hooks.Attempt) -> hooks.Around:
        if attempt.attempt:
            return
        yield

    @around.around_attempt
    def yields_twice(attempt: hooks.Attempt) -> hooks.Around:
        yield
        yield

    executor, slots, out = _executor(conn, around)
    run = slots.take(claimed(conn, type="fine", payload={}))[0]
    assert executor.outcome(run) == Succeeded(("application/json", {"ok": True}, None))
    assert [line.split(": ", 1)[1].split(" raised ", 1)[1] for line in out.lines("hook error")] == [
        "before the handler: RuntimeError: it returned without yielding (the attempt goes on)",
        "after the handler: RuntimeError: it yielded more than once (the attempt goes on)"]


def test_hook_runs_around_an_async_handler_in_its_task(conn: psycopg.Connection) -> None:
    seen: dict[str, Any] = {}
    around = hooks.Hooks()

    @around.around_attempt
    def set_current(attempt: hooks.Attempt) -> hooks.Around:
        token = current.set(f"attempt {attempt.attempt}")
        seen["before"] = (threading.current_thread().name, asyncio.current_task())
        outcome = yield
        seen["after"] = (current.get(), threading.current_thread().name, asyncio.current_task(), outcome.outcome)
        current.reset(token)

    executor, slots, _ = _executor(conn, around, seen)
    run = slots.take(claimed(conn, type="later", payload={}))[0]
    try:
        assert executor.outcome(run) == Succeeded(("application/json", {"async": True}, None))
    finally:
        executor.async_runner.close()
    thread, task = seen["before"]
    assert thread == "pgqw-async" and task is not None  # on the event loop, inside the handler's task
    assert seen["handler"] == ("attempt 1", "pgqw-async", task)  # what the hook made current, the handler sees
    assert seen["after"] == ("attempt 1", "pgqw-async", task, "succeeded")
    assert current.get() == "none"  # nothing leaked into the executor thread


def test_hook_sees_an_attempt_cancelled_while_it_ran(conn: psycopg.Connection) -> None:
    seen: list[str] = []
    around = hooks.Hooks()

    @around.around_attempt
    def watch(attempt: hooks.Attempt) -> hooks.Around:
        seen.append((yield).outcome)

    executor, slots, _ = _executor(conn, around)
    run = slots.take(claimed(conn, type="crash", payload={}))[0]
    db.cancel_job(conn, job_id=run.job.id)  # an operator cancels it while it runs
    run.cancelled = True                     # and a heartbeat told the worker
    executor.execute(run)
    assert seen == ["cancelled"]
    assert db.get_job(conn, job_id=run.job.id).status == "cancelled"


def test_hooks_registration_refuses_what_cannot_wrap_a_handler() -> None:
    around = hooks.Hooks()

    def plain(attempt: hooks.Attempt) -> None:
        return None

    async def coroutine(attempt: hooks.Attempt) -> None:
        return None

    async def async_generator(attempt: hooks.Attempt):  # type: ignore[no-untyped-def]
        yield

    for wrong in (plain, coroutine, async_generator, "not callable"):
        with pytest.raises(TypeError):
            around.around_attempt(wrong)  # type: ignore[arg-type]

    def fine(attempt: hooks.Attempt) -> hooks.Around:
        yield

    assert around.around_attempt(fine) is fine
    around.around_attempt(fine)  # again: still once
    assert list(around) == [fine]
    around.remove(fine)
    assert len(around) == 0
