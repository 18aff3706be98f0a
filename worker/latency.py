"""Measures enqueue-to-start latency of a real worker, with LISTEN on and off.

    python -m worker.latency [--jobs 100] [--rate 20] [--poll-ms 1000] [--concurrency 5]

For each mode it starts one `pgqw worker` process (noop handler, so the work itself takes no time)
on a queue of its own, enqueues --jobs jobs at a steady --rate per second while the worker is idle,
waits until all succeeded, and reports the distribution of job_attempts.started_at - jobs.created_at
(both stamped by the database's clock, so no clock skew). Uses DATABASE_URL (or the embedded
server); the database must be migrated. It leaves its jobs behind (type noop, queue latency-...):
point it at a scratch database.
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timezone

import psycopg

from pgqw import config, db
from pgqw.config import ROOT
from pgqw.embedded import database_url


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    rank = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def run_mode(
    url: str, *, listen: bool, jobs: int, rate: float, poll_ms: int, concurrency: int
) -> tuple[list[float], list[float]]:
    """(enqueue-to-start delays, enqueue round trips), both in ms."""
    tag = uuid.uuid4().hex[:8]
    queue = f"latency-{tag}"
    worker_id = f"latency-{'listen' if listen else 'poll'}-{tag}"
    env = {**os.environ, "DATABASE_URL": url, "PGQW_BENCH_NOOP": "1", "WORKER_LISTEN": "1" if listen else "0",
           "POLL_INTERVAL_MS": str(poll_ms), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgqw.cli", "worker", "--id", worker_id, "--queues", queue,
         "--concurrency", str(concurrency)],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "worker started:" not in line:
            raise SystemExit(f"worker did not start: {line}{proc.stdout.read()}")
        # Keep reading its log so a full pipe never blocks the worker.
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        time.sleep(1.0)  # past its first claim: from here on it is idle, waiting for a wake-up
        ids = []
        round_trips: list[float] = []
        with psycopg.connect(url, autocommit=True) as conn:
            t0 = time.monotonic()
            for i in range(jobs):
                pause = t0 + i / rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                sent = time.monotonic()
                ids.append(db.enqueue_job(conn, type="noop", payload={"i": i}, idempotency_key=f"{queue}-{i}",
                                          queue=queue).id)
                round_trips.append((time.monotonic() - sent) * 1000.0)
            deadline = time.monotonic() + 60 + poll_ms / 1000.0
            delays: list[float] = []
            for job_id in ids:
                while True:
                    job = db.get_job(conn, job_id=job_id)
                    if job is not None and job.status == "succeeded":
                        break
                    if time.monotonic() > deadline:
                        raise SystemExit(f"job {job_id} not done in time (status {job and job.status})")
                    time.sleep(0.05)
                first = db.get_attempts(conn, job_id=job_id)[0]
                delays.append((first.started_at - job.created_at).total_seconds() * 1000.0)
        return delays, round_trips
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.latency", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100, help="jobs per mode (default 100)")
    parser.add_argument("--rate", type=float, default=20.0, help="jobs enqueued per second (default 20)")
    parser.add_argument("--poll-ms", type=int, default=1000, help="POLL_INTERVAL_MS of the worker (default 1000)")
    parser.add_argument("--concurrency", type=int, default=5, help="worker concurrency (default 5)")
    args = parser.parse_args(argv)

    url = database_url(config.load())
    with psycopg.connect(url) as conn:
        server = conn.info.server_version
    print(f"# enqueue-to-start latency (job_attempts.started_at - jobs.created_at), "
          f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M}Z")
    print(f"# command: python -m worker.latency {' '.join(argv if argv is not None else sys.argv[1:])}".rstrip())
    print(f"# PostgreSQL {server // 10000}.{server % 10000}, {platform.python_implementation()} "
          f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs; "
          f"{args.jobs} noop jobs per mode at {args.rate:g}/s, poll {args.poll_ms} ms, concurrency {args.concurrency}")
    print(f"{'mode':<26} {'n':>4} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} {'mean ms':>8}"
          f"   {'enqueue p50/p99 ms':>18}")
    for listen in (True, False):
        delays, trips = run_mode(url, listen=listen, jobs=args.jobs, rate=args.rate, poll_ms=args.poll_ms,
                                 concurrency=args.concurrency)
        delays.sort()
        trips.sort()
        mode = "LISTEN on (+ poll)" if listen else "LISTEN off (poll only)"
        print(f"{mode:<26} {len(delays):>4} {percentile(delays, 50):>8.1f} {percentile(delays, 90):>8.1f} "
              f"{percentile(delays, 99):>8.1f} {delays[-1]:>8.1f} {sum(delays) / len(delays):>8.1f}"
              f"   {percentile(trips, 50):>8.1f}/{percentile(trips, 99):.1f}", flush=True)
    print("# the delay counts from the enqueue's transaction start (created_at), so it includes the enqueue's "
          "own commit; 'enqueue' is that call's client-side round trip")
    return 0


if __name__ == "__main__":
    sys.exit(main())
