"""Real `pgqw worker` and `pgqw api` processes, started the way an operator starts them.

The benchmark never imports the worker: it runs `python -m pgqw.cli worker` with the settings of
pgqw.config in the environment (PGQW_BENCH_NOOP=1 registers the noop handler) and measures from
the database (job_attempts timestamps, jobs counts) and from /proc (CPU).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import psycopg

from .common import ROOT, Context, proc_cpu_s


class StartupError(RuntimeError):
    """A worker or API process exited or did not become ready; the message has its log's tail."""


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class Workers:
    """N worker processes of one configuration. Use as a context manager; stop() is idempotent."""

    def __init__(self, ctx: Context, n: int, *, tag: str, batch_claim: bool, listen: bool = True,
                 concurrency: int | None = None, poll_interval_ms: int | None = None) -> None:
        self.ctx, self.n, self.tag = ctx, n, tag
        self.env = {
            **os.environ,
            "DATABASE_URL": ctx.dsn,
            "PGQW_BENCH_NOOP": "1",
            "WORKER_BATCH_CLAIM": "1" if batch_claim else "0",
            "WORKER_LISTEN": "1" if listen else "0",
            "WORKER_CONCURRENCY": str(concurrency or ctx.sizes.worker_concurrency),
            "POLL_INTERVAL_MS": str(poll_interval_ms or ctx.sizes.poll_interval_ms),
            "SIM_MIN_LATENCY_MS": "0",
            "SIM_MAX_LATENCY_MS": "0",
            "SIM_FAILURE_RATE": "0",
        }
        for name in ("WORKER_ID", "WORKER_QUEUES", "PGQW_DATA_DIR"):
            self.env.pop(name, None)
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []
        self._files: list[IO[bytes]] = []

    def ids(self) -> list[str]:
        return [f"{self.tag}-{i + 1}" for i in range(self.n)]

    def __enter__(self) -> "Workers":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout_s: float = 60.0) -> None:
        for wid in self.ids():
            log = self.ctx.work_dir / f"{wid}.log"
            f = open(log, "wb")
            self._files.append(f)
            self.logs.append(log)
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "pgqw.cli", "worker", "--id", wid],
                cwd=ROOT, env=self.env, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            ))
        deadline = time.monotonic() + timeout_s
        pending = set(range(self.n))
        while pending:
            for i in list(pending):
                if self.procs[i].poll() is not None:
                    self.stop()
                    raise StartupError(f"worker {self.ids()[i]} exited with {self.procs[i].returncode}:\n"
                                       f"{_tail(self.logs[i])}")
                if "worker started" in self.logs[i].read_text(errors="replace"):
                    pending.discard(i)
            if time.monotonic() > deadline:
                self.stop()
                raise StartupError(f"workers not started after {timeout_s:.0f}s:\n{_tail(self.logs[0])}")
            time.sleep(0.05)
        # The first sweep and the listener thread follow the log line: let them settle.
        time.sleep(0.7)

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def check(self) -> None:
        for i, p in enumerate(self.procs):
            if p.poll() is not None:
                raise StartupError(f"worker {self.ids()[i]} exited with {p.returncode}:\n{_tail(self.logs[i])}")

    def cpu_s(self) -> float:
        return sum(proc_cpu_s(p.pid) for p in self.procs if p.poll() is None)

    def stop(self, timeout_s: float = 20.0) -> list[int | None]:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in self._files:
            f.close()
        self._files = []
        return [p.returncode for p in self.procs]

    def log_text(self) -> str:
        return "\n".join(_tail(p, 5) for p in self.logs)


class Api:
    """`pgqw api --port 0` (waitress, API_THREADS threads) on the scratch database."""

    LINE = re.compile(r"serving on (http://\S+?)/? ")

    def __init__(self, ctx: Context, threads: int | None = None) -> None:
        self.ctx = ctx
        self.env = {**os.environ, "DATABASE_URL": ctx.dsn}
        if threads:
            self.env["API_THREADS"] = str(threads)
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.log = ctx.work_dir / "api.log"

    def __enter__(self) -> "Api":
        f = open(self.log, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pgqw.cli", "api", "--port", "0", "--host", "127.0.0.1"],
            cwd=ROOT, env=self.env, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        f.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise StartupError(f"pgqw api exited with {self.proc.returncode}:\n{_tail(self.log)}")
            m = self.LINE.search(self.log.read_text(errors="replace"))
            if m:
                self.url = m.group(1).rstrip("/")
                return self
            time.sleep(0.05)
        self.__exit__()
        raise StartupError(f"pgqw api did not start:\n{_tail(self.log)}")

    def cpu_s(self) -> float:
        return proc_cpu_s(self.proc.pid) if self.proc and self.proc.poll() is None else 0.0

    def __exit__(self, *exc: object) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def backend_count(conn: psycopg.Connection, prefix: str) -> int:
    row = conn.execute(
        "select count(*) from pg_stat_activity where datname = current_database() and application_name like %s",
        [prefix + "%"],
    ).fetchone()
    return int(row[0]) if row else 0
