"""When a worker process should make way for a fresh one: it ran WORKER_MAX_JOBS attempts, its memory
passed WORKER_MAX_MEMORY_MB, or more than WORKER_MAX_LEAKED handler threads are still running past their
deadline (a sync handler cannot be stopped; its thread is leaked and its slot given back).

Every claim asks first (Gate, the claimer's `stopping`: the main loop's claims and the batch recorder's,
which claim in the transaction that records successes); a reason stops the worker as a signal would (no
more claims, running jobs finish within the grace or are handed back) and it exits 0, which the supervisor
(supervisor.py, `pgqw worker --processes N`) answers with a new process at once. A worker run alone
exits 0 the same way, for whatever restarts it (systemd's Restart=always, a container's restart policy).
"""
from __future__ import annotations

import os
import resource
import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping

# The slots' counts that end an attempt this worker ran (slots.py counts them).
ATTEMPT_ENDS = ("succeeded", "failed", "dead", "cancelled", "timed out", "snoozed")


def rss_mb() -> float:
    """This process's resident memory now, in MiB (Linux: /proc/self/statm; elsewhere its peak)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            resident_pages = int(f.read().split()[1])
        return resident_pages * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
        return peak / 1024 if os.uname().sysname != "Darwin" else peak / (1024 * 1024)


@dataclass(frozen=True)
class Recycle:
    """The limits (None: no limit) and where the figures come from."""

    max_jobs: int | None
    max_memory_mb: int | None
    max_leaked: int | None
    counts: Callable[[], Mapping[str, int]]     # the slots' counts
    leaked: Callable[[], int] = lambda: 0       # handler threads still running past their deadline
    memory_mb: Callable[[], float] = rss_mb

    def reason(self) -> str | None:
        """Why this process should be replaced now, or None."""
        if self.max_jobs is not None:
            counts = self.counts()
            ran = sum(counts.get(k, 0) for k in ATTEMPT_ENDS)
            if ran >= self.max_jobs:
                return f"ran {ran} jobs (WORKER_MAX_JOBS={self.max_jobs})"
        if self.max_leaked is not None:
            leaked = self.leaked()
            if leaked > self.max_leaked:
                return f"{leaked} handler threads leaked (WORKER_MAX_LEAKED={self.max_leaked})"
        if self.max_memory_mb is not None:
            used = self.memory_mb()
            if used > self.max_memory_mb:
                return f"memory {used:.0f} MiB (WORKER_MAX_MEMORY_MB={self.max_memory_mb})"
        return None


class Gate:
    """The claimer's `stopping`: True once the worker stops, or once `reason` gives one (which it logs as
    `recycling`, once, and stops the worker with)."""

    def __init__(self, reason: Callable[[], str | None], *, stopping: Callable[[], bool],
                 stop: Callable[[str], None], log: Callable[..., Any]) -> None:
        self.reason = reason
        self.stopping = stopping
        self.stop = stop
        self.log = log
        self.lock = threading.Lock()

    def __call__(self) -> bool:
        if self.stopping():
            return True
        why = self.reason()
        if why is None:
            return False
        with self.lock:  # the main thread and the recorder may both ask
            if not self.stopping():
                self.log("recycling", f"({why}): no more claims; a fresh process takes over", reason=why)
                self.stop(f"recycling: {why}")
        return True
