"""Real processes for the break-it scenarios and their tests: the API and workers as children,
each logging to its own file, all stopped at the end whatever happens."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import psycopg


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(condition: Callable[[], object], *, timeout: float, interval: float = 0.05,
             what: str = "condition") -> object:
    """Polls until condition() is truthy; returns its value or raises TimeoutError naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


@dataclass
class Proc:
    name: str
    process: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.process.poll() is None


@dataclass
class Stack:
    """The database URL, a log folder, and the child processes started so far."""

    database_url: str
    log_dir: Path
    env: Mapping[str, str] = field(default_factory=dict)
    procs: list[Proc] = field(default_factory=list)
    api_url: str | None = None

    def _spawn(self, name: str, args: list[str], env: Mapping[str, str]) -> Proc:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        full_env = {**os.environ, **self.env, **env, "DATABASE_URL": self.database_url, "PYTHONUNBUFFERED": "1"}
        out = open(log_path, "w")
        process = subprocess.Popen([sys.executable, "-m", "pgqw.cli", *args], env=full_env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        proc = Proc(name, process, log_path)
        self.procs.append(proc)
        return proc

    def start_worker(self, worker_id: str, *, concurrency: int | None = None,
                     env: Mapping[str, str] | None = None, wait: bool = True) -> Proc:
        args = ["worker", "--id", worker_id]
        if concurrency is not None:
            args += ["--concurrency", str(concurrency)]
        proc = self._spawn(worker_id, args, env or {})
        if wait:
            wait_for(lambda: "worker started" in proc.log() or not proc.alive(), timeout=30,
                     what=f"worker {worker_id} to start")
            if not proc.alive():
                raise RuntimeError(f"worker {worker_id} exited at start:\n{proc.log()}")
        return proc

    def start_api(self, env: Mapping[str, str] | None = None) -> str:
        port = free_port()
        proc = self._spawn("api", ["api", "--port", str(port)], {"PORT": str(port), **(env or {})})
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            if not proc.alive():
                raise RuntimeError(f"the API exited at start:\n{proc.log()}")
            try:
                # The page, not /api: it answers with or without API_TOKENS set.
                with urllib.request.urlopen(f"{url}/", timeout=1) as r:
                    return r.status == 200
            except OSError:
                return False

        wait_for(ready, timeout=30, what="the API to answer")
        self.api_url = url
        return url

    def stop(self, proc: Proc, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if proc.alive():
            proc.process.send_signal(sig)
        try:
            return proc.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.process.kill()
            return proc.process.wait()

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.alive():
                self.stop(proc, timeout=15)

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.database_url, autocommit=True)

    def get_json(self, path: str) -> dict:
        assert self.api_url
        with urllib.request.urlopen(f"{self.api_url}{path}", timeout=10) as r:
            return json.loads(r.read())

    def __enter__(self) -> "Stack":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
