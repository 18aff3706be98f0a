"""Where a worker's or the API's own Python time goes, under the load the benchmark gives them.

    python -m bench.profile worker --concurrency 10 --jobs 30000   # one `pgqw worker` draining no-op jobs
    python -m bench.profile api --requests 4000 --clients 8        # `pgqw api` taking POST /api/jobs

py-spy (the bench extra) samples the process only while one of its threads holds the interpreter lock
(`--gil`): what is counted is the process's own Python work, not its waits for the database, the
network or a lock. Printed: the rate and the process's CPU per job, then the functions by the share of
samples they were on the stack (inclusive) and at its top (self). py-spy slows the process it samples,
so the rate here is below the benchmark's; the shares are what this is for. Runs in a scratch database
on the server (--dsn, else BENCH_DATABASE_URL, else the local server), dropped at the end; py-spy
needs the right to trace the process (root, or ptrace allowed).
"""
from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Iterable

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from bench.common import new_database
from pgqw import (  # demo: its @task definitions, the noop task among them
    db,
    launch,
    tasks,
)
from pgqw.migrate import migrate

from .common import ROOT, proc_cpu_s, run_clients, split
from .queue import enqueue_noops

LOCAL = "postgresql://postgres@127.0.0.1:5432/postgres"


def summarize(lines: Iterable[str], top: int = 40) -> str:
    """py-spy's raw output (`frame;frame;... count` a line, outermost first) as two tables: each
    function's share of the samples with it anywhere on the stack, and at the top of it."""
    total = 0
    inclusive: collections.Counter[str] = collections.Counter()
    self_: collections.Counter[str] = collections.Counter()
    for line in lines:
        line = line.rstrip()
        if not line or " " not in line:
            continue
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n, frames = int(count), [f.split(":")[0] for f in stack.split(";") if f]
        if not frames:
            continue
        total += n
        self_[frames[-1]] += n
        for name in set(frames):
            inclusive[name] += n
    if not total:
        return "no samples"
    out = [f"{total} samples while holding the interpreter lock", "", "on the stack:"]
    out += [f"  {v / total:6.1%}  {k}" for k, v in inclusive.most_common(top)]
    out += ["", "at the top of the stack:"]
    out += [f"  {v / total:6.1%}  {k}" for k, v in self_.most_common(top // 2)]
    return "\n".join(out)


class Spy:
    """py-spy recording one process until stopped."""

    def __init__(self, pid: int, out: Path) -> None:
        exe = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
        if exe is None:
            raise SystemExit("py-spy is not installed: pip install -e '.[bench]'")
        self.out = out
        self.proc = subprocess.Popen([exe, "record", "--gil", "--nonblocking", "--format", "raw", "-r", "250",
                                      "-o", str(out), "-p", str(pid)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)  # attached
        if self.proc.poll() is not None:
            raise SystemExit(f"py-spy could not attach: {self.proc.stderr.read().decode().strip()}")

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=60)
        return summarize(self.out.read_text().splitlines()) if self.out.exists() else "no samples"


def profile_worker(url: str, concurrency: int, jobs: int, work: Path) -> str:
    env = {"PGQW_TASKS": "pgqw.demo", "WORKER_BATCH_CLAIM": "1", "WORKER_LISTEN": "1",
           "WORKER_CONCURRENCY": str(concurrency), "SIM_MIN_LATENCY_MS": "0", "SIM_MAX_LATENCY_MS": "0",
           "SIM_FAILURE_RATE": "0"}
    worker = launch.start_worker("profile-1", env=env, database_url=url, cwd=ROOT, log=work / "worker.log")
    try:
        launch.wait_for(worker.ready, timeout=60, what="the worker to start")
        time.sleep(1.0)  # its first sweep and claim are done
        spy = Spy(worker.pid, work / "spy.txt")
        cpu0 = proc_cpu_s(worker.pid)
        with psycopg.connect(url, autocommit=True) as conn:
            with conn.transaction():
                enqueue_noops(conn, jobs)
            while conn.execute("select count(*) from jobs where status <> 'succeeded'").fetchone()[0]:
                if not worker.alive():
                    raise SystemExit("the worker exited during the drain")
                time.sleep(0.1)
            rate = conn.execute("select count(*) / extract(epoch from max(finished_at) - min(started_at))"
                                "  from job_attempts").fetchone()[0]
        cpu = proc_cpu_s(worker.pid) - cpu0
        return (f"pgqw worker, concurrency {concurrency}, batch claims, {jobs} no-op jobs: {float(rate):,.0f} jobs/s, "
                f"worker CPU {cpu / jobs * 1000:.3f} ms/job (sampled)\n\n{spy.stop()}")
    finally:
        launch.stop_all([worker], timeout=20)


def profile_api(url: str, requests: int, clients: int, work: Path) -> str:
    from .sections import (
        _http_client,  # the benchmark's own client: POST /api/jobs, one connection each
    )

    api = launch.start_api(0, database_url=url, log=work / "api.log", cwd=ROOT)
    try:
        api.wait_ready(timeout=60)
        assert api.url
        run_clients(_http_client, [(api.url, "warm", 50)], timeout_s=60)
        spy = Spy(api.pid, work / "spy.txt")
        cpu0, t0 = proc_cpu_s(api.pid), time.monotonic()
        run_clients(_http_client, [(api.url, f"p{i}", n) for i, n in enumerate(split(requests, clients))],
                    timeout_s=600)
        secs, cpu = time.monotonic() - t0, proc_cpu_s(api.pid) - cpu0
        return (f"pgqw api, POST /api/jobs from {clients} clients, {requests} requests: {requests / secs:,.0f} "
                f"requests/s, API CPU {cpu / requests * 1000:.3f} ms/request (sampled)\n\n{spy.stop()}")
    finally:
        api.stop(timeout=15)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("worker", "api"))
    p.add_argument("--dsn", default=os.environ.get("BENCH_DATABASE_URL", LOCAL))
    p.add_argument("--jobs", type=int, default=30_000)
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--requests", type=int, default=4_000)
    p.add_argument("--clients", type=int, default=8)
    a = p.parse_args(argv)
    name = f"pgqw_profile_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(a.dsn, autocommit=True) as admin:
        new_database(admin, name)
    url = make_conninfo(a.dsn, dbname=name)
    work = Path(tempfile.mkdtemp(prefix="pgqw-profile-"))
    try:
        migrate(url, log=lambda line: None)
        with psycopg.connect(url, autocommit=True) as conn:
            db.register_task_types(conn, types=[t.registration() for t in tasks.registry])
        if a.what == "worker":
            print(profile_worker(url, a.concurrency, a.jobs, work), flush=True)
        else:
            print(profile_api(url, a.requests, a.clients, work), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        with psycopg.connect(a.dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
