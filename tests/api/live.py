"""Real processes for tests: `pgqw api` (waitress) and `pgqw worker`, each on the test's database.

Each is started with `python -m pgqw.cli` from the project folder, so it runs the code in this tree.
`pgqw api --port 0` lets the system pick a free port and prints the URL, which is read from its output.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[2]


class Process:
    """A subprocess whose merged stdout/stderr is read by a thread (kept for failure messages)."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.lines: list[str] = []
        self.ended = False
        self._seen = threading.Condition()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pgqw.cli", *args], cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._seen:
                self.lines.append(line.rstrip("\n"))
                self._seen.notify_all()
        with self._seen:
            self.ended = True
            self._seen.notify_all()

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 30) -> re.Match[str]:
        """The first output line matching pattern; fails when the output ends or time runs out."""
        deadline = time.monotonic() + timeout
        with self._seen:
            while True:
                for line in self.lines:
                    found = re.search(pattern, line)
                    if found:
                        return found
                if self.ended:
                    raise AssertionError(f"process ended ({self.proc.wait()}) before {pattern!r}:\n{self.output()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {pattern!r} within {timeout}s:\n{self.output()}")
                self._seen.wait(timeout=left)

    def stop(self, timeout: float = 15) -> int:
        """SIGTERM, then SIGKILL if it does not end in time. Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.proc.returncode


@contextmanager
def serve_api(db_url: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """Runs `pgqw api --port 0` against db_url; yields its base URL (no trailing slash)."""
    server = Process(["api", "--port", "0"], {"DATABASE_URL": db_url, **(env or {})})
    try:
        url = server.wait_for(r"serving on (http://\S+)").group(1).rstrip("/")
        yield url
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
