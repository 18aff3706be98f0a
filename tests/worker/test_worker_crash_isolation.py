"""A job that crashes its worker process, and its innocent neighbours, on a real worker restarted after
each exit as a supervisor would: the neighbours lose no attempt and succeed; the crashing job is found
(it runs alone after the first crash, so each later crash is its own) and ends dead."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import psycopg

from pgqw import db
from tests.worker.conftest import WorkerProcess

TASKS = '''
import os
import time

from pgqw.tasks import task


@task("poison", model=dict)
def poison(payload: dict, ctx) -> None:
    os.abort()  # the whole process goes, with every job it holds


@task("steady", model=dict)
def steady(payload: dict, ctx) -> dict:
    time.sleep(2)
    return {"ok": payload["n"]}
'''


def test_worker_crash_neighbours_keep_their_attempts_and_the_crasher_dies(
    conn: psycopg.Connection, start_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    (tmp_path / "crash_tasks.py").write_text(TASKS)
    db.register_task_types(conn, types=[{"name": n, "payload_schema": {}} for n in ("poison", "steady")])
    steady = [db.enqueue_job(conn, type="steady", payload={"n": n}, idempotency_key=f"steady-{n}", max_attempts=3)
              for n in range(3)]
    poison = db.enqueue_job(conn, type="poison", payload={}, idempotency_key="poison", max_attempts=3,
                            priority=-1)  # claimed last: the three are running when it crashes the process
    env = {"PYTHONPATH": str(tmp_path), "PGQW_TASKS": "crash_tasks", "STUCK_JOB_TIMEOUT_MS": "1500"}
    ids = [j.id for j in steady] + [poison.id]
    deadline = time.monotonic() + 120
    runs = 0
    while time.monotonic() < deadline:
        final = dict(conn.execute("select id, status from jobs where id = any(%s)", [ids]).fetchall())
        if all(s in ("succeeded", "dead", "cancelled") for s in final.values()):
            break
        runs += 1
        worker = start_worker(f"w1-run{runs}", concurrency=4, env=env, wait=False)
        while worker.alive() and time.monotonic() < deadline:
            final = dict(conn.execute("select id, status from jobs where id = any(%s)", [ids]).fetchall())
            if all(s in ("succeeded", "dead", "cancelled") for s in final.values()):
                break
            time.sleep(0.2)  # a supervisor's check; the database is the record
        worker.close()
    final = dict(conn.execute("select id, status from jobs where id = any(%s)", [ids]).fetchall())
    assert final[poison.id] == "dead", final
    assert [final[j.id] for j in steady] == ["succeeded"] * 3
    for job in steady:
        attempts = db.get_attempts(conn, job_id=job.id)
        assert attempts[-1].outcome == "succeeded"
        row = db.get_job(conn, job_id=job.id)
        # Every attempt a crash took from it was given back: none of its three tries was spent on one.
        assert row is not None and row.max_attempts - 3 == sum(a.outcome == "abandoned" for a in attempts)
    # Each crash after the first was the poison job's alone, and counted.
    poisoned = db.get_attempts(conn, job_id=poison.id)
    assert [a.outcome for a in poisoned] == ["abandoned"] * 4  # the first given back, then its 3 tries
    assert db.get_job(conn, job_id=poison.id).last_error.endswith("while it ran alone")
