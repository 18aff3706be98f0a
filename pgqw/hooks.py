"""Hooks around each attempt: your code before and after every handler a worker runs.

    from pgqw import hooks

    @hooks.around_attempt
    def timed(attempt: hooks.Attempt) -> hooks.Around:
        print("starting", attempt.type, attempt.job_id)   # before the handler
        outcome = yield                                   # the handler runs here
        histogram.record(outcome.duration, {"type": attempt.type, "outcome": outcome.outcome})

A hook is a generator function registered with `around_attempt`, usually in a task module (the
modules `pgqw worker --tasks` imports). For each attempt the worker calls every hook with the
`Attempt`, runs each one up to its `yield`, then validates the payload and calls the handler, then
sends the `Outcome` into each hook at its `yield` and runs it to its end. Hooks nest in the order they
were registered: the first one registered is the outermost (it starts first and ends last).

A hook runs where the handler runs: on the executor thread for a plain handler, inside the handler's
asyncio task (on the worker's event loop) for an `async def` one. So what the hook makes current, a
`contextvars` value, an OpenTelemetry span, is current in the handler too, and a span the handler
opens is a child of the hook's.

A hook observes an attempt; it cannot change it. The outcome is sent in, never thrown: the handler's
exception is `outcome.error`, and nothing a hook does or raises changes what the worker records. A hook
that raises (before or after its `yield`) is reported by the worker (a `hook error` line) and left
out for the rest of that attempt; the other hooks, the handler and the recording go on. A hook must
yield exactly once.

This module is the library's: the worker calls `Hooks.enter`, nothing here knows the worker.
"""
from __future__ import annotations

import inspect
import logging
import threading
import uuid
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
SNOOZED = "snoozed"  # the handler raised pgqw.Snooze: the job is put off, the attempt not spent


@dataclass(frozen=True)
class Attempt:
    """One attempt of a job, as the worker is about to run it."""

    job_id: uuid.UUID
    type: str
    queue: str
    attempt: int            # 1 for the first try
    max_attempts: int
    payload: Any            # a copy of the job's payload as stored (JSON), before the task's model validates it
    worker_id: str


@dataclass(frozen=True)
class Outcome:
    """What came of an attempt's handler, before the worker records it."""

    outcome: str                        # SUCCEEDED, FAILED, CANCELLED (cancel_job asked it to stop) or SNOOZED
    duration: float                     # seconds: the payload's validation and the handler
    error: BaseException | None = None  # what the handler (or the payload's validation) raised
    message: str | None = None          # the error as the attempt records it (`last_error`)
    retryable: bool = False             # a failure the queue will retry while attempts are left

    @property
    def failed(self) -> bool:
        return self.outcome == FAILED


Around = Generator[None, Outcome, None]
Hook = Callable[[Attempt], Around]
# Told of a hook that raised: the hook, the exception, and "before" or "after" the handler.
OnError = Callable[[Hook, Exception, str], None]


def hook_name(hook: object) -> str:
    """module.qualname of a hook (for messages)."""
    name = getattr(hook, "__qualname__", None) or type(hook).__qualname__
    module = getattr(hook, "__module__", None)
    return f"{module}.{name}" if module else name


def _log_error(hook: Hook, exc: Exception, when: str) -> None:
    logging.getLogger("pgqw.hooks").error("hook %s raised %s the handler", hook_name(hook), when, exc_info=exc)


class Hooks:
    """The hooks registered, in order. `pgqw.hooks.registry` is the one every worker uses; a test or
    an embedding may give a worker a Hooks of its own."""

    def __init__(self) -> None:
        self._hooks: tuple[Hook, ...] = ()   # replaced whole: a reader needs no lock
        self._lock = threading.Lock()

    def around_attempt(self, hook: Hook) -> Hook:
        """Registers hook (a generator function taking an Attempt) and returns it, so it works as a
        decorator. Registering the same hook again changes nothing. Raises TypeError for a function
        that is not a generator function."""
        if not callable(hook):
            raise TypeError(f"a hook must be a generator function, got {hook!r}")
        if inspect.isasyncgenfunction(hook) or inspect.iscoroutinefunction(hook):
            raise TypeError(f"hook {hook_name(hook)} must be a plain generator function (def ... yield); "
                            "it runs around async handlers too, inside their task")
        if (inspect.isfunction(hook) or inspect.ismethod(hook)) and not inspect.isgeneratorfunction(hook):
            raise TypeError(f"hook {hook_name(hook)} must be a generator function: the handler runs at its yield")
        with self._lock:
            if hook not in self._hooks:
                self._hooks = (*self._hooks, hook)
        return hook

    def remove(self, hook: Hook) -> None:
        """Unregisters hook (nothing happens if it is not registered)."""
        with self._lock:
            self._hooks = tuple(h for h in self._hooks if h != hook)

    def __iter__(self) -> Iterator[Hook]:
        return iter(self._hooks)

    def __len__(self) -> int:
        return len(self._hooks)

    def enter(self, attempt: Attempt, on_error: OnError = _log_error) -> Entered:
        """Runs every hook up to its yield, in registration order, for one attempt. The caller runs the
        handler, then calls leave() with its outcome (or close() if the attempt is abandoned)."""
        entered = Entered(on_error)
        for hook in self._hooks:
            try:
                running = hook(attempt)
                next(running)
            except StopIteration:
                on_error(hook, RuntimeError("it returned without yielding"), "before")
                continue
            except Exception as exc:  # noqa: BLE001 - a hook's error never reaches the attempt
                on_error(hook, exc, "before")
                continue
            entered.running.append((hook, running))
        return entered


class Entered:
    """The hooks of one attempt that reached their yield, innermost last."""

    def __init__(self, on_error: OnError) -> None:
        self.on_error = on_error
        self.running: list[tuple[Hook, Around]] = []

    def leave(self, outcome: Outcome) -> None:
        """Sends the outcome into each hook, innermost first, and runs it to its end."""
        while self.running:
            hook, running = self.running.pop()
            try:
                running.send(outcome)
            except StopIteration:
                continue
            except Exception as exc:  # noqa: BLE001 - a hook's error never reaches the attempt
                self.on_error(hook, exc, "after")
                continue
            self.on_error(hook, RuntimeError("it yielded more than once"), "after")
            self._close(hook, running)

    def close(self) -> None:
        """The attempt ends without an outcome (the worker is exiting): each hook's generator is closed
        (GeneratorExit at its yield, so its `with` and `finally` blocks run)."""
        while self.running:
            self._close(*self.running.pop())

    def _close(self, hook: Hook, running: Around) -> None:
        try:
            running.close()
        except Exception as exc:  # noqa: BLE001 - a hook's error never reaches the attempt
            self.on_error(hook, exc, "after")


registry = Hooks()
around_attempt = registry.around_attempt
remove = registry.remove
