"""worker/runner.py: the parts wired together, in process: a job claimed, run, recorded; a clean stop."""
from __future__ import annotations

import io
import threading

import psycopg

from pgqw import db
from pgqw.tasks import PermanentError, Registry
from pgqw.worker.runner import Worker
from tests.helpers import enqueue
from tests.worker.parts import registered, settings


class Watch(io.StringIO):
    """A log output that sets an event when a line with `text` is written."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text, self.seen = text, threading.Event()

    def write(self, line: str) -> int:
        if self.text in line:
            self.seen.set()
        return super().write(line)


def test_worker_runs_a_job_and_stops_cleanly_in_process(db_url: str, conn: psycopg.Connection) -> None:
    tasks = Registry()
    tasks.task("echo", model=dict)(lambda payload, ctx: {"echoed": payload})
    for name in ("echo", "not_mine"):  # registered at deploy time (pgqw tasks register)
        registered(conn, name)
    job = enqueue(conn, type="echo", payload={"hello": 1})
    other = enqueue(conn, type="not_mine", payload={})
    out = Watch("] success ")
    worker = Worker(settings(lease_ms=5000, poll_interval_ms=50), db_url, tasks=tasks, out=out)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(worker.run()), daemon=True)  # not the main thread: no signals
    thread.start()
    assert out.seen.wait(15), out.getvalue()
    worker.stop("test over")
    thread.join(15)
    assert result == [0]
    assert db.get_job(conn, job_id=job.id).status == "succeeded"
    assert db.get_result(conn, job_id=job.id).value == {"echoed": {"hello": 1}}
    assert db.get_job(conn, job_id=other.id).status == "pending"  # not a type this worker runs
    # It registered its task type and itself, and said it stopped.
    echo = db.get_task_type(conn, name="echo")
    assert echo is not None and echo.payload_schema == tasks.get("echo").payload_schema
    [me] = [w for w in db.list_workers(conn) if w.id == "w1"]
    assert me.task_types == ["echo"] and me.stopped_at is not None
    text = out.getvalue()
    assert "heartbeat a third of the lease, lease 5000ms" in text
    assert "stopping (test over): no more claims" in text
    assert "] stopped 1 succeeded, 0 failed, 0 dead, 0 handed back, 0 swept, peak 1/2" in text


def test_worker_with_job_lines_off_logs_failures_but_not_each_success(db_url: str, conn: psycopg.Connection) -> None:
    tasks = Registry()
    tasks.task("echo", model=dict)(lambda payload, ctx: {"echoed": payload})

    def refuse(payload: dict, ctx: object) -> None:
        raise PermanentError("not this one")

    tasks.task("refuse", model=dict)(refuse)
    registered(conn, "echo")
    registered(conn, "refuse")
    good = enqueue(conn, type="echo", payload={})
    bad = enqueue(conn, type="refuse", payload={})
    out = Watch("] dead ")
    worker = Worker(settings(lease_ms=5000, poll_interval_ms=50, log_jobs=False), db_url, tasks=tasks, out=out)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(worker.run()), daemon=True)
    thread.start()
    assert out.seen.wait(15), out.getvalue()
    worker.stop("test over")
    thread.join(15)
    assert result == [0]
    assert db.get_job(conn, job_id=good.id).status == "succeeded"
    assert db.get_job(conn, job_id=bad.id).status == "dead"
    text = out.getvalue()
    assert "job lines off" in text and "not this one" in text
    assert "] start " not in text and "] success " not in text, text
    assert "] stopped 1 succeeded, 0 failed, 1 dead" in text
