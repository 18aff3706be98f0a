"""One drain by real `pgqw worker` processes, printed as one line: for before/after comparisons of a
change to the worker or the SQL, run at the old and at the new commit, alternating, several times each
(this machine is shared: only alternating runs compare).

    python -m bench.worker_ab --jobs 20000 --concurrency 10 --batch-claim --procs 4
    python -m bench.worker_ab --jobs 12000 --concurrency 1 --procs 4
    python -m bench.worker_ab --jobs 20000 --concurrency 10 --batch-claim --procs 4 --async-handlers

Each run makes a scratch database on the server (--dsn, else BENCH_DATABASE_URL, else the local
server), migrates it from this checkout, starts the workers idle and listening, enqueues the no-op
jobs in one transaction (with --async-handlers, the same no-op as an `async def` handler:
bench/async_tasks.py) and waits until all succeeded. Printed: jobs/s (jobs ÷ (last attempt finished
− first attempt started), from job_attempts), the workers' and the server's CPU per job (/proc), and
transactions per job (pg_stat_database). The database is dropped at the end.
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

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

from .async_tasks import NOOP_ASYNC
from .common import ROOT, ServerCpu, database_commits, proc_cpu_s
from .queue import NOOP, enqueue_noops

LOCAL = "postgresql://postgres@127.0.0.1:5432/postgres"


def drain(dsn: str, jobs: int, concurrency: int, batch_claim: bool, procs: int, sql_dir: Path | None = None,
          functions: bool = False, env_extra: dict[str, str] | None = None, async_handlers: bool = False) -> str:
    name = f"pgqw_ab_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        new_database(admin, name)
        if functions:
            admin.execute(sql.SQL("alter database {} set track_functions = 'pl'").format(sql.Identifier(name)))
    url = make_conninfo(dsn, dbname=name)
    workers: list[launch.Child] = []
    logs = Path(tempfile.mkdtemp(prefix="pgqw-ab-"))
    try:
        migrate(url, log=lambda line: None, **({"sql_dir": sql_dir} if sql_dir else {}))
        with psycopg.connect(url, autocommit=True) as conn:
            db.register_task_types(conn, types=[t.registration() for t in tasks.registry])
            env = {"PGQW_TASKS": "pgqw.demo,bench.async_tasks" if async_handlers else "pgqw.demo", "WORKER_BATCH_CLAIM": "1" if batch_claim else "0",
                   "WORKER_LISTEN": "1", "WORKER_CONCURRENCY": str(concurrency), "POLL_INTERVAL_MS": "1000",
                   "SIM_MIN_LATENCY_MS": "0", "SIM_MAX_LATENCY_MS": "0", "SIM_FAILURE_RATE": "0",
                   **(env_extra or {})}
            for i in range(procs):
                workers.append(launch.start_worker(f"ab-{i + 1}", env=env, database_url=url, cwd=ROOT,
                                                   log=logs / f"ab-{i + 1}.log"))
            launch.wait_for(lambda: all(w.ready() for w in workers), timeout=60, what="the workers to start")
            time.sleep(1.0)  # their first sweep and claim are done
            server = ServerCpu(conn)
            commits0, server0 = database_commits(conn), server.seconds()
            workers0 = sum(proc_cpu_s(w.pid) for w in workers)
            with conn.transaction():
                enqueue_noops(conn, jobs, type_=NOOP_ASYNC if async_handlers else NOOP)
            while conn.execute("select count(*) from jobs where status <> 'succeeded'").fetchone()[0]:
                if not all(w.alive() for w in workers):
                    raise SystemExit("a worker exited during the drain")
                time.sleep(0.1)
            worker_s = sum(proc_cpu_s(w.pid) for w in workers) - workers0
            server_s, commits = server.seconds() - server0, database_commits(conn) - commits0
            rate = conn.execute("select count(*) / extract(epoch from max(finished_at) - min(started_at))"
                                "  from job_attempts").fetchone()[0]
            calls = ""
            if functions:
                # A backend reports its function calls when it ends: stop the workers first. The counts
                # include the workers' start (registration, first sweep and claim) and their stop.
                launch.stop_all(workers, timeout=20)
                workers = []
                time.sleep(0.5)
                calls = "".join(
                    f"\n  {f:22s} {n / jobs:6.3f} calls/job  {total / jobs * 1000:7.1f} µs/job total"
                    f"  {own / jobs * 1000:7.1f} µs/job self"
                    for f, n, total, own in conn.execute(
                        "select funcname, calls, total_time, self_time from pg_stat_user_functions"
                        " order by self_time desc").fetchall())
    finally:
        launch.stop_all(workers, timeout=20)
        shutil.rmtree(logs, ignore_errors=True)
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
    return (f"{'async' if async_handlers else 'plain'} handlers, concurrency {concurrency}, batch claim {'on' if batch_claim else 'off'}, {procs} proc: "
            f"{float(rate):,.0f} jobs/s, worker CPU {worker_s / jobs * 1000:.3f} ms/job, server CPU "
            f"{server_s / jobs * 1000:.3f} ms/job, transactions/job {commits / jobs:.2f}{calls}")


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.worker_ab", description=__doc__.split("\n\n")[0])
    p.add_argument("--dsn", default=os.environ.get("BENCH_DATABASE_URL", LOCAL))
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--batch-claim", action="store_true")
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--sql-dir", type=Path, help="migrate from this db/ folder instead of the checkout's (for an A/B of"
                                                " the SQL alone: `git archive REV db | tar -x -C /tmp/rev`)")
    p.add_argument("--functions", action="store_true",
                   help="also the stored functions' calls and time per job (track_functions), after the workers stop")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="a setting for the workers (WORKER_LOG_JOBS=0, ...); repeatable")
    p.add_argument("--async-handlers", action="store_true",
                   help="the no-op as an async def handler (bench/async_tasks.py) instead of the demo's plain one")
    a = p.parse_args()
    env = dict(e.split("=", 1) for e in a.env)
    print(drain(a.dsn, a.jobs, a.concurrency, a.batch_claim, a.procs, a.sql_dir, a.functions, env,
                async_handlers=a.async_handlers), flush=True)


if __name__ == "__main__":
    main()
