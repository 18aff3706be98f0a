"""A handler raising pgqw.Snooze, in process against the real database: the executor turns it into a
snooze, the completion strategy records it with snooze_job (at once, inline or batch), the log line says
when the job runs next, and the job runs again later, its attempt not spent."""
from __future__ import annotations

import asyncio
import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from pgqw import Snooze, db, hooks
from pgqw.tasks import Registry
from pgqw.worker.job.completion import Batch, Inline
from pgqw.worker.job.executor import Executor
from pgqw.worker.job.recorder import EARLIER_TRY, Recorder, Snoozed
from pgqw.worker.job.slots import Slots
from pgqw.worker.log import Log, clock
from tests.helpers import one, rows
from tests.worker.parts import AT, Direct, Lines, LostReply, claimed, log, settings

UNTIL = datetime(2031, 1, 2, 3, 4, 5, 678_000, tzinfo=timezone.utc)
NEXT_RUN = re.compile(r"^\w+ attempt 1/5 in 1\.50s; next run (\d\d:\d\d:\d\d\.\d{3}Z) \(in ([\d.]+)s\)"
                      r"  \(running 0/2, peak 1\)$")


def _tasks() -> Registry:
    r = Registry()
    r.task("later_ms", model=dict)(lambda payload, ctx: (_ for _ in ()).throw(Snooze(60_000)))
    r.task("later_delta", model=dict)(lambda payload, ctx: (_ for _ in ()).throw(Snooze(timedelta(minutes=2))))
    r.task("later_until", model=dict)(lambda payload, ctx: (_ for _ in ()).throw(Snooze(until=UNTIL)))

    @r.task("once", model=dict)
    def once(payload: dict, ctx: Any) -> dict:
        if ctx.attempt == 1:
            raise Snooze(1_000)
        return {"attempt": ctx.attempt}

    @r.task("async_later", model=dict)
    async def async_later(payload: dict, ctx: Any) -> None:
        await asyncio.sleep(0)
        raise Snooze(5_000)

    return r


def _executor(conn: psycopg.Connection, *, batch: bool = False, lost_reply: bool = False,
              around: hooks.Hooks | None = None, worker_log: tuple[Log, Lines] | None = None):
    slots = Slots(2, clock=lambda: 0.0)
    worker_log, out = worker_log or log()
    database = (LostReply if lost_reply else Direct)(conn)
    recorder = Recorder(settings(), slots, worker_log, database)
    completion = Batch(recorder) if batch else Inline(recorder)
    executor = Executor(settings(), _tasks(), slots, worker_log, database, completion, clock=lambda: 1.5,
                        around=around if around is not None else hooks.Hooks())
    return executor, slots, database, out


def _attempts(conn: psycopg.Connection, job_id: Any) -> list[tuple[int, str | None]]:
    return [(r["attempt"], r["outcome"]) for r in rows(
        conn, "select attempt, outcome from job_attempts where job_id = %s order by attempt", [job_id])]


def test_snooze_handler_ends_its_attempt_snoozed_and_the_job_runs_again_later(conn: psycopg.Connection) -> None:
    executor, slots, database, out = _executor(conn)
    run, _, _ = slots.take(claimed(conn, type="once", payload={}))
    assert executor.outcome(run) == Snoozed(delay_ms=1_000)
    executor.execute(run)
    job = db.get_job(conn, job_id=run.job.id)
    assert (job.status, job.attempts, job.max_attempts, job.last_error) == ("pending", 1, 6, None)
    assert _attempts(conn, job.id) == [(1, "snoozed")]
    assert [op.split(" ")[0] for op in database.ops] == ["snooze_job"]
    [line] = out.lines("snoozed")
    found = NEXT_RUN.match(line)
    assert found is not None, line
    assert found.group(1) == clock(job.run_at)
    assert 0.0 <= float(found.group(2)) <= 1.0
    assert slots.free_count() == 2 and slots.counts["snoozed"] == 1
    assert db.claim_job(conn, worker_id="w1") is None   # not before its time
    # Its time comes: the next claim runs it again, attempt 2, which succeeds.
    again = db.claim_job_at(conn, worker_id="w1", now=job.run_at)
    assert again is not None and (again.id, again.attempts) == (job.id, 2)
    run, _, _ = slots.take(again)
    executor.execute(run)
    done = db.get_job(conn, job_id=job.id)
    assert (done.status, done.attempts, done.max_attempts) == ("succeeded", 2, 6)
    assert _attempts(conn, job.id) == [(1, "snoozed"), (2, "succeeded")]
    assert db.get_result(conn, job_id=job.id).value == {"attempt": 2}


def test_snooze_a_delay_a_timedelta_a_time_and_an_async_handler(conn: psycopg.Connection) -> None:
    executor, slots, _, out = _executor(conn)
    ran = {}
    for kind in ("later_ms", "later_delta", "later_until", "async_later"):
        run, _, _ = slots.take(claimed(conn, type=kind, payload={}))
        executor.execute(run)
        ran[kind] = one(conn, "select j.run_at, a.finished_at from jobs j join job_attempts a on a.job_id = j.id"
                              " where j.id = %s", [run.job.id])
    executor.async_runner.close()
    waits = {kind: r["run_at"] - r["finished_at"] for kind, r in ran.items()}
    assert waits["later_ms"] == timedelta(seconds=60)      # counted on the database's clock
    assert waits["later_delta"] == timedelta(minutes=2)
    assert waits["async_later"] == timedelta(seconds=5)
    assert ran["later_until"]["run_at"] == UNTIL
    assert len(out.lines("snoozed")) == 4 and out.lines("failed") == []


