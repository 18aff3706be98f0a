"""When the main loop wakes: a claim-now signal and the times jobs come due later.

The listener hears pgqw_jobs (a job ready now: set()) and pgqw_jobs_at ('<ms> <queue>': a job comes due in
ms: at()); a freed slot and a stop set() it too. The main loop's wait ends at the first of them. What the
worker may not have heard (before it listened, while its LISTEN connection was down, the later jobs of one
enqueue_jobs call, more times than it keeps) it asks with next_run_at, once, when a round comes at or
after that point (horizon)."""
from __future__ import annotations

import heapq
import math
import threading
import time
from typing import Callable, Sequence


class Wakeup:
    """What the main loop waits on: a claim-now signal with threading.Event's interface (set() by a
    notification of a job ready now, a freed slot, a stop) and the times jobs come due later, on the
    monotonic clock (at(), from the listener and next_run_at). wait() ends at the first of the signal, the
    earliest due time, the timeout; an earlier time heard meanwhile moves its end, without a claim before it.

    Doubts: from a time on, this worker may not know every due time (not asked yet at start, its LISTEN
    connection came back, several due times announced as one, more times than it keeps). A round at or after
    the earliest (horizon) asks next_run_at (needs_asking, learn); the answer settles the doubts it covers."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, max_times: int = 10_000) -> None:
        self.clock = clock
        self.max_times = max_times      # memory bound; past it the latest half is forgotten (and asked later)
        self._doubts: list[tuple[float, float]] = []  # (from when, heard when)
        self._cond = threading.Condition()
        self._flag = False
        self._times: list[float] = []   # a heap

    def set(self) -> None:
        with self._cond:
            self._flag = True
            self._cond.notify_all()

    def clear(self) -> None:
        with self._cond:
            self._flag = False

    def is_set(self) -> bool:
        return self._flag

    def wait(self, timeout: float | None = None) -> bool:
        """Until set(), the earliest due time or the timeout. True unless it was the timeout."""
        with self._cond:
            end = None if timeout is None else self.clock() + timeout
            while not self._flag:
                now = self.clock()
                if self._times and self._times[0] <= now:
                    return True
                until = min(end if end is not None else math.inf, self._times[0] if self._times else math.inf)
                if until <= now:
                    return False
                self._cond.wait(None if until == math.inf else until - now)
            return True

    def at(self, when: float, *, more: bool = False) -> None:
        """A job comes due at when (monotonic); more: others after it that this worker was not told of."""
        with self._cond:
            if more:
                self._unsure_from(when)
            if len(self._times) >= self.max_times:
                keep = sorted(self._times)[: self.max_times // 2]
                self._unsure_from(sorted(self._times)[len(keep)])
                self._times = keep      # a sorted list is a heap
            earlier = not self._times or when < self._times[0]
            heapq.heappush(self._times, when)
            if earlier:
                self._cond.notify_all()  # the waiting main loop recomputes its end

    def earliest(self) -> float | None:
        with self._cond:
            return self._times[0] if self._times else None

    def take_due(self, now: float) -> int:
        """Forgets the times that have come (the round that follows claims their jobs). Returns how many."""
        with self._cond:
            n = 0
            while self._times and self._times[0] <= now:
                heapq.heappop(self._times)
                n += 1
            return n

    def unsure(self, now: float) -> None:
        """Due times from now on may have been missed (at start, after the LISTEN connection came back)."""
        with self._cond:
            self._unsure_from(now)

    @property
    def horizon(self) -> float | None:
        """From when this worker may not know every due time; None: it knows them all."""
        with self._cond:
            return min(d for d, _ in self._doubts) if self._doubts else None

    def needs_asking(self, now: float) -> bool:
        horizon = self.horizon
        return horizon is not None and now >= horizon

    def learn(self, asked_at: float, now: float, due_in_ms: Sequence[int], *, complete: bool) -> None:
        """next_run_at's answer, asked at asked_at and received at now: these times; complete: no others
        after them (the answer was shorter than its limit). It settles every doubt heard before it was
        asked; one heard meanwhile stays (the answer may not cover it)."""
        with self._cond:
            self._doubts = [(d, heard) for d, heard in self._doubts if heard > asked_at]
            if not complete and due_in_ms:
                self._unsure_from(now + due_in_ms[-1] / 1000.0)
        for ms in due_in_ms:
            self.at(now + ms / 1000.0)

    def _unsure_from(self, when: float) -> None:
        self._doubts.append((when, self.clock()))
        if len(self._doubts) > 100:  # a bound: one doubt from the earliest, as if just heard
            self._doubts = [(min(d for d, _ in self._doubts), self.clock())]
