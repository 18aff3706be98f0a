"""The supervisor of `pgqw worker --processes N` (worker/supervisor.py), step by step with real child
processes (tiny Python programs) and a clock the test moves: a child that exits 0 is replaced at once, one
that fails waits out a backoff that doubles while it keeps failing fast and resets after a steady run, and
a stop is passed to every child. The process-level test with real workers is
tests/acceptance/test_worker_processes.py."""
from __future__ import annotations

import io
import signal
import sys
import threading
import time
from pathlib import Path

from pgqw.worker.log import Log
from pgqw.worker.supervisor import BACKOFF_FIRST_S, BACKOFF_MAX_S, RESTART_STEADY_S, Supervisor, describe_exit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _supervisor(tmp_path: Path, program: str, processes: int = 1) -> tuple[Supervisor, Clock, io.StringIO]:
    out = io.StringIO()
    clock = Clock()
    script = tmp_path / "child.py"
    script.write_text(program)
    return Supervisor(lambda n: [sys.executable, str(script), str(n)], processes, Log("sup", out),
                      clock=clock), clock, out


def _ended(sup: Supervisor) -> None:
    for slot in sup.slots:
        if slot.process is not None:
            slot.process.wait(10)


def test_supervisor_replaces_a_child_that_exited_0_at_once(tmp_path: Path) -> None:
    sup, clock, out = _supervisor(tmp_path, "import sys; sys.exit(0)", processes=2)
    for slot in sup.slots:
        sup._start(slot)
    _ended(sup)
    for slot in sup.slots:
        sup._check(slot)
    assert [s.starts for s in sup.slots] == [2, 2]  # replaced in the same check, no wait
    assert out.getvalue().count(" replaced ") == 2 and "recycled" in out.getvalue()
    _ended(sup)


def test_supervisor_backs_off_a_child_that_keeps_failing_and_resets_after_a_steady_run(tmp_path: Path) -> None:
    sup, clock, out = _supervisor(tmp_path, "import sys; sys.exit(3)")
    slot = sup.slots[0]
    sup._start(slot)
    waits = []
    for _ in range(8):
        _ended(sup)
        sup._check(slot)                       # it died: a restart is due after the backoff
        assert slot.process is None
        waits.append(slot.start_at - clock.now)
        clock.now = slot.start_at - 0.01
        sup._check(slot)
        assert slot.process is None            # not before its time
        clock.now = slot.start_at
        sup._check(slot)
        assert slot.process is not None        # restarted when due
    assert waits == [min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** n) for n in range(8)]
    assert "process 1 exited 3 after 0.0s; restarting in 0.5s" in out.getvalue()
    # A run of RESTART_STEADY_S before failing: the next wait is the first one again.
    clock.now += RESTART_STEADY_S
    _ended(sup)
    sup._check(slot)
    assert slot.start_at - clock.now == BACKOFF_FIRST_S


def test_supervisor_passes_a_stop_to_every_child_and_exits_0_once_they_have(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    program = (
        "import pathlib, signal, sys, time\n"
        "def stop(*_):\n"
        "    pathlib.Path(sys.argv[0]).with_name('stopped-' + sys.argv[1]).write_text('SIGTERM')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        f"pathlib.Path({str(ready)!r} + sys.argv[1]).write_text('up')\n"
        "while True: time.sleep(0.05)\n"
    )
    sup, clock, out = _supervisor(tmp_path, program, processes=3)
    done: list[int] = []
    runner = threading.Thread(target=lambda: done.append(sup.run()))
    runner.start()
    try:
        until = time.monotonic() + 20
        for n in (1, 2, 3):  # each child is up (its handler installed) before the stop
            while not Path(f"{ready}{n}").exists():
                assert time.monotonic() < until and runner.is_alive(), f"child {n} did not start"
                time.sleep(0.02)
    finally:
        sup._on_signal(signal.SIGTERM)
        runner.join(20)
    assert done == [0]
    assert sorted(p.name for p in tmp_path.glob("stopped-*")) == ["stopped-1", "stopped-2", "stopped-3"]
    assert [s.starts for s in sup.slots] == [1, 1, 1]  # a child that exits because it was told is not replaced
    assert "supervisor stopped" in out.getvalue()


def test_supervisor_describes_an_exit_by_signal() -> None:
    assert describe_exit(-6) == "killed by SIGABRT"
    assert describe_exit(-9) == "killed by SIGKILL"
    assert describe_exit(2) == "exited 2"
