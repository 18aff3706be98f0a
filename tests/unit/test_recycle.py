"""When a worker process makes way for a fresh one (worker/recycle.py): each limit alone, the figures
as the worker reports them, and no limit meaning never."""
from __future__ import annotations

from collections import Counter

from pgqw.worker.recycle import Gate, Recycle, rss_mb


def test_recycle_after_max_jobs_counts_every_ended_attempt_not_hand_backs() -> None:
    counts: Counter[str] = Counter({"succeeded": 2, "failed": 1, "handed back": 5, "swept": 3})
    r = Recycle(max_jobs=4, max_memory_mb=None, max_leaked=None, counts=lambda: counts)
    assert r.reason() is None
    counts["dead"] += 1
    assert r.reason() == "ran 4 jobs (WORKER_MAX_JOBS=4)"


def test_recycle_when_leaked_threads_pass_the_limit() -> None:
    leaked = [2]
    r = Recycle(max_jobs=None, max_memory_mb=None, max_leaked=2, counts=Counter, leaked=lambda: leaked[0])
    assert r.reason() is None  # at the limit: not past it
    leaked[0] = 3
    assert r.reason() == "3 handler threads leaked (WORKER_MAX_LEAKED=2)"


def test_recycle_when_memory_passes_the_limit() -> None:
    used = [99.0]
    r = Recycle(max_jobs=None, max_memory_mb=100, max_leaked=None, counts=Counter, memory_mb=lambda: used[0])
    assert r.reason() is None
    used[0] = 180.4
    assert r.reason() == "memory 180 MiB (WORKER_MAX_MEMORY_MB=100)"


def test_recycle_without_limits_never_asks_for_a_figure() -> None:
    def unused() -> int:
        raise AssertionError("a figure was read though no limit is set")

    r = Recycle(max_jobs=None, max_memory_mb=None, max_leaked=None, counts=unused, leaked=unused, memory_mb=unused)
    assert r.reason() is None


def test_rss_grows_with_memory_this_process_holds() -> None:
    before = rss_mb()
    block = bytearray(64 * 1024 * 1024)
    block[::4096] = b"x" * len(block[::4096])  # touch every page, so it is resident
    assert rss_mb() >= before + 60
    del block


def test_recycle_gate_stops_the_worker_once_and_answers_stopping_from_then_on() -> None:
    stopped: list[str] = []
    logged: list[tuple] = []
    why: list[str | None] = [None]
    gate = Gate(lambda: why[0], stopping=lambda: bool(stopped), stop=stopped.append,
                log=lambda *a, **k: logged.append(a))
    assert gate() is False and stopped == []
    why[0] = "ran 3 jobs (WORKER_MAX_JOBS=3)"
    assert gate() is True and gate() is True
    assert stopped == ["recycling: ran 3 jobs (WORKER_MAX_JOBS=3)"]
    assert logged == [("recycling", "(ran 3 jobs (WORKER_MAX_JOBS=3)): no more claims; a fresh process takes over")]
