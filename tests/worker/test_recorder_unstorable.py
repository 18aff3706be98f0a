"""worker/job/recorder.py: a result the database cannot store fails its attempt at once, with what was wrong,
instead of being left for its lease to run out; the other jobs of its batch succeed."""
from __future__ import annotations

import psycopg
import pytest
from pydantic import BaseModel

from pgqw.tasks import File, Registry
from pgqw.worker.connection.database import is_transient
from pgqw.worker.job.claimer import ClaimRequest, claimer_for
from pgqw.worker.job.completion import Batch, Inline
from pgqw.worker.job.executor import Executor
from pgqw.worker.job.recorder import Failed, Recorder, Succeeded
from pgqw.worker.job.slots import Running, Slots
from tests.helpers import enqueue, job_row, rows
from tests.worker.parts import Direct, LostReply, claimed, log, settings

LONG_LEASE_MS = 600_000  # nothing here may wait for a lease to run out
NUL = ("application/json", {"s": "a\u0000b"}, None)
NUL_ERROR = ("the result could not be stored: unsupported Unicode escape sequence: "
             "\\u0000 cannot be converted to text (22P05)")


def _recorder(conn: psycopg.Connection, *, batch: bool = False, lost_reply: bool = False,
              claims: dict | None = None):
    """The inline recorder, or the batch completion (batch); claims: the batch's claimer's settings."""
    slots = Slots(5, clock=lambda: 0.0)
    worker_log, out = log()
    database = (LostReply if lost_reply else Direct)(conn)
    recorder = Recorder(settings(), slots, worker_log, database)
    if not batch:
        return recorder, slots, database, out
    claimer = None
    if claims is not None:
        claimer = claimer_for(claims.pop("batch_claim"))(ClaimRequest("w1"), slots, worker_log, database.once, **claims)
    return Batch(recorder, claimer=claimer), slots, database, out


def _attempts(conn: psycopg.Connection, run: Running) -> list[tuple[str, str | None]]:
    return [(r["outcome"], r["error"]) for r in rows(
        conn, "select outcome, error from job_attempts where job_id = %s order by attempt", [run.job.id])]


@pytest.mark.parametrize("lost_reply", [False, True])
def test_recorder_result_jsonb_refuses_fails_the_attempt_at_once(conn: psycopg.Connection, lost_reply: bool) -> None:
    recorder, slots, _, out = _recorder(conn, lost_reply=lost_reply)
    run, _, _ = slots.take(claimed(conn, lease_ms=LONG_LEASE_MS, max_attempts=5))
    recorder.record(run, Succeeded(NUL), 0.5)
    job = job_row(conn, run.job.id)
    assert (job["status"], job["last_error"], job["locked_by"]) == ("dead", NUL_ERROR, None)
    assert _attempts(conn, run) == [("failed", NUL_ERROR)]
    assert rows(conn, "select * from job_results where job_id = %s", [run.job.id]) == []
    [line] = out.lines("dead")
    assert line.startswith(f"{run.tag()} in 0.50s: {NUL_ERROR} (permanent error, not retried)")
    assert out.lines("error") == [] and out.lines("success") == []
    assert slots.free_count() == 5 and slots.counts["dead"] == 1


@pytest.mark.parametrize("result, says", [
    (("application/json", {"s": "\ud800"}, None),
     "invalid input syntax for type json: Unicode low surrogate must follow a high surrogate (22P02)"),
    (("not a content type", None, b"x"), "(QV400)"),
    (("application/x-\u0000", None, b"x"), "PostgreSQL text fields cannot contain NUL (0x00) bytes"),
    (("application/x-\ud800", None, b"x"), "'utf-8' codec can't encode character '\\ud800'"),
])
def test_recorder_result_the_database_cannot_take_says_what_was_wrong(conn: psycopg.Connection, result,
                                                                      says: str) -> None:
    recorder, slots, _, out = _recorder(conn)
    run, _, _ = slots.take(claimed(conn, lease_ms=LONG_LEASE_MS))
    recorder.record(run, Succeeded(result), 0.5)
    job = job_row(conn, run.job.id)
    assert job["status"] == "dead"
    assert job["last_error"].startswith("the result could not be stored: ") and says in job["last_error"]
    assert out.lines("error") == [] and slots.free_count() == 5


