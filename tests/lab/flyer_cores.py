"""What CPU-bound handlers get from threads and from processes: N listing flyers (rendered with no
simulated latency, so the work is reportlab's, in Python) drained by one worker process with T threads,
then by T worker processes of one thread each (`pgqw worker --processes T`), on a fresh database each.

    .venv/bin/python -m tests.lab.flyer_cores --database-url postgresql://postgres@127.0.0.1:5432/postgres \
        --jobs 120 --threads 2

Prints one line per layout: jobs/s, and the CPU the worker processes used (user + system, from
/proc of each) per wall second: about 1.0 means one core, whatever the thread count.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import uuid

import psutil
import psycopg
from psycopg.conninfo import make_conninfo

from pgqw import db, launch
from tests.helpers import LISTING
from tests.lab import ROOT

ENV = {"SIM_MIN_LATENCY_MS": "0", "SIM_MAX_LATENCY_MS": "0", "SIM_FAILURE_RATE": "0", "PGQW_TASKS": "pgqw.demo"}


def _cpu(pids: set[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def drain(server: str, jobs: int, args: list[str]) -> tuple[float, float]:
    name = f"pgqw_cores_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'create database "{name}"')
    url = make_conninfo(server, dbname=name)
    try:
        launch.start(["migrate"], env=ENV, database_url=url, cwd=ROOT).wait(120)
        with psycopg.connect(url, autocommit=True) as conn:
            ids = [j.id for j in db.enqueue_jobs(conn, jobs=[
                {"type": "listing_flyer", "payload": dict(LISTING), "idempotency_key": f"cores-{i}"}
                for i in range(jobs)])]
            worker = launch.start_worker("cores", args=args, env=ENV, database_url=url, cwd=ROOT)
            began = time.monotonic()
            pids: set[int] = set()
            cpu: dict[int, float] = {}
            while True:
                tree = {worker.pid, *(c.pid for c in psutil.Process(worker.pid).children(recursive=True))}
                pids |= tree
                for pid in tree:
                    cpu[pid] = _cpu({pid}) or cpu.get(pid, 0.0)
                done = conn.execute("select count(*) from pgqw.jobs where id = any(%s) and status = 'succeeded'",
                                    [ids]).fetchone()
                if done is not None and done[0] == jobs:
                    break
                time.sleep(0.05)
            wall = time.monotonic() - began
            used = sum(cpu.values())
            worker.stop()
        return jobs / wall, used / wall
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'drop database if exists "{name}" with (force)')


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--database-url", default=os.environ.get("PGQW_TEST_DATABASE_URL"), required=False)
    p.add_argument("--jobs", type=int, default=120)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    if not a.database_url:
        p.error("--database-url (a superuser DSN) is needed")
    print(f"# {a.jobs} listing flyers, no simulated latency; {os.cpu_count()} cores")
    for label, args in ((f"1 process, {a.threads} threads", ["--concurrency", str(a.threads)]),
                        (f"{a.threads} processes, 1 thread each", ["--processes", str(a.threads), "--concurrency", "1"]),
                        ("1 process, 1 thread", ["--concurrency", "1"])):
        rate, cores = drain(a.database_url, a.jobs, args)
        print(f"{label:<32} {rate:7.1f} flyers/s   {cores:4.2f} cores busy")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
