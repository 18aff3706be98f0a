"""The failover test's task type, run by real workers: `pgqw worker --tasks tests.lab.failover_tasks`.

`failover_effect` does what a real handler does before its job's success is recorded: it changes the
application's own data in a transaction of its own. It inserts one row into public.failover_effects
(made by tests.lab.failover: EFFECTS_DDL) naming the job, the attempt and the attempt's lease token, then
sleeps a little. So every run of a handler leaves a row, whether or not its success is recorded
later: two rows for one job are a job whose handler ran twice, and a succeeded attempt without its
row would be a success recorded for work that was never done.

The handler connects on its own to DATABASE_URL (the worker's multi-host URL, target_session_attrs
=read-write), one connection per worker thread, kept; when the kept one turns out broken it tries once
more on a new one. An insert that still fails raises: the attempt fails and is retried after a
short backoff.
"""
from __future__ import annotations

import random
import threading
import time

import psycopg
from pydantic import BaseModel

from pgqw import config
from pgqw.tasks import Context, Retry, task

WORK_MS = (20, 60)  # the handler's sleep after its insert

_local = threading.local()


class Effect(BaseModel):
    n: int


def _connection() -> psycopg.Connection:
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed or conn.broken:
        conn = psycopg.connect(config.read("database_url"), autocommit=True, connect_timeout=3,
                               application_name="failover-effect")
        _local.conn = conn
    return conn


@task("failover_effect", max_attempts=20, lease_ms=5000, retry=Retry(base_ms=100, max_delay_ms=1000, max_jitter_ms=50))
def failover_effect(payload: Effect, ctx: Context) -> dict:
    """Records its own run in public.failover_effects, then works for a few tens of milliseconds."""
    token = getattr(ctx.job, "lease_token", None)
    for tries in (1, 2):  # a kept connection may be one the failover broke: once more on a new one
        conn = _connection()
        try:
            # The same attempt's second insert (its first commit landed, its answer did not) adds nothing.
            conn.execute(
                "insert into public.failover_effects (job_id, attempt, lease_token, worker_id)"
                " values (%s, %s, %s, %s) on conflict on constraint failover_effects_job_token_key do nothing",
                (ctx.job_id, ctx.attempt, token, ctx.worker_id))
            break
        except psycopg.OperationalError:
            conn.close()
            if tries == 2:
                raise
    time.sleep(random.uniform(*WORK_MS) / 1000)
    return {"n": payload.n}
