"""Real `pgqw worker` and `pgqw api` processes, started the way an operator starts them (pgqw.launch).

The benchmark never imports the worker: it runs `pgqw worker` with the settings of pgqw.config in
the environment (the demo module, pgqw.demo, defines the noop task) and measures from the database
(job_attempts timestamps, jobs counts) and from /proc (CPU).
"""
from __future__ import annotations

import time

import psycopg

from pgqw import launch

from .common import ROOT, Context, proc_cpu_s


class StartupError(RuntimeError):
    """A worker or API process exited or did not become ready; the message has its log's tail."""


class Workers:
    """N worker processes of one configuration. Use as a context manager; stop() is idempotent."""

    def __init__(self, ctx: Context, n: int, *, tag: str, batch_claim: bool, listen: bool = True,
                 concurrency: int | None = None, poll_interval_ms: int | None = None) -> None:
        self.ctx, self.n, self.tag = ctx, n, tag
        self.env = {
            "PGQW_TASKS": "pgqw.demo",
            "WORKER_BATCH_CLAIM": "1" if batch_claim else "0",
            "WORKER_LISTEN": "1" if listen else "0",
            "WORKER_CONCURRENCY": str(concurrency or ctx.sizes.worker_concurrency),
            "POLL_INTERVAL_MS": str(poll_interval_ms or ctx.sizes.poll_interval_ms),
            "SIM_MIN_LATENCY_MS": "0",
            "SIM_MAX_LATENCY_MS": "0",
            "SIM_FAILURE_RATE": "0",
        }
        self.procs: list[launch.Child] = []

    def ids(self) -> list[str]:
        return [f"{self.tag}-{i + 1}" for i in range(self.n)]

    def __enter__(self) -> Workers:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout_s: float = 60.0) -> None:
        for wid in self.ids():
            self.procs.append(launch.start_worker(wid, env=self.env, database_url=self.ctx.dsn,
                                                  log=self.ctx.work_dir / f"{wid}.log", cwd=ROOT))
        try:
            launch.wait_for(lambda: all(p.ready() for p in self.procs), timeout=timeout_s,
                            what=lambda: f"{self.n} workers to start:\n{self.procs[0].tail()}")
        except (launch.LaunchError, TimeoutError) as exc:
            self.stop()
            raise StartupError(str(exc)) from None
        # The first sweep and the listener thread follow the log line: let them settle.
        time.sleep(0.7)

    def alive(self) -> bool:
        return all(p.alive() for p in self.procs)

    def check(self) -> None:
        for p in self.procs:
            if not p.alive():
                raise StartupError(f"worker {p.name} exited with {p.returncode}:\n{p.tail()}")

    def cpu_s(self) -> float:
        return sum(proc_cpu_s(p.pid) for p in self.procs if p.alive())

    def stop(self, timeout_s: float = 20.0) -> list[int | None]:
        launch.stop_all(self.procs, timeout=timeout_s)
        return [p.returncode for p in self.procs]

    def log_text(self) -> str:
        return "\n".join(p.tail(5) for p in self.procs)


class Api:
    """`pgqw api --port 0` (waitress, API_THREADS threads) on the scratch database."""

    def __init__(self, ctx: Context, threads: int | None = None) -> None:
        self.ctx = ctx
        self.env = {"API_THREADS": str(threads)} if threads else {}
        self.proc: launch.Child | None = None
        self.url = ""
        self.log = ctx.work_dir / "api.log"

    def __enter__(self) -> Api:
        self.proc = launch.start_api(0, env=self.env, database_url=self.ctx.dsn, log=self.log, cwd=ROOT)
        try:
            self.proc.wait_ready(timeout=60)
        except (launch.LaunchError, TimeoutError) as exc:
            self.__exit__()
            raise StartupError(f"pgqw api did not start: {exc}") from None
        assert self.proc.url
        self.url = self.proc.url
        return self

    def cpu_s(self) -> float:
        return proc_cpu_s(self.proc.pid) if self.proc and self.proc.alive() else 0.0

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.stop(timeout=15)


def backend_count(conn: psycopg.Connection, prefix: str) -> int:
    row = conn.execute(
        "select count(*) from pg_stat_activity where datname = current_database() and application_name like %s",
        [prefix + "%"],
    ).fetchone()
    return int(row[0]) if row else 0
