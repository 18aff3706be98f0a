"""Real worker processes for the worker tests: started by pgqw.launch, their output captured to a
file each, always stopped at the end of the test, their logs printed at teardown (pytest shows them
only when the test failed)."""
from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import psycopg
import pytest

from pgqw import launch
from tests.lab import ROOT

T = TypeVar("T")

# Settings a worker must not inherit from the environment running the tests: pgqw.launch's list.
SETTINGS_ENV = launch.SETTINGS

# Fast defaults: short work, short leases, frequent sweeps and polls, quick retries.
FAST = {
    "SIM_MIN_LATENCY_MS": "50",
    "SIM_MAX_LATENCY_MS": "150",
    "SIM_FAILURE_RATE": "0",
    "STUCK_JOB_TIMEOUT_MS": "2000",
    "RETRY_BASE_DELAY_MS": "50",
    "RETRY_MAX_JITTER_MS": "0",
    "POLL_INTERVAL_MS": "300",
    "SWEEP_INTERVAL_MS": "300",
    "SHUTDOWN_GRACE_MS": "3000",
}


def wait_for(what: str | Callable[[], str], check: Callable[[], T], timeout: float = 10.0,
             every: float = 0.05) -> T:
    """pgqw.launch.wait_for that fails the test (not an error) after timeout seconds."""
    try:
        return launch.wait_for(check, timeout=timeout, interval=every, what=what)
    except TimeoutError as exc:
        pytest.fail(str(exc))


class WorkerProcess:
    """A `pgqw worker --id ID` child (pgqw.launch) with FAST settings under the test's own, and
    helpers to read its log by event."""

    def __init__(self, worker_id: str, db_url: str, log_path: Path, env: dict[str, str],
                 args: list[str], prefix: list[str] | None = None) -> None:
        """prefix: a command the worker runs under, e.g. ["ip", "netns", "exec", "ns1"]."""
        self.worker_id = worker_id
        self.log_path = log_path
        self.child = launch.start_worker(worker_id, args=args, env={**FAST, **env}, database_url=db_url,
                                         log=log_path, cwd=ROOT, prefix=prefix or ())
        self.proc = self.child.process

    @property
    def pid(self) -> int:
        return self.child.pid

    def text(self) -> str:
        return self.child.output()

    def lines(self, event: str) -> list[str]:
        """Log lines of one event, e.g. lines("start")."""
        pattern = re.compile(r"^\S+Z \[" + re.escape(self.worker_id) + r"\] " + re.escape(event) + r"(?=\s|$)")
        return [line for line in self.text().splitlines() if pattern.match(line)]

    def wait_log(self, event: str, count: int = 1, timeout: float = 10.0) -> list[str]:
        def seen() -> list[str] | None:
            if not self.child.alive() and len(self.lines(event)) < count:
                pytest.fail(f"worker {self.worker_id} exited with {self.child.returncode} before logging "
                            f"{count} {event!r} line(s)")
            found = self.lines(event)
            return found if len(found) >= count else None

        return wait_for(f"{count} {event!r} line(s) from {self.worker_id}", seen, timeout)

    def started(self, timeout: float = 15.0) -> WorkerProcess:
        try:
            self.child.wait_ready(timeout=timeout)
        except (launch.LaunchError, TimeoutError) as exc:
            pytest.fail(str(exc))
        return self

    def alive(self) -> bool:
        return self.child.alive()

    def signal(self, sig: int) -> None:
        self.child.send_signal(sig)

    def wait(self, timeout: float) -> int:
        return self.child.wait(timeout=timeout)

    def close(self) -> None:
        self.child.stop(signal.SIGKILL, timeout=10)


@pytest.fixture
def start_worker(db_url: str, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """start_worker("w1", concurrency=3, env={...}) → a started WorkerProcess (it logged its start line)."""
    started: list[WorkerProcess] = []

    def start(worker_id: str, *, concurrency: int | None = None, env: dict[str, str] | None = None,
              wait: bool = True) -> WorkerProcess:
        args = ["--concurrency", str(concurrency)] if concurrency else []
        proc = WorkerProcess(worker_id, db_url, tmp_path / f"{worker_id}.log", env or {}, args)
        started.append(proc)
        return proc.started() if wait else proc

    yield start
    for proc in started:
        proc.close()
    for proc in started:
        print(f"----- log of worker {proc.worker_id} (exit {proc.proc.returncode}) -----")
        print(proc.text())


def statuses(conn: psycopg.Connection, ids: list) -> dict[str, int]:
    found: dict[str, int] = {}
    for row in conn.execute("select status from jobs where id = any(%s)", [ids]).fetchall():
        found[row[0]] = found.get(row[0], 0) + 1
    return found


@pytest.fixture
def until_all(conn: psycopg.Connection) -> Callable[..., None]:
    """until_all(ids, "succeeded", timeout=10): waits until every job has that status."""

    def until(ids: list, status: str, timeout: float = 15.0) -> None:
        wait_for(lambda: f"{len(ids)} job(s) {status} (now {statuses(conn, ids)})",
                 lambda: statuses(conn, ids).get(status, 0) == len(ids), timeout)

    return until
