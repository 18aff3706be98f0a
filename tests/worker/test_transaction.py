"""ctx.transaction in the worker: the handler's writes and the job's success (mark_succeeded under its
lease token, on the block's connection) commit together; a block that raises rolls back and the attempt
fails as usual; a refusal of the success (QL409: a late duplicate after a sweep; QK409: a cancel) rolls
the block's writes back, and the attempt is handled as that refusal is (ignored late result, cancelled)."""
from __future__ import annotations

import threading

import psycopg
import pytest

from pgqw import db
from pgqw.tasks import Registry
from pgqw.worker.job.completion import Inline
from pgqw.worker.job.executor import Executor
from pgqw.worker.job.recorder import Recorder
from pgqw.worker.job.slots import Slots
from tests.helpers import one, rows
from tests.worker.parts import Direct, claimed, log, settings, steal

TABLE = "create table if not exists handler_rows (job_id uuid not null, attempt integer not null)"


def _parts(conn: psycopg.Connection, tasks: Registry):
    slots = Slots(5, clock=lambda: 0.0)
    worker_log, out = log()
    database = Direct(conn)
    executor = Executor(settings(), tasks, slots, worker_log, database,
                        Inline(Recorder(settings(), slots, worker_log, database)), clock=lambda: 1.0)
    return slots, executor, out


def _handler_rows(conn: psycopg.Connection, job_id: object) -> list[dict]:
    return rows(conn, "select attempt from handler_rows where job_id = %s order by attempt", [job_id])


def _attempts(conn: psycopg.Connection, job_id: object) -> list[tuple]:
    return [(a["attempt"], a["outcome"]) for a in rows(
        conn, "select attempt, outcome from job_attempts where job_id = %s order by attempt", [job_id])]


def test_transaction_commits_the_handlers_writes_with_the_success(conn: psycopg.Connection) -> None:
    conn.execute(TABLE)
    r = Registry()
    seen: list[str] = []

    @r.task("writes")
    def writes(payload: dict, ctx) -> dict:
        with ctx.transaction(result={"rows": 1}) as tx:
            tx.execute("insert into handler_rows values (%s, %s)", [ctx.job_id, ctx.attempt])
        try:
            ctx.transaction()
        except RuntimeError as exc:
            seen.append(str(exc))
        return {"not": "stored"}

    slots, executor, out = _parts(conn, r)
    run, _, _ = slots.take(claimed(conn, type="writes", payload={}, lease_ms=600_000))
    executor.execute(run)
    assert _handler_rows(conn, run.job.id) == [{"attempt": 1}]
    assert _attempts(conn, run.job.id) == [(1, "succeeded")]
    assert one(conn, "select value from job_results where job_id = %s", [run.job.id])["value"] == {"rows": 1}
    assert len(seen) == 1 and "once" in seen[0]
    assert len(out.lines("success")) == 1 and slots.held() == []


def test_transaction_block_that_raises_rolls_back_and_the_attempt_fails(conn: psycopg.Connection) -> None:
    conn.execute(TABLE)
    r = Registry()

    @r.task("breaks")
    def breaks(payload: dict, ctx) -> None:
        with ctx.transaction() as tx:
            tx.execute("insert into handler_rows values (%s, %s)", [ctx.job_id, ctx.attempt])
            raise ValueError("half done")

    slots, executor, out = _parts(conn, r)
    run, _, _ = slots.take(claimed(conn, type="breaks", payload={}, lease_ms=600_000))
    executor.execute(run)
    assert _handler_rows(conn, run.job.id) == []
    assert _attempts(conn, run.job.id) == [(1, "failed")]
    assert one(conn, "select last_error from jobs where id = %s", [run.job.id])["last_error"] == "ValueError: half done"
    assert len(out.lines("failed")) == 1


def test_transaction_refused_for_a_cancel_rolls_back_and_ends_cancelled(conn: psycopg.Connection, connect) -> None:
    conn.execute(TABLE)
    other = connect()
    r = Registry()

    @r.task("cancelled_meanwhile")
    def cancelled_meanwhile(payload: dict, ctx) -> None:
        with ctx.transaction() as tx:
            tx.execute("insert into handler_rows values (%s, %s)", [ctx.job_id, ctx.attempt])
            db.cancel_job(other, job_id=ctx.job_id)  # committed while the block is open

    slots, executor, out = _parts(conn, r)
    run, _, _ = slots.take(claimed(conn, type="cancelled_meanwhile", payload={}, lease_ms=600_000))
    executor.execute(run)
    assert _handler_rows(conn, run.job.id) == []
    assert _attempts(conn, run.job.id) == [(1, "cancelled")]
    assert one(conn, "select status from jobs where id = %s", [run.job.id])["status"] == "cancelled"
    assert len(out.lines("cancelled")) == 1 and out.lines("success") == []


def test_transaction_late_duplicate_commits_once(conn: psycopg.Connection, connect) -> None:
    """Attempt 1 claims, its lease runs out and a sweep hands the job to attempt 2; both handlers then
    have their block open at once, each with its row written. Attempt 1 ends its block first and is
    refused (its token no longer holds): its row rolls back. Attempt 2 commits its row with the success."""
    conn.execute(TABLE)
    inside = {1: threading.Event(), 2: threading.Event()}
    go = {1: threading.Event(), 2: threading.Event()}
    r = Registry()

    @r.task("duplicated")
    def duplicated(payload: dict, ctx) -> None:
        with ctx.transaction() as tx:
            tx.execute("insert into handler_rows values (%s, %s)", [ctx.job_id, ctx.attempt])
            inside[ctx.attempt].set()
            assert go[ctx.attempt].wait(10)

    slots_a, executor_a, out_a = _parts(connect(), r)
    slots_b, executor_b, out_b = _parts(connect(), r)
    late, _, _ = slots_a.take(claimed(conn, type="duplicated", payload={}, lease_ms=1))
    holder, _, _ = slots_b.take(steal(conn, late.job))
    assert holder.job.attempts == 2
    threads = {1: threading.Thread(target=executor_a.execute, args=(late,)),
               2: threading.Thread(target=executor_b.execute, args=(holder,))}
    for n in (1, 2):
        threads[n].start()
        assert inside[n].wait(10)
    go[1].set()
    threads[1].join(10)
    assert not threads[1].is_alive()
    assert out_a.lines("ignored late result") and slots_a.held() == []
    go[2].set()
    threads[2].join(10)
    assert not threads[2].is_alive()
    assert _handler_rows(conn, late.job.id) == [{"attempt": 2}]
    assert _attempts(conn, late.job.id) == [(1, "abandoned"), (2, "succeeded")]
    assert len(out_a.lines("ignored late result")) == 1 and out_a.lines("success") == []
    assert len(out_b.lines("success")) == 1


def test_transaction_outside_a_worker_is_a_runtime_error() -> None:
    from pgqw.tasks import Context

    ctx = Context(job=None, worker_id="w1", log=None)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        ctx.transaction()
