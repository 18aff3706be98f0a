"""Our queue driven directly through pgqw.db (no worker process): what the stored functions cost.

These loops do exactly what a worker must do per job (claim, then record the result in a new
transaction) with nothing else around it, so the gap between them and the raw ceiling is the
SQL's, and the gap between them and `pgqw worker` is the worker process's.
"""
from __future__ import annotations

import time
import uuid
from typing import Callable

import psycopg

from pgqw import db

from .common import connect

NOOP = "noop"


def enqueue_noops(conn: psycopg.Connection, n: int, *, prefix: str | None = None, chunk: int = 5_000,
                  type_: str = NOOP) -> None:
    """n ready noop jobs (or jobs of type_, with an empty payload) through enqueue_jobs, in the caller's
    transaction if it opened one."""
    prefix = prefix or uuid.uuid4().hex[:8]
    for start in range(0, n, chunk):
        db.enqueue_jobs(conn, jobs=[
            {"type": type_, "payload": {}, "idempotency_key": f"{prefix}-{i}"}
            for i in range(start, min(n, start + chunk))
        ])


def bulk_load(conn: psycopg.Connection, *, ready: int = 0, finished: int = 0, prefix: str = "bulk") -> None:
    """Fills the jobs table fast for the depth runs, bypassing enqueue_jobs (a million calls'
    worth of validation would only measure the loader). The rows satisfy every constraint."""
    if finished:
        conn.execute(
            "insert into jobs (type, payload, status, attempts, max_attempts, idempotency_key,"
            "                  run_at, created_at, started_at, finished_at)"
            " select 'noop', '{}'::jsonb, 'succeeded', 1, 5, %s || '-f-' || g,"
            "        now() - interval '1 day', now() - interval '1 day', now() - interval '1 day',"
            "        now() - interval '1 day'"
            "   from generate_series(1, %s) g",
            [prefix, finished],
        )
    if ready:
        conn.execute(
            "insert into jobs (type, payload, max_attempts, idempotency_key, run_at)"
            " select 'noop', '{}'::jsonb, 5, %s || '-r-' || g, now() - interval '1 minute'"
            "   from generate_series(1, %s) g",
            [prefix + uuid.uuid4().hex[:6], ready],
        )


def ready_count(conn: psycopg.Connection) -> int:
    row = conn.execute("select count(*) from jobs where status in ('pending', 'failed')").fetchone()
    return int(row[0]) if row else 0


# ----------------------------------------------------------------------------- client processes


def claim_client(dsn: str, worker_id: str, batch: int, limit: int | None = None,
                 async_claim: bool = False) -> Callable[[], int]:
    """Claims and completes through the stored functions until nothing is ready (or `limit`).
    async_claim: the what-if of synchronous_commit = off for the claim transaction only."""
    claim_conn = connect(dsn)
    mark_conn = claim_conn
    if async_claim:
        claim_conn.execute("set synchronous_commit = off")
        mark_conn = connect(dsn)

    def work() -> int:
        done = 0
        try:
            if batch == 1:
                while limit is None or done < limit:
                    job = db.claim_job(claim_conn, worker_id=worker_id)
                    if job is None:
                        break
                    db.mark_succeeded(mark_conn, job_id=job.id, lease_token=job.lease_token)
                    done += 1
            else:
                while limit is None or done < limit:
                    jobs = db.claim_jobs(claim_conn, worker_id=worker_id,
                                         limit=batch if limit is None else min(batch, limit - done))
                    if not jobs:
                        break
                    db.mark_jobs_succeeded(mark_conn, done=[(j.id, j.lease_token) for j in jobs])
                    done += len(jobs)
        finally:
            claim_conn.close()
            mark_conn.close()
        return done

    return work


def enqueue_client(dsn: str, prefix: str, n: int, batch: int) -> Callable[[], int]:
    conn = connect(dsn)

    def work() -> int:
        with conn:
            if batch == 1:
                for i in range(n):
                    db.enqueue_job(conn, type=NOOP, payload={"n": i}, idempotency_key=f"{prefix}-{i}")
            else:
                for start in range(0, n, batch):
                    db.enqueue_jobs(conn, jobs=[
                        {"type": NOOP, "payload": {"n": i}, "idempotency_key": f"{prefix}-{i}"}
                        for i in range(start, min(n, start + batch))
                    ])
        return n

    return work


def empty_claim_ms(conn: psycopg.Connection, probes: int) -> list[float]:
    found = []
    for _ in range(probes):
        t0 = time.perf_counter()
        job = db.claim_job(conn, worker_id="bench-idle")
        found.append((time.perf_counter() - t0) * 1000.0)
        assert job is None, "the queue was expected to be empty"
    return found
