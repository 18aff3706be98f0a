"""worker/executor.py: a handler's outcome, and ctx.finish storing the output with the success."""
from __future__ import annotations

import queue

import psycopg

from pgqw import db
from pgqw.listing import InvalidPayload
from pgqw.worker.executor import Executor, describe
from pgqw.worker.handlers import PermanentError, TransientError
from pgqw.worker.recorder import Failed, Recorder, Refused, Succeeded
from pgqw.worker.slots import Slots
from tests.helpers import job_row, one, rows
from tests.worker.parts import Direct, LostReply, claimed, log, settings, steal

PAYLOAD_SETTING = "select max_payload_bytes as n from queue_settings"


def _executor(conn: psycopg.Connection, handlers: dict, *, lost_reply: bool = False):
    slots = Slots(2, clock=lambda: 0.0)
    worker_log, out = log()
    database = (LostReply if lost_reply else Direct)(conn)
    recorder = Recorder(settings(), slots, worker_log, database, batch=False)
    return Executor(settings(), handlers, slots, worker_log, database, recorder, clock=lambda: 1.5), slots, out


def _store(conn: psycopg.Connection) -> str:
    """A handler's output written in ctx.finish's transaction (a setting stands in for a result row)."""
    conn.execute("update queue_settings set max_payload_bytes = max_payload_bytes + 1")
    return "stored"


def test_executor_outcomes_of_handlers(conn: psycopg.Connection) -> None:
    def bad_payload(job, ctx):
        raise InvalidPayload([{"field": "priceMinor", "problem": "must be an integer"}])

    handlers = {
        "fine": lambda job, ctx: "done",
        "permanent": lambda job, ctx: (_ for _ in ()).throw(PermanentError("never")),
        "invalid": bad_payload,
        "crash": lambda job, ctx: 1 / 0,
        "transient": lambda job, ctx: (_ for _ in ()).throw(TransientError("try later")),
    }
    executor, slots, _ = _executor(conn, handlers)
    got = {}
    for kind in (*handlers, "no_such_type"):
        run, _, _ = slots.take(claimed(conn, type=kind, payload={}))
        got[kind] = executor.outcome(run)
        slots.free(run)
    assert got["fine"] == Succeeded("done")
    assert got["permanent"] == Failed("never", retryable=False)
    assert got["invalid"] == Failed("InvalidPayload: invalid listing payload: priceMinor must be an integer",
                                 retryable=False)
    assert got["crash"] == Failed("ZeroDivisionError: division by zero")
    assert got["transient"] == Failed("try later")
    assert got["no_such_type"].retryable is False and "unknown job type 'no_such_type'" in got["no_such_type"].error
    assert describe(ValueError()) == "ValueError"


def test_executor_finish_commits_the_output_with_the_success(conn: psycopg.Connection) -> None:
    before = one(conn, PAYLOAD_SETTING)["n"]
    executor, slots, out = _executor(conn, {"store": lambda job, ctx: ctx.finish(_store)})
    run, _, _ = slots.take(claimed(conn, type="store"))
    executor.execute(run)
    assert job_row(conn, run.job.id)["status"] == "succeeded" and one(conn, PAYLOAD_SETTING)["n"] == before + 1
    assert out.lines("success") == [f"{run.tag()} in 1.50s: stored  (running 0/2, peak 1)"]


def test_executor_finish_retried_after_a_lost_reply_commits_once(conn: psycopg.Connection) -> None:
    # The first commit landed; the retry runs the store again and mark_succeeded answers
    # already_recorded instead of refusing, so the retry commits too and the job is a success.
    executor, slots, out = _executor(conn, {"store": lambda job, ctx: ctx.finish(_store)}, lost_reply=True)
    run, _, _ = slots.take(claimed(conn, type="store"))
    assert executor.outcome(run) == Succeeded("stored", recorded=True)
    assert [r["outcome"] for r in rows(conn, "select outcome from job_attempts")] == ["succeeded"]


def test_executor_finish_refused_rolls_the_output_back(conn: psycopg.Connection) -> None:
    before = one(conn, PAYLOAD_SETTING)["n"]
    executor, slots, out = _executor(conn, {"store": lambda job, ctx: ctx.finish(_store)})
    run, _, _ = slots.take(claimed(conn, type="store", lease_ms=1))
    steal(conn, run.job)
    outcome = executor.outcome(run)
    assert isinstance(outcome, Refused) and outcome.error.sqlstate == "QL409"
    assert one(conn, PAYLOAD_SETTING)["n"] == before  # rolled back with the refused success
    executor.recorder.record(run, outcome, 1.0)
    assert len(out.lines("ignored late result")) == 1


def test_executor_loop_runs_jobs_until_told_to_stop(conn: psycopg.Connection) -> None:
    executor, slots, out = _executor(conn, {"fine": lambda job, ctx: None})
    tasks: queue.Queue = queue.Queue()
    for _ in range(2):
        tasks.put(slots.take(claimed(conn, type="fine", payload={}))[0])
    tasks.put(None)
    executor.loop(tasks)
    assert len(out.lines("success")) == 2 and slots.free_count() == 2
    assert {j.status for j in db.list_jobs(conn).jobs} == {"succeeded"}