def test_snooze_is_recorded_at_once_by_the_batch_completion(conn: psycopg.Connection) -> None:
    executor, slots, database, out = _executor(conn, batch=True)
    run, _, _ = slots.take(claimed(conn, type="later_ms", payload={}))
    executor.execute(run)
    assert executor.completion.done.empty()   # not waiting for a batch of successes
    assert [op.split(" ")[0] for op in database.ops] == ["snooze_job"]
    assert db.get_job(conn, job_id=run.job.id).status == "pending" and len(out.lines("snoozed")) == 1


def test_snooze_after_a_lost_reply_is_logged_once_as_recorded_earlier(conn: psycopg.Connection) -> None:
    executor, slots, _, out = _executor(conn, lost_reply=True)
    run, _, _ = slots.take(claimed(conn, type="later_ms", payload={}))
    executor.execute(run)
    [line] = out.lines("snoozed")
    assert f"({EARLIER_TRY})" in line and out.lines("ignored late result") == []
    assert _attempts(conn, run.job.id) == [(1, "snoozed")]


def test_snooze_past_the_limit_is_logged_dead_with_the_databases_error(conn: psycopg.Connection) -> None:
    conn.execute("update queue_settings set max_snoozes = 0")
    executor, slots, _, out = _executor(conn)
    run, _, _ = slots.take(claimed(conn, type="later_ms", payload={}))
    executor.execute(run)
    assert out.lines("dead") == [f"{run.tag()} in 1.50s: snoozed more than 0 times  (running 0/2, peak 1)"]
    assert out.lines("snoozed") == [] and slots.counts["dead"] == 1
    assert _attempts(conn, run.job.id) == [(1, "failed")]


def test_snooze_of_a_job_cancelled_since_the_last_heartbeat_ends_it_cancelled(conn: psycopg.Connection) -> None:
    executor, slots, _, out = _executor(conn)
    run, _, _ = slots.take(claimed(conn, type="later_ms", payload={}))
    db.cancel_job(conn, job_id=run.job.id)   # no heartbeat has told the worker yet
    executor.execute(run)
    assert out.lines("cancelled") == [f"{run.tag()} in 1.50s  (running 0/2, peak 1)"]
    assert db.get_job(conn, job_id=run.job.id).status == "cancelled"


def test_snooze_of_a_job_handed_on_is_an_ignored_late_result(conn: psycopg.Connection) -> None:
    executor, slots, _, out = _executor(conn)
    run, _, _ = slots.take(claimed(conn, type="later_ms", payload={}, lease_ms=1))
    db.sweep_stuck_at(conn, now=run.job.lease_expires_at + timedelta(milliseconds=1))
    executor.execute(run)
    [line] = out.lines("ignored late result")
    assert "is no longer held by its lease" in line and out.lines("snoozed") == []
    assert db.get_job(conn, job_id=run.job.id).status == "pending"


def test_snooze_hooks_see_a_snoozed_outcome_not_a_failure(conn: psycopg.Connection) -> None:
    around = hooks.Hooks()
    seen: list[hooks.Outcome] = []

    @around.around_attempt
    def watch(attempt: hooks.Attempt) -> hooks.Around:
        seen.append((yield))

    executor, slots, _, _ = _executor(conn, around=around)
    run, _, _ = slots.take(claimed(conn, type="later_ms", payload={}))
    executor.execute(run)
    [outcome] = seen
    assert (outcome.outcome, outcome.error, outcome.message, outcome.failed) == (hooks.SNOOZED, None, None, False)


def test_snooze_json_line_has_the_outcome_and_the_next_run(conn: psycopg.Connection) -> None:
    out = Lines()
    executor, slots, _, _ = _executor(conn, worker_log=(Log("w1", out, now=lambda: AT, log_format="json"), out))
    run, _, _ = slots.take(claimed(conn, type="later_until", payload={}))
    executor.execute(run)
    [record] = [json.loads(line) for line in out.getvalue().splitlines()]
    assert (record["event"], record["level"], record["outcome"]) == ("snoozed", "info", "snoozed")
    assert record["next_run_at"] == "2031-01-02T03:04:05.678Z" and record["job_id"] == str(run.job.id)


@pytest.mark.parametrize("args, kwargs, error", [
    ((), {}, TypeError),
    ((1_000,), {"until": UNTIL}, TypeError),
    ((1.5,), {}, TypeError),
    ((True,), {}, TypeError),
    ((-1,), {}, ValueError),
    ((2**31,), {}, ValueError),
    ((timedelta(days=30),), {}, ValueError),
    ((), {"until": datetime(2031, 1, 1)}, TypeError),   # naive: which zone is meant?
    ((1_000,), {"delay_ms": 1_000}, TypeError),
    ((), {"delay_ms": 1_000, "until": UNTIL}, TypeError),
    ((), {"delay_ms": timedelta(seconds=1)}, TypeError),
    ((), {"delay_ms": -1}, ValueError),
])
def test_snooze_takes_a_delay_or_a_time_exactly(args: tuple, kwargs: dict, error: type[Exception]) -> None:
    with pytest.raises(error):
        Snooze(*args, **kwargs)


def test_snooze_says_what_it_asks_for() -> None:
    assert (Snooze(0).delay_ms, Snooze(0).until) == (0, None)
    assert Snooze(timedelta(seconds=1.5)).delay_ms == 1_500
    assert (Snooze(until=UNTIL).until, Snooze(until=UNTIL).delay_ms) == (UNTIL, None)
    assert str(Snooze(250)) == "snoozed for 250 ms"
    assert Snooze(delay_ms=30_000).delay_ms == 30_000
