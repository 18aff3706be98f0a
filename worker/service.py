"""The shape every part of the worker that runs on its own, or retries, shares (as River's services share
internal/startstop): one retry rule, and one start/stop lifecycle.

The retry rule (attempt, retry): a try that raises is handed to its part's failed(exc, delay), with the
next delay of the part's Backoff; failed logs the error and returns how long to wait before the next try
(it may shorten the wait, or raise to give up: an error not worth retrying, a deadline passed). A try that
goes through resets the backoff. WorkerExiting, or psycopg_pool's PoolClosed, means the process is
exiting: it is never retried.

A Service is a part with a thread of its own (heartbeat, listener, scheduler, the batch completion) or a
loop of its own (the main loop): start() runs it on a thread named pgqw-<name>, stop() asks it to end
and wakes it, and run() is the loop: a round (attempt), then a pause, until stopped. The database's
call() retries one statement with the same rule (connection/database.py); the sweeper, the pruner and
presence run inside the main loop's rounds and retry with them.
"""
from __future__ import annotations

import random
import threading
from typing import Any, Callable, Protocol, TypeVar

from psycopg_pool import PoolClosed

T = TypeVar("T")

BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 5.0


class WorkerExiting(Exception):
    """The process is exiting: stop retrying."""


class Backoff:
    """first, twice that, … capped at cap (0.1 s, 0.2 s, 0.4 s … 5 s); reset after a success. jitter: each
    delay is made up to that share shorter, at random (0.2: 80 % to 100 % of it), so the workers that
    lost the same server do not all come back at the same instant; never longer, so a cap holds."""

    __slots__ = ("first", "cap", "jitter", "n", "_random")

    def __init__(self, first: float = BACKOFF_FIRST_S, cap: float = BACKOFF_MAX_S, *, jitter: float = 0.0,
                 random: Callable[[], float] = random.random) -> None:
        if not 0.0 <= jitter <= 1.0:
            raise ValueError(f"jitter {jitter!r}: a share from 0 to 1")
        self.first, self.cap, self.jitter, self.n = first, cap, jitter, 0
        self._random = random

    def next(self) -> float:
        delay = min(self.cap, self.first * 2 ** min(self.n, 20))
        self.n += 1
        if self.jitter:
            delay -= delay * self.jitter * self._random()
        return delay

    def reset(self) -> None:
        self.n = 0


class Retrying(Protocol):
    """What the retry rule needs of a part: its backoff, and what a failure costs it."""

    @property
    def backoff(self) -> Backoff: ...

    def failed(self, exc: Exception, delay: float) -> float:
        """A try raised exc; delay is the backoff's next. Logs it; returns how long to wait before the
        next try, or raises to give up."""
        ...


def failure(part: Retrying, exc: Exception) -> float:
    """What a try that raised exc costs: how long to wait before the next (part.failed's answer, given
    the backoff's next delay). WorkerExiting and PoolClosed are raised (as WorkerExiting)."""
    if isinstance(exc, WorkerExiting):
        raise exc
    if isinstance(exc, PoolClosed):
        raise WorkerExiting() from None
    return part.failed(exc, part.backoff.next())


def attempt(part: Retrying, fn: Callable[..., T], *args: Any) -> tuple[T | None, float | None]:
    """One try of fn(*args) under the retry rule: (its value, None), or after an error (None, how long
    to wait before the next try). A try that goes through resets the backoff."""
    try:
        value = fn(*args)
    except Exception as exc:  # noqa: BLE001 - failure() decides: retry, give up, or the process exits
        return None, failure(part, exc)
    part.backoff.reset()
    return value, None


def retry(part: Retrying, wait: Callable[[float], bool], fn: Callable[..., T], *args: Any,
          after: Exception | None = None) -> T:
    """fn(*args) until it returns (or part.failed gives up), waiting wait(delay) between tries; a wait
    that returns True (the process is exiting) raises WorkerExiting. after: the error of a first try the
    caller made itself (so a call that goes through at once costs nothing more than that try)."""
    if after is not None and wait(failure(part, after)):
        raise WorkerExiting() from after
    while True:
        value, delay = attempt(part, fn, *args)
        if delay is None:
            return value  # type: ignore[return-value]  # fn's own value (None when fn returns None)
        if wait(delay):
            raise WorkerExiting()


class Part(Protocol):
    """The service protocol: what the worker starts, then stops at its exit (a Service, the database's
    pool, presence, the inline completion that runs nothing of its own)."""

    def start(self) -> object: ...

    def stop(self) -> None: ...


class Service:
    """A part of the worker with a loop of its own. Subclasses give round() (one round's work: returns
    how long to wait before the next), report() (logs a failed round: returns the wait before the next
    try), and where needed pause(), interrupt() and finish().

    stopped: the event that ends it, the worker's `exiting` for its background threads (or the main
    loop's `stopping`); a round that fails once it is set is not logged: the service ends."""

    name = "service"

    def __init__(self, stopped: threading.Event | None = None, *, backoff: Backoff | None = None) -> None:
        self.stopped = stopped if stopped is not None else threading.Event()
        self.backoff = backoff if backoff is not None else Backoff()
        self.thread: threading.Thread | None = None

    # -------------------------------------------------------------------------------- lifecycle

    def start(self) -> threading.Thread:
        """run() on a daemon thread of its own (pgqw-<name>)."""
        self.thread = threading.Thread(target=self.run, name=f"pgqw-{self.name}", daemon=True)
        self.thread.start()
        return self.thread

    def stop(self) -> None:
        """Asks the service to end after its current round, and cuts its pause short."""
        self.stopped.set()
        self.interrupt()

    def join(self, timeout: float | None = None) -> None:
        if self.thread is not None:
            self.thread.join(timeout)

    def loop(self, stopped: threading.Event | None = None) -> None:
        """run() on the caller's thread, until stopped (given: the event that ends it) is set."""
        if stopped is not None:
            self.stopped = stopped
        self.run()

    def run(self) -> None:
        """Rounds and pauses until stopped; then finish()."""
        try:
            while not self.stopped.is_set():
                wait, failed = self.attempt()
                self.pause(wait, failed)
        except WorkerExiting:
            pass
        finally:
            self.finish()

    def attempt(self) -> tuple[float, bool]:
        """One round under the retry rule: (how long to wait before the next, whether it failed)."""
        wait, delay = attempt(self, self.round)
        return (delay, True) if delay is not None else (wait or 0.0, False)

    def failed(self, exc: Exception, delay: float) -> float:
        if self.stopped.is_set():
            raise WorkerExiting() from exc
        return self.report(exc, delay)

    # -------------------------------------------------------------------------------- for subclasses

    def round(self) -> float:
        raise NotImplementedError

    def report(self, exc: Exception, delay: float) -> float:
        """A round raised exc: log it; return how long to wait (the backoff's delay, unless told otherwise)."""
        raise NotImplementedError

    def pause(self, seconds: float, failed: bool) -> None:
        """Between rounds: until stopped, at most seconds."""
        if seconds > 0:
            self.stopped.wait(seconds)

    def interrupt(self) -> None:
        """Cuts a pause or a wait short (stop() calls it); a pause on `stopped` needs nothing more."""

    def finish(self) -> None:
        """After the last round (the listener closes its connection)."""
