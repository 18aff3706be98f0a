"""A handler that never returns, in a real `pgqw worker` process logged in as pgqw_worker: at each
attempt's deadline (@task timeout_ms) the attempt ends timed_out, the job is retried, then dead with the
timeout as its error, and the worker keeps running: the plain handler's thread is given up on and
replaced, the async one cancelled, and a job after them succeeds on the same worker, which stops
cleanly and counts them in its stopped line. A worker frozen (SIGSTOP) while it runs one cannot extend
its lease past the deadline: another worker's sweep ends the attempt timed out, and the frozen one, thawed,
finds it recorded so, gives its slot back and carries on. A cancel of a running job whose handler never
looks ends its attempt cancelled within one lease all the same: the cancel moved its deadline to then."""
from __future__ import annotations

import signal
from pathlib import Path
from typing import Callable, Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from pgqw import db
from tests.helpers import rows
from tests.worker.conftest import WorkerProcess, wait_for

TASKS = '''
import asyncio
import threading

from pgqw.tasks import task


@task("hang_sync", model=dict, timeout_ms=1000)
def hang_sync(payload: dict, ctx) -> None:
    threading.Event().wait()  # never returns, never looks at ctx


@task("hang_async", model=dict, timeout_ms=1000)
async def hang_async(payload: dict, ctx) -> None:
    await asyncio.Event().wait()


@task("hang_no_timeout", model=dict)
def hang_no_timeout(payload: dict, ctx) -> None:
    threading.Event().wait()  # no timeout of its own, and never reads ctx.cancelled


@task("quick", model=dict)
def quick(payload: dict, ctx) -> dict:
    return {"ok": True}
'''


@pytest.fixture
def start(db_url: str, tmp_path: Path) -> Iterator[Callable[[str], WorkerProcess]]:
    """start("id") → a started worker of the hang tasks, logged in as pgqw_worker, with two slots."""
    (tmp_path / "hang_tasks.py").write_text(TASKS)
    env = {"PYTHONPATH": str(tmp_path), "PGQW_TASKS": "hang_tasks", "RETRY_BASE_DELAY_MS": "50",
           "RETRY_MAX_JITTER_MS": "0", "STUCK_JOB_TIMEOUT_MS": "2000"}
    started: list[WorkerProcess] = []

    def make(worker_id: str) -> WorkerProcess:
        proc = WorkerProcess(worker_id, make_conninfo(db_url, user="pgqw_worker"), tmp_path / f"{worker_id}.log",
                             env, ["--concurrency", "2"])
        started.append(proc)
        return proc.started()

    yield make
    for proc in started:
        if proc.alive():
            proc.signal(signal.SIGCONT)
        proc.close()
        print(f"----- log of worker {proc.worker_id} (exit {proc.proc.returncode}) -----\n{proc.text()}")


@pytest.fixture
def worker(start: Callable[[str], WorkerProcess]) -> WorkerProcess:
    return start("hang-w1")


def test_handler_timeout_a_handler_that_never_returns_is_retried_then_dead_and_the_worker_goes_on(
    conn: psycopg.Connection, worker: WorkerProcess
) -> None:
    hung = {t: db.enqueue_job(conn, type=t, payload={}, idempotency_key=f"hang-{t}", max_attempts=2).id
            for t in ("hang_sync", "hang_async")}
    ids = list(hung.values())

    def statuses() -> dict[str, str]:
        return {r["type"]: r["status"] for r in rows(conn, "select type, status from jobs where id = any(%s)", [ids])}

    wait_for(lambda: f"both hung jobs dead (now {statuses()})",
             lambda: statuses() == {"hang_sync": "dead", "hang_async": "dead"}, timeout=30)
    for job_id in ids:
        job = db.get_job(conn, job_id=job_id)
        assert job is not None and job.last_error is not None
        assert job.last_error.startswith("timed out after 1000 ms")
        attempts = db.get_attempts(conn, job_id=job_id)
        assert [a.outcome for a in attempts] == ["timed_out", "timed_out"]
        assert all(a.deadline_at is not None and a.worker_id == "hang-w1" for a in attempts)
    assert worker.alive()
    assert len(worker.lines("timed out")) == 4
    leaked = worker.lines("leaked")
    assert len(leaked) == 2 and all(f"leaked  {str(hung['hang_sync'])[:8]} " in line for line in leaked)  # plain only

    # It keeps running: both slots are free again, and the next job succeeds.
    quick = db.enqueue_job(conn, type="quick", payload={}, idempotency_key="quick-1")
    wait_for("the quick job succeeded",
             lambda: rows(conn, "select status from jobs where id = %s", [quick.id]) == [{"status": "succeeded"}],
             timeout=15)

    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=15) == 0
    [stopped] = worker.lines("stopped")
    assert "1 succeeded" in stopped and "4 timed out, 2 leaked" in stopped