@pytest.mark.parametrize("claims", [None, "batch", "one by one"])
def test_recorder_batch_with_a_result_it_cannot_store_records_the_others(conn: psycopg.Connection,
                                                                         claims: str | None) -> None:
    started: list[Running] = []
    recorder, slots, database, out = _recorder(conn, batch=True, claims=None if claims is None else {
        "batch_claim": claims == "batch", "dispatch": started.append, "stopping": lambda: False})
    runs = [slots.take(claimed(conn, lease_ms=LONG_LEASE_MS))[0] for _ in range(3)]
    waiting = enqueue(conn)  # what the freed slots may claim
    recorder.record(runs[0], Succeeded(("application/json", {"n": 0}, None)), 0.1)
    recorder.record(runs[1], Succeeded(NUL), 0.1)
    recorder.record(runs[2], Succeeded(None), 0.1)
    assert recorder.drain(timeout=0) == 3
    assert [job_row(conn, r.job.id)["status"] for r in runs] == ["succeeded", "dead", "succeeded"]
    assert job_row(conn, runs[1].job.id)["last_error"] == NUL_ERROR
    assert rows(conn, "select value from job_results where job_id = %s", [runs[0].job.id]) == [{"value": {"n": 0}}]
    assert len(out.lines("success")) == 2 and len(out.lines("dead")) == 1
    [said] = out.lines("error")  # the batch's refusal, before one by one
    assert said.startswith("mark_jobs_succeeded: 22P05 unsupported Unicode escape sequence; recording one by one")
    # Nothing promised to the refused batch's claim is kept: the slots are free, or running a job claimed since.
    assert slots.free_count() + len(started) == 5
    assert job_row(conn, waiting.id)["status"] in ("pending", "processing")


def test_executor_handler_returning_a_nul_in_json_ends_dead_at_once(conn: psycopg.Connection) -> None:
    class Item(BaseModel):
        n: int = 1

    tasks = Registry()
    tasks.task("nul", model=Item)(lambda payload, ctx: {"s": "a\u0000b"})
    tasks.task("nul_file", model=Item)(lambda payload, ctx: File(b"ok", "text/plain\u0000"))
    slots = Slots(2, clock=lambda: 0.0)
    worker_log, out = log()
    database = Direct(conn)
    recorder = Recorder(settings(), slots, worker_log, database)
    executor = Executor(settings(), tasks, slots, worker_log, database, Inline(recorder), clock=lambda: 1.5)
    for kind in ("nul", "nul_file"):
        run, _, _ = slots.take(claimed(conn, type=kind, payload={"n": 1}, lease_ms=LONG_LEASE_MS))
        executor.execute(run)
        job = job_row(conn, run.job.id)
        assert job["status"] == "dead" and job["last_error"].startswith("the result could not be stored: ")
    executor.async_runner.close()
    assert len(out.lines("dead")) == 2 and slots.free_count() == 2


def test_recorder_failure_message_postgresql_cannot_store_is_stored_escaped(conn: psycopg.Connection) -> None:
    recorder, slots, _, out = _recorder(conn)
    run, _, _ = slots.take(claimed(conn, lease_ms=LONG_LEASE_MS))
    recorder.record(run, Failed("ValueError: a\u0000b \ud800", retryable=False), 0.5)
    assert job_row(conn, run.job.id)["last_error"] == "ValueError: a\\x00b \\ud800"
    assert len(out.lines("dead")) == 1 and out.lines("error") == []


def test_is_transient_leaves_out_a_statement_over_a_server_limit() -> None:
    # psycopg counts class 54 (program_limit_exceeded: a jsonb too big) as an OperationalError, like a
    # lost connection, but a retry fails the same way.
    assert isinstance(psycopg.errors.ProgramLimitExceeded(), psycopg.OperationalError)
    assert not is_transient(psycopg.errors.ProgramLimitExceeded())
    assert not is_transient(psycopg.errors.UntranslatableCharacter())
    assert is_transient(psycopg.errors.AdminShutdown())
