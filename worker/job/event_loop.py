"""The event loop the `async def` handlers run on: one, in a thread of its own (pgqw-async), started at
the first async handler.

Jobs are handed to it from the worker's other threads (the claim, the batch completion's claim) with
start(): each becomes a task on the loop, and the handle returned (a LoopTask) is what the rest of the
worker holds, to cancel it at its deadline (from the deadlines' thread) or to wait for it (the
in-process tests). The jobs handed over while the loop was busy are taken in one go, with one wake-up
of the loop for them all, where asyncio.run_coroutine_threadsafe would wake it once per job.
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import threading
from typing import Any, Coroutine


class LoopTask:
    """A coroutine handed to the loop: its task once the loop has taken it. Thread-safe."""

    def __init__(self, runner: EventLoop) -> None:
        self._runner = runner
        self._task: asyncio.Task[Any] | None = None
        self._cancelled = False
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._value: Any = None

    def cancel(self) -> bool:
        """Cancels the task (asyncio.CancelledError at its next await), or, not yet taken by the loop,
        keeps the coroutine from starting. False once it is known to have ended (a task ending at this
        moment may still end as it would have: see result())."""
        with self._runner.lock:
            if self._done.is_set():
                return False
            self._cancelled = True
            task = self._task
        if task is not None:
            self._runner.call(task.cancel)
        return True

    def cancelled(self) -> bool:
        return self._done.is_set() and isinstance(self._error, asyncio.CancelledError)

    def done(self) -> bool:
        return self._done.is_set()

    def result(self, timeout: float | None = None) -> Any:
        """The coroutine's value once it has ended; its exception raised, concurrent.futures'
        CancelledError for a cancelled one, TimeoutError when it has not ended within timeout."""
        if not self._done.wait(timeout):
            raise TimeoutError("the task has not ended")
        if isinstance(self._error, asyncio.CancelledError):
            raise concurrent.futures.CancelledError()
        if self._error is not None:
            raise self._error
        return self._value

    # -------------------------------------------------------------------------------- on the loop

    def _start(self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any]) -> None:
        with self._runner.lock:
            if not self._cancelled:
                self._task = loop.create_task(coro)
        if self._task is None:
            coro.close()
            self._end(asyncio.CancelledError(), None)
        else:
            self._task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            self._end(asyncio.CancelledError(), None)
        else:
            self._end(task.exception(), None if task.exception() else task.result())

    def _end(self, error: BaseException | None, value: Any) -> None:
        with self._runner.lock:
            self._error, self._value = error, value
            self._done.set()


class EventLoop:
    """One event loop in a thread of its own, started at the first coroutine handed to it."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self.lock = threading.Lock()
        self._incoming: collections.deque[tuple[Coroutine[Any, Any, Any], LoopTask]] = collections.deque()

    def start(self, coro: Coroutine[Any, Any, Any]) -> LoopTask:
        """The coroutine started as a task on the loop (with the others handed over meanwhile)."""
        handle = LoopTask(self)
        with self.lock:
            loop = self._running()
            self._incoming.append((coro, handle))
            wake = len(self._incoming) == 1  # else a wake-up is on its way, and takes this one too
        if wake:
            loop.call_soon_threadsafe(self._take_incoming)
        return handle

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """The coroutine's value, once it has run on the loop (from another thread)."""
        return self.start(coro).result()

    def call(self, fn: Any) -> None:
        """fn() on the loop's thread, soon (the loop must be running)."""
        assert self._loop is not None
        self._loop.call_soon_threadsafe(fn)

    def close(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)

    def _running(self) -> asyncio.AbstractEventLoop:
        """The loop, started at the first call (with self.lock held)."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, name="pgqw-async", daemon=True).start()
        return self._loop

    def _take_incoming(self) -> None:
        assert self._loop is not None
        while True:
            with self.lock:
                if not self._incoming:
                    return
                coro, handle = self._incoming.popleft()
            handle._start(self._loop, coro)