def test_handler_timeout_holds_while_its_worker_is_frozen(
    conn: psycopg.Connection, start: Callable[[str], WorkerProcess]
) -> None:
    frozen = start("frozen")
    job = db.enqueue_job(conn, type="hang_sync", payload={}, idempotency_key="frozen-1", max_attempts=1)
    frozen.wait_log("start")
    frozen.signal(signal.SIGSTOP)      # frozen holding the job: no heartbeat, no timer of its own
    other = start("sweeper")           # sweeps every 300 ms
    wait_for("the frozen worker's attempt ended",
             lambda: rows(conn, "select status from jobs where id = %s", [job.id]) == [{"status": "dead"}],
             timeout=15)
    [attempt] = db.get_attempts(conn, job_id=job.id)
    assert (attempt.worker_id, attempt.outcome) == ("frozen", "timed_out")
    assert attempt.error is not None and attempt.error.startswith("timed out after 1000 ms")
    assert other.lines("swept")  # the other worker's sweep decided it, by the database's clock
    frozen.signal(signal.SIGCONT)
    # Thawed: at the deadline it finds the attempt already timed out (the sweep's), and goes on.
    [late] = frozen.wait_log("timed out")
    assert str(job.id)[:8] in late and "already recorded: by a sweep" in late and "→ dead" in late
    assert len(frozen.lines("leaked")) == 1
    quick = db.enqueue_job(conn, type="quick", payload={}, idempotency_key="after-thaw")
    wait_for("a job after the thaw succeeded",
             lambda: rows(conn, "select status from jobs where id = %s", [quick.id]) == [{"status": "succeeded"}],
             timeout=15)
    assert frozen.alive() and other.alive()


def test_handler_cancel_ends_a_running_job_whose_handler_never_looks_within_one_lease(
    conn: psycopg.Connection, worker: WorkerProcess
) -> None:
    job = db.enqueue_job(conn, type="hang_no_timeout", payload={}, idempotency_key="hang-cancel")

    def status() -> str:
        found = db.get_job(conn, job_id=job.id)
        assert found is not None
        return found.status

    wait_for("the job running", lambda: status() == "processing", timeout=15)
    asked = db.cancel_job(conn, job_id=job.id)
    assert asked.status == "processing"  # asked to stop: its handler never reads ctx.cancelled
    wait_for(lambda: f"the job cancelled (now {status()})", lambda: status() == "cancelled", timeout=15)
    [attempt] = db.get_attempts(conn, job_id=job.id)
    assert attempt.outcome == "cancelled" and attempt.finished_at is not None
    # The lease the job held when asked is extended no more: it ends within one lease (STUCK_JOB_TIMEOUT_MS,
    # 2 s) of the cancel, by the database's clock; and the worker ends the attempt when it ends, give or take
    # its deadlines thread waking and the mark's commit (room for a busy machine).
    assert asked.lease_expires_at is not None
    assert (asked.lease_expires_at - asked.cancel_requested_at).total_seconds() <= 2.0
    assert (attempt.finished_at - asked.lease_expires_at).total_seconds() <= 1.0
    assert worker.alive()
    quick = db.enqueue_job(conn, type="quick", payload={}, idempotency_key="quick-after-cancel")
    wait_for("the quick job succeeded",
             lambda: rows(conn, "select status from jobs where id = %s", [quick.id]) == [{"status": "succeeded"}],
             timeout=15)
