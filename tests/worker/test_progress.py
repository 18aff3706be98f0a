"""ctx.progress in the worker: the value is kept on the job's Running and written by the next heartbeat
under the attempt's lease token (soon after the call, not at the lease's third), at most once per
PROGRESS_EVERY_S per job; a job a sweep handed on writes nothing; the last value is written before the
outcome is recorded; an over-size value is the handler's ValueError."""
from __future__ import annotations

import threading
from typing import Callable, TypeVar

import psycopg
import pytest

from pgqw.tasks import PROGRESS_MAX_BYTES, Registry
from pgqw.worker.connection.heartbeat import PROGRESS_EVERY_S, Heartbeat
from pgqw.worker.job.completion import Inline
from pgqw.worker.job.executor import Executor
from pgqw.worker.job.recorder import Recorder
from pgqw.worker.job.slots import Slots
from tests.helpers import one
from tests.worker.parts import Direct, claimed, log, settings, steal

T = TypeVar("T")


def _progress(conn: psycopg.Connection, job_id: object) -> object:
    return one(conn, "select progress from jobs where id = %s", [job_id])["progress"]


def _parts(conn: psycopg.Connection, now: list[float], tasks: Registry | None = None):
    slots = Slots(5, clock=lambda: now[0])
    worker_log, out = log()
    database = Direct(conn)
    beat = Heartbeat(settings(), slots, worker_log, database.once, clock=lambda: now[0])
    executor = Executor(settings(), tasks or Registry(), slots, worker_log, database,
                        Inline(Recorder(settings(), slots, worker_log, database)), clock=lambda: now[0])
    return slots, beat, executor, out


def test_progress_is_written_by_the_next_heartbeat_soon_after_the_call(conn: psycopg.Connection) -> None:
    now = [10.0]
    slots, beat, executor, _ = _parts(conn, now)
    run, _, _ = slots.take(claimed(conn, lease_ms=600_000))
    ctx = executor.context(run)
    with slots.lock:
        assert round(beat.due_in(), 3) == 200.0  # a third of the lease: nothing else due
    ctx.progress({"done": 3, "of": 10})
    assert _progress(conn, run.job.id) is None  # kept by the worker until the heartbeat
    with slots.lock:
        assert beat.due_in() <= 0 and not beat.leases_due()  # due now, and only the progress is
    assert beat.beat(progress_only=True) == []
    assert _progress(conn, run.job.id) == {"done": 3, "of": 10} and run.progress is None
    # The next report waits for PROGRESS_EVERY_S after that write: a few writes a second at most.
    ctx.progress({"done": 4, "of": 10})
    with slots.lock:
        assert round(beat.due_in(), 3) == PROGRESS_EVERY_S
    now[0] += PROGRESS_EVERY_S
    beat.beat(progress_only=True)
    assert _progress(conn, run.job.id) == {"done": 4, "of": 10}


def test_progress_only_beat_extends_only_the_jobs_with_progress(conn: psycopg.Connection) -> None:
    now = [10.0]
    slots, beat, executor, _ = _parts(conn, now)
    told, quiet = (slots.take(claimed(conn, lease_ms=600_000))[0] for _ in range(2))
    before = one(conn, "select lease_expires_at from jobs where id = %s", [quiet.job.id])["lease_expires_at"]
    executor.context(told).progress("half")
    beat.beat(progress_only=True)
    assert _progress(conn, told.job.id) == "half"
    assert one(conn, "select lease_expires_at from jobs where id = %s", [quiet.job.id])["lease_expires_at"] == before


class _Told(Direct):
    """Direct, and an event set after each call."""

    def __init__(self, conn: psycopg.Connection) -> None:
        super().__init__(conn)
        self.called = threading.Event()

    def once(self, fn: Callable[[psycopg.Connection], T]) -> T:
        try:
            return fn(self.conn)
        finally:
            self.called.set()


def test_progress_pokes_the_heartbeat_out_of_its_wait(conn: psycopg.Connection) -> None:
    slots = Slots(2)
    worker_log, _ = log()
    database = _Told(conn)
    beat = Heartbeat(settings(), slots, worker_log, database.once)
    run, _, _ = slots.take(claimed(conn, lease_ms=600_000))  # its lease is due in 200 s
    executor = Executor(settings(), Registry(), slots, worker_log, database,
                        Inline(Recorder(settings(), slots, worker_log, database)))
    beat.start()
    try:
        executor.context(run).progress({"step": "upload"})
        assert database.called.wait(10)  # the heartbeat's call, long before the lease's third
    finally:
        beat.stop()
    assert _progress(conn, run.job.id) == {"step": "upload"}


def test_progress_of_a_job_handed_on_writes_nothing(conn: psycopg.Connection) -> None:
    now = [10.0]
    slots, beat, executor, _ = _parts(conn, now)
    run, _, _ = slots.take(claimed(conn, lease_ms=1))
    steal(conn, run.job)
    executor.context(run).progress({"stale": True})
    assert beat.beat() == [run] and run.lost
    assert _progress(conn, run.job.id) is None


def test_progress_last_value_is_written_before_the_outcome(conn: psycopg.Connection) -> None:
    r = Registry()

    @r.task("reports_progress")
    def handler(payload: dict, ctx) -> None:
        for n in range(1, 4):
            ctx.progress({"done": n})

    now = [10.0]
    slots, _, executor, out = _parts(conn, now, r)
    run, _, _ = slots.take(claimed(conn, type="reports_progress", payload={}, lease_ms=600_000))
    executor.execute(run)  # no heartbeat ran
    assert _progress(conn, run.job.id) == {"done": 3}
    assert one(conn, "select status from jobs where id = %s", [run.job.id])["status"] == "succeeded"
    assert len(out.lines("success")) == 1


def test_progress_over_size_is_a_value_error_in_the_handler(conn: psycopg.Connection) -> None:
    now = [10.0]
    slots, _, executor, _ = _parts(conn, now)
    run, _, _ = slots.take(claimed(conn, lease_ms=600_000))
    with pytest.raises(ValueError, match=str(PROGRESS_MAX_BYTES)):
        executor.context(run).progress("x" * PROGRESS_MAX_BYTES)
    assert run.progress is None
