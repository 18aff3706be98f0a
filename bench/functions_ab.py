"""The stored functions in a bare loop beside the raw ceiling, printed as one line: for before/after
comparisons of a change to the SQL, alternating runs of the old and the new (this machine is shared:
only alternating runs compare).

    python -m bench.functions_ab --procs 4 --batch 1 --jobs 8000
    python -m bench.functions_ab --procs 4 --batch 100 --jobs 40000 --sql-dir /tmp/old/db

Each run makes a scratch database on the server (--dsn, else BENCH_DATABASE_URL, else the local
server), migrates it (from --sql-dir, a db/ folder of another revision: `git archive REV db | tar -x
-C /tmp/old`, else this checkout), loads the jobs, and drains them with --procs processes, each a loop
of claim_job + mark_succeeded (--batch 1) or claim_jobs + mark_jobs_succeeded (--batch N), every call
its own durable transaction (bench/queue.py). Then the same jobs through the raw ceiling's table and
statements (bench/raw.py) in the same database. Printed: both rates, their ratio, and the server's CPU
per job (/proc) for each. The database is dropped at the end.
"""
from __future__ import annotations

import argparse
import os
import uuid
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from bench.common import new_database
from pgqw import db
from pgqw.migrate import migrate

from . import queue, raw
from .common import CpuWindow, ServerCpu, run_clients, throughput

LOCAL = "postgresql://postgres@127.0.0.1:5432/postgres"


def measure(dsn: str, jobs: int, batch: int, procs: int, sql_dir: Path | None = None) -> str:
    name = f"pgqw_fab_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        new_database(admin, name)
    url = make_conninfo(dsn, dbname=name)
    try:
        migrate(url, log=lambda line: None, **({"sql_dir": sql_dir} if sql_dir else {}))
        with psycopg.connect(url, autocommit=True) as conn:
            db.register_task_types(conn, types=[{"name": "noop", "payload_schema": {"type": "object"}}])
            server = ServerCpu(conn)
            queue.enqueue_noops(conn, jobs)
            conn.execute("analyze jobs, job_attempts")
            window = CpuWindow(server).start()
            ours = run_clients(queue.claim_client, [(url, f"fab-{i}", batch, None, False) for i in range(procs)],
                               timeout_s=600)
            ours_cpu = window.stop()
            raw.create(conn)
            raw.load(conn, jobs)
            window = CpuWindow(server).start()
            ceiling = run_clients(raw.claim_client, [(url, batch) for _ in range(procs)], timeout_s=600)
            raw_cpu = window.stop()
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
    (rate, n, _), (raw_rate, raw_n, _) = throughput(ours), throughput(ceiling)

    def per_job(cpu: dict, count: int) -> str:
        return f"{cpu['server_cpu_s'] / count * 1000:.3f} ms/job" if "server_cpu_s" in cpu else "n/a"

    return (f"{batch} per claim, {procs} proc: functions {rate:,.0f} jobs/s (server CPU {per_job(ours_cpu, n)}), "
            f"raw {raw_rate:,.0f} jobs/s (server CPU {per_job(raw_cpu, raw_n)}), ratio {rate / raw_rate:.2f}")


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.functions_ab", description=__doc__.split("\n\n")[0])
    p.add_argument("--dsn", default=os.environ.get("BENCH_DATABASE_URL", LOCAL))
    p.add_argument("--jobs", type=int, default=8_000)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--sql-dir", type=Path, help="migrate from this db/ folder instead of the checkout's")
    a = p.parse_args()
    print(measure(a.dsn, a.jobs, a.batch, a.procs, a.sql_dir), flush=True)


if __name__ == "__main__":
    main()
