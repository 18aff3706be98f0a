"""`pgqw worker --processes N`: N worker processes under one supervisor, each replaced when it ends.

The supervisor holds no job and no connection: it starts N `pgqw worker` children (this interpreter,
each in a session of its own so that a Ctrl+C in the terminal reaches the supervisor alone), and
watches them. A child that ends while the supervisor is not stopping is replaced:

- at once when it exited 0 on its own: it recycled (it ran WORKER_MAX_JOBS jobs, passed
  WORKER_MAX_MEMORY_MB, or leaked more than WORKER_MAX_LEAKED handler threads; see recycle.py) after
  finishing or handing back what it held;
- after a backoff when it failed or was killed (a handler that calls os.abort(), the OOM killer): 0.5 s,
  then twice as long after each quick failure in a row, at most 30 s; a child that ran RESTART_STEADY_S
  resets it. So a process that cannot start (a bad setting, no database) does not spin, and a crashing
  job costs a restart, never a crash loop: the crashed job's attempt runs alone the next time and is
  dead-lettered when its attempts are spent (docs/worker.md, "A worker process that crashes").

The first SIGTERM or SIGINT is passed to every child (each stops gracefully: no more claims, the grace,
the hand-back); the supervisor waits for them and exits 0. A second signal is passed on too, so the
children exit at once, and the supervisor with them.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from pgqw.worker.log import Log

BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
RESTART_STEADY_S = 30.0   # a child that ran this long before failing restarts after the first backoff
CHECK_S = 0.2             # how often the supervisor looks at its children (a wait, cut short by a signal)


@dataclass
class Slot:
    """One of the N places a worker process runs in."""

    n: int
    process: subprocess.Popen[Any] | None = None
    started: float = 0.0
    backoff: float = 0.0            # the wait before the next start after a failure (0: none yet)
    start_at: float = 0.0           # when the next start is due (after a failure's backoff)
    starts: int = field(default=0)
    signalled: bool = False         # this process was passed the stop


class Supervisor:
    """Runs `argv(n)` (the command line of the worker process in slot n) in each of n slots."""

    def __init__(self, argv: Callable[[int], Sequence[str]], processes: int, log: Log, *,
                 env: dict[str, str] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.argv = argv
        self.slots = [Slot(n) for n in range(1, processes + 1)]
        self.log = log
        self.env = env
        self.clock = clock
        self.stopping = threading.Event()
        self.signals = 0

    def run(self) -> int:
        self._install()
        self.log("supervisor", f"pid {os.getpid()}, {len(self.slots)} worker processes")
        for slot in self.slots:
            self._start(slot)
        while not self.stopping.is_set():
            for slot in self.slots:
                self._check(slot)
            self.stopping.wait(CHECK_S)
        return self._wait_all()

    # ------------------------------------------------------------------ children

    def _start(self, slot: Slot) -> None:
        if self.stopping.is_set():
            return
        slot.process = subprocess.Popen(list(self.argv(slot.n)), env=self.env, start_new_session=True)
        slot.signalled = False
        slot.started = self.clock()
        slot.starts += 1

    def _check(self, slot: Slot) -> None:
        now = self.clock()
        if slot.process is None:
            if now >= slot.start_at:
                self._start(slot)
            return
        code = slot.process.poll()
        if code is None or self.stopping.is_set():
            return
        ran = now - slot.started
        slot.process = None
        if code == 0:
            slot.backoff = 0.0
            self.log("replaced", f"process {slot.n} (pid exited 0 after {ran:.1f}s: recycled); starting another",
                     process=slot.n, exit_code=code)
            self._start(slot)
            return
        if ran >= RESTART_STEADY_S or slot.backoff == 0.0:
            slot.backoff = BACKOFF_FIRST_S
        else:
            slot.backoff = min(BACKOFF_MAX_S, slot.backoff * 2)
        slot.start_at = now + slot.backoff
        self.log("died", f"process {slot.n} {describe_exit(code)} after {ran:.1f}s; restarting in {slot.backoff:.1f}s",
                 process=slot.n, exit_code=code, delay_ms=round(slot.backoff * 1000))

    def _wait_all(self) -> int:
        # A process started as the signal came (the signal between a check and its start) has not been
        # passed the stop yet: it gets it now, once, like the others.
        for slot in self.slots:
            if slot.process is not None and not slot.signalled:
                self._pass_stop(slot)
        for slot in self.slots:
            if slot.process is not None:
                slot.process.wait()
        self.log("supervisor stopped", f"{sum(s.starts for s in self.slots)} worker processes started in all")
        return 0

    # ------------------------------------------------------------------ signals

    def _install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, frame: Any = None) -> None:
        self.signals += 1
        self.stopping.set()
        for slot in self.slots:  # a child between a failure and its restart has nothing to stop
            if slot.process is not None:
                self._pass_stop(slot)

    def _pass_stop(self, slot: Slot) -> None:
        assert slot.process is not None
        slot.signalled = True
        if slot.process.poll() is None:
            try:
                slot.process.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited {code}"
