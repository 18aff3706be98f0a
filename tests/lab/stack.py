"""Real processes for the break-it scenarios and their tests: the API and workers as children
(started by pgqw.launch), each logging to its own file, all stopped at the end whatever happens."""
from __future__ import annotations

import json
import signal
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import psycopg

from pgqw import launch
from pgqw.launch import Child


@dataclass
class Stack:
    """The database URL, a log folder, and the child processes started so far."""

    database_url: str
    log_dir: Path
    env: Mapping[str, str] = field(default_factory=dict)
    procs: list[Child] = field(default_factory=list)
    api_url: str | None = None

    def start_worker(self, worker_id: str, *, concurrency: int | None = None,
                     env: Mapping[str, str] | None = None, wait: bool = True) -> Child:
        proc = launch.start_worker(worker_id, concurrency=concurrency, env={**self.env, **(env or {})},
                                   database_url=self.database_url, log=self.log_dir / f"{worker_id}.log")
        self.procs.append(proc)
        return proc.wait_ready(timeout=30) if wait else proc

    def start_api(self, env: Mapping[str, str] | None = None) -> str:
        proc = launch.start_api(launch.free_port(), env={**self.env, **(env or {})},
                                database_url=self.database_url, log=self.log_dir / "api.log")
        self.procs.append(proc)
        proc.wait_ready(timeout=30)
        assert proc.url
        self.api_url = proc.url
        return proc.url

    def stop(self, proc: Child, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        return proc.stop(sig, timeout=timeout)

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.alive():
                proc.stop(timeout=15)

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.database_url, autocommit=True)

    def get_json(self, path: str) -> dict:
        assert self.api_url
        with urllib.request.urlopen(f"{self.api_url}{path}", timeout=10) as r:
            return json.loads(r.read())

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
