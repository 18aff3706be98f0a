"""worker/job/event_loop.py: coroutines handed to the async handlers' loop from other threads, each a
task that can be cancelled or waited for from any thread."""
from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
from typing import Iterator

import pytest

from pgqw.worker.job.event_loop import EventLoop


@pytest.fixture
def loop() -> Iterator[EventLoop]:
    runner = EventLoop()
    yield runner
    runner.close()


async def _value(n: int) -> int:
    await asyncio.sleep(0)
    return n


async def _raises() -> None:
    await asyncio.sleep(0)
    raise LookupError("missing")


def test_event_loop_a_task_gives_its_value_or_its_exception(loop: EventLoop) -> None:
    ok, bad = loop.start(_value(7)), loop.start(_raises())
    assert ok.result(timeout=5) == 7 and ok.done() and not ok.cancelled()
    with pytest.raises(LookupError, match="missing"):
        bad.result(timeout=5)
    assert ok.cancel() is False  # it has ended


def test_event_loop_a_running_task_is_cancelled_at_its_next_await(loop: EventLoop) -> None:
    entered, cancelled = threading.Event(), threading.Event()

    async def waits() -> None:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    handle = loop.start(waits())
    assert entered.wait(5)
    with pytest.raises(TimeoutError):
        handle.result(timeout=0.01)
    assert handle.cancel() is True
    with pytest.raises(concurrent.futures.CancelledError):
        handle.result(timeout=5)
    assert cancelled.is_set() and handle.cancelled()


def test_event_loop_jobs_handed_over_while_it_is_busy_are_taken_with_one_wake_up(loop: EventLoop) -> None:
    release, busy = threading.Event(), threading.Event()
    loop.run(asyncio.sleep(0))  # the loop is running
    loop.call(lambda: (busy.set(), release.wait(5)))  # the loop's thread held up
    assert busy.wait(5)
    takes = []
    take = loop._take_incoming
    loop._take_incoming = lambda: (takes.append(1), take())[1]  # type: ignore[method-assign]
    handles = [loop.start(_value(n)) for n in range(4)]
    never = _value(4)
    cancelled_early = loop.start(never)
    assert cancelled_early.cancel() is True  # before the loop took it: it never starts
    release.set()
    assert [h.result(timeout=5) for h in handles] == [0, 1, 2, 3]
    with pytest.raises(concurrent.futures.CancelledError):
        cancelled_early.result(timeout=5)
    assert inspect.getcoroutinestate(never) == inspect.CORO_CLOSED  # closed, not left "never awaited"
    assert takes == [1]
