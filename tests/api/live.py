"""Real processes for tests: `pgqw api` (waitress) and `pgqw worker`, each on the test's database,
started by pgqw.launch from the project folder, their output read through a pipe and kept.

`pgqw api --port 0` lets the system pick a free port and prints the URL, which the launcher reads
from its output before waiting for the API to answer.
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterator

from pgqw import launch
from tests.lab import ROOT


class Process:
    """`pgqw ARGS` (pgqw.launch, piped output kept for assertions and failure messages)."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        kind = args[0] if args and args[0] in ("api", "worker") else "pgqw"
        self.child = launch.start(args, kind=kind, env=env, cwd=ROOT)
        self.proc = self.child.process

    def output(self) -> str:
        return self.child.output()

    def wait_for(self, pattern: str, timeout: float = 30) -> re.Match[str]:
        """The first output line matching pattern; fails when the output ends or time runs out."""
        try:
            return self.child.wait_output(pattern, timeout=timeout)
        except (launch.LaunchError, TimeoutError) as exc:
            raise AssertionError(str(exc)) from None

    def stop(self, timeout: float = 15) -> int:
        """SIGTERM, then SIGKILL if it does not end in time. Returns the exit code."""
        return self.child.stop(timeout=timeout)


@contextmanager
def serve_api(db_url: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """Runs `pgqw api --port 0` against db_url until it answers; yields its base URL (no trailing slash)."""
    server = Process(["api", "--port", "0"], {"DATABASE_URL": db_url, **(env or {})})
    try:
        try:
            server.child.wait_ready(timeout=30)
        except (launch.LaunchError, TimeoutError) as exc:
            raise AssertionError(str(exc)) from None
        assert server.child.url
        yield server.child.url
    finally:
        code = server.stop()
    assert code == 0, f"pgqw api ended with {code}:\n{server.output()}"


@contextmanager
def run_worker(db_url: str, env: dict[str, str] | None = None) -> Iterator[Process]:
    """Runs `pgqw worker` against db_url until the block ends."""
    worker = Process(["worker"], {"DATABASE_URL": db_url, **(env or {})})
    try:
        yield worker
    finally:
        worker.stop()
