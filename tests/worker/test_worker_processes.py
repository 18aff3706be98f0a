"""`pgqw worker --processes N` as a real process tree: worker processes that recycle (after
WORKER_MAX_JOBS jobs, past WORKER_MAX_MEMORY_MB) are replaced at once and lose no job; one that a handler
kills with os.abort() is replaced after a backoff, and the job that killed it is retried, then dead, never
a crash loop; a SIGTERM to the supervisor stops every process gracefully."""
from __future__ import annotations

import re
import signal
from collections import Counter
from pathlib import Path

import psycopg

from pgqw import db, launch
from tests.lab import ROOT
from tests.worker.conftest import FAST, wait_for

TASKS = '''
import os

from pgqw.tasks import task

HELD = []


@task("quick", model=dict)
def quick(payload: dict, ctx) -> dict:
    return {"pid": os.getpid()}


@task("hog", model=dict)
def hog(payload: dict, ctx) -> dict:
    block = bytearray(96 * 1024 * 1024)
    block[::4096] = b"x" * len(block[::4096])  # resident, and kept: a leak
    HELD.append(block)
    return {"pid": os.getpid()}


@task("abort", model=dict)
def abort(payload: dict, ctx) -> None:
    os.abort()
'''

MEMORY_MB = 110  # a worker process of these tasks holds 50 to 60 MiB; one that ran a hog, 96 MiB more


def _supervisor(db_url: str, tmp_path: Path, env: dict[str, str], processes: int = 2) -> launch.Child:
    (tmp_path / "proc_tasks.py").write_text(TASKS)
    return launch.start_worker("sup", args=["--processes", str(processes), "--concurrency", "1"],
                               env={**FAST, "PYTHONPATH": str(tmp_path), "PGQW_TASKS": "proc_tasks", **env},
                               database_url=db_url, log=tmp_path / "sup.log", cwd=ROOT)


def _enqueue(conn: psycopg.Connection, task_type: str, n: int, **options: object) -> list:
    return [db.enqueue_job(conn, type=task_type, payload={"n": i}, idempotency_key=f"{task_type}-{i}",
                           **options).id for i in range(n)]  # type: ignore[arg-type]


def _final(conn: psycopg.Connection, ids: list) -> dict:
    return dict(conn.execute("select id, status from jobs where id = any(%s)", [ids]).fetchall())


def _stop(sup: launch.Child) -> None:
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(timeout=30) == 0, sup.tail(40)
    assert "supervisor stopped" in sup.output()
    # Every worker process stopped with it: none is left holding a connection.


def test_worker_processes_recycle_after_max_jobs_and_past_max_memory_and_lose_nothing(
    conn: psycopg.Connection, db_url: str, tmp_path: Path
) -> None:
    db.register_task_types(conn, types=[{"name": n, "payload_schema": {}} for n in ("quick", "hog", "abort")])
    ids = _enqueue(conn, "quick", 12)
    sup = _supervisor(db_url, tmp_path, {"WORKER_MAX_JOBS": "3", "WORKER_MAX_MEMORY_MB": str(MEMORY_MB)})
    try:
        wait_for(lambda: f"12 jobs succeeded: {Counter(_final(conn, ids).values())}",
                 lambda: list(_final(conn, ids).values()).count("succeeded") == 12, timeout=60)
        text = sup.output()
        assert len(re.findall(r"\] recycling \(ran 3 jobs \(WORKER_MAX_JOBS=3\)\)", text)) >= 2, text
        assert text.count(" replaced ") >= 2
        # Each job ran once: a recycle finishes what it holds, it hands nothing back.
        attempts = conn.execute("select count(*) from job_attempts where job_id = any(%s)", [ids]).fetchone()
        assert attempts is not None and attempts[0] == 12
        # At most 3 per process, and the claim made with the third success's record (one statement) may
        # take one more: 12 jobs ran in at least 3 processes.
        pids = {r[0] for r in conn.execute("select (r.value ->> 'pid') from job_results r where r.job_id = any(%s)",
                                           [ids]).fetchall()}
        assert len(pids) >= 3
        hogs = _enqueue(conn, "hog", 2)
        wait_for("the hogs succeeded", lambda: list(_final(conn, hogs).values()).count("succeeded") == 2, timeout=60)
        # A hog's process holds 96 MiB more after it: past the limit, so it is replaced before its next job.
        wait_for("a process recycled for its memory",
                 lambda: re.search(r"\] recycling \(memory \d+ MiB \(WORKER_MAX_MEMORY_MB=", sup.output()), timeout=20)
    finally:
        _stop(sup)


def test_worker_process_killed_by_its_handler_is_replaced_and_the_job_ends_dead(
    conn: psycopg.Connection, db_url: str, tmp_path: Path
) -> None:
    db.register_task_types(conn, types=[{"name": n, "payload_schema": {}} for n in ("quick", "hog", "abort")])
    poison = _enqueue(conn, "abort", 1, max_attempts=2)
    sup = _supervisor(db_url, tmp_path, {}, processes=1)
    try:
        wait_for("the aborting job dead", lambda: _final(conn, poison)[poison[0]] == "dead", timeout=60)
        quick = _enqueue(conn, "quick", 3)
        wait_for("3 jobs succeeded after it", lambda: list(_final(conn, quick).values()).count("succeeded") == 3,
                 timeout=30)
        text = sup.output()
        died = re.findall(r"\] died +process 1 killed by SIGABRT after [\d.]+s; restarting in ([\d.]+)s", text)
        # One abort per attempt it was given (the first given back to it, then its 2 tries), then no more.
        assert 2 <= len(died) <= 3, text
        assert [float(d) for d in died] == sorted(float(d) for d in died)  # the backoff only grows
        assert sup.alive()
    finally:
        _stop(sup)


def test_worker_processes_of_an_id_from_the_environment_each_get_their_own(
    conn: psycopg.Connection, db_url: str, tmp_path: Path
) -> None:
    """PGQW_WORKER_ID reaches every child: each is named <id>-<n>, so no two processes speak under one id (a
    clean stop of one would end the others' wait for jobs)."""
    db.register_task_types(conn, types=[{"name": "quick", "payload_schema": {}}])
    (tmp_path / "proc_tasks.py").write_text(TASKS)
    sup = launch.start_worker(None, args=["--processes", "2", "--concurrency", "1"],
                              env={**FAST, "PYTHONPATH": str(tmp_path), "PGQW_TASKS": "proc_tasks",
                                   "PGQW_WORKER_ID": "envsup"},
                              database_url=db_url, log=tmp_path / "envsup.log", cwd=ROOT)
    try:
        wait_for("both processes wait for jobs", lambda: sorted(r[0] for r in conn.execute(
            "select worker_id from queue_waiters").fetchall()) == ["envsup-1", "envsup-2"], timeout=30)
        ids = _enqueue(conn, "quick", 4)
        wait_for("4 jobs succeeded", lambda: list(_final(conn, ids).values()).count("succeeded") == 4, timeout=30)
        workers = {r[0] for r in conn.execute("select worker_id from job_attempts where job_id = any(%s)",
                                              [ids]).fetchall()}
        assert workers <= {"envsup-1", "envsup-2"}, workers
    finally:
        _stop(sup)
