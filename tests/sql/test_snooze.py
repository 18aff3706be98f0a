"""snooze_job: the attempt ends snoozed and the job waits until a time, without spending a try; a repeat is
already_recorded, a stale token refused, bad arguments change nothing; past its limit the job ends dead; and
mark_failed's backoff and its dead decision count the attempts that were not snoozed."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from pgqw import db
from tests.helpers import enqueue, listen_waiting, one, rows, snapshot
from tests.worker.parts import steal

LATER = "interval '1 day'"


def _claim(conn: psycopg.Connection, ahead: str = LATER, worker: str = "w1") -> dict[str, Any]:
    """The next job, claimed as of `ahead` from now (so a job put off by less is due)."""
    return one(conn, f"select (c.job).*, c.lease_token from claim_jobs_at(now() + {ahead}, %s, 1) c", [worker])


def _snooze(conn: psycopg.Connection, job: dict[str, Any], **args: Any) -> db.RecordedJob:
    args.setdefault("delay_ms", 60_000)
    return db.snooze_job(conn, job_id=job["id"], lease_token=job["lease_token"], **args)


def _attempts(conn: psycopg.Connection, job_id: Any) -> list[tuple[int, str | None, str | None]]:
    return [(r["attempt"], r["outcome"], r["error"]) for r in rows(
        conn, "select attempt, outcome, error from job_attempts where job_id = %s order by attempt", [job_id])]


def test_snooze_job_puts_the_job_off_without_spending_its_attempt(conn: psycopg.Connection) -> None:
    enqueue(conn, max_attempts=3)
    job = _claim(conn, "interval '0 seconds'")
    until = datetime.now(timezone.utc) + timedelta(hours=1)
    after = _snooze(conn, job, until=until, delay_ms=None)
    assert (after.status, after.run_at, after.already_recorded) == ("pending", until, False)
    assert (after.attempts, after.max_attempts) == (1, 4)   # attempt 1 ran; it is given back
    assert after.locked_by is None and after.lease_expires_at is None and after.finished_at is None
    assert after.last_error is None
    [(number, outcome, error)] = _attempts(conn, job["id"])
    assert (number, outcome) == (1, "snoozed") and error.startswith("snoozed until ")
    # Not before its time; then it runs again as attempt 2, in a row of its own.
    assert rows(conn, "select * from claim_job('w1')") == []
    again = _claim(conn, "interval '2 hours'")
    assert (again["id"], again["attempts"], again["max_attempts"]) == (job["id"], 2, 4)
    assert [a[:2] for a in _attempts(conn, job["id"])] == [(1, "snoozed"), (2, None)]


def test_snooze_job_a_delay_counts_from_the_database_clock(conn: psycopg.Connection) -> None:
    enqueue(conn)
    job = _claim(conn, "interval '0 seconds'")
    after = _snooze(conn, job, delay_ms=90_500)
    finished = one(conn, "select finished_at from job_attempts where job_id = %s", [job["id"]])["finished_at"]
    assert after.run_at - finished == timedelta(milliseconds=90_500)  # both now() of the call's transaction


def test_snooze_job_to_a_time_already_past_is_due_now(conn: psycopg.Connection) -> None:
    enqueue(conn)
    job = _claim(conn, "interval '0 seconds'")
    after = _snooze(conn, job, until=datetime(2000, 1, 1, tzinfo=timezone.utc), delay_ms=None)
    finished = one(conn, "select finished_at from job_attempts where job_id = %s", [job["id"]])["finished_at"]
    assert after.run_at == finished   # now(), not ahead of the jobs that waited longer
    assert db.claim_job(conn, worker_id="w2").id == job["id"]


def test_snooze_job_repeated_after_a_lost_reply_is_already_recorded(conn: psycopg.Connection) -> None:
    enqueue(conn)
    job = _claim(conn)
    first = _snooze(conn, job)
    before = snapshot(conn)
    second = _snooze(conn, job, delay_ms=5)   # the retry of the same call, its delay counted again
    assert second.already_recorded and not first.already_recorded
    assert (second.status, second.run_at, second.max_attempts) == (first.status, first.run_at, first.max_attempts)
    assert snapshot(conn) == before


def test_snooze_job_with_a_stale_token_is_refused_and_changes_nothing(conn: psycopg.Connection) -> None:
    enqueue(conn)
    old = db.claim_job(conn, worker_id="w1", lease_ms=1)
    assert old is not None
    steal(conn, old)   # its lease ran out; the sweep handed it on and w2 holds it now
    before = snapshot(conn)
    for token in (old.lease_token, "7b0e2c9e-55f1-4c7a-9d43-3f0e6a1b2c4d"):
        with pytest.raises(psycopg.Error) as exc:
            db.snooze_job(conn, job_id=old.id, lease_token=token, delay_ms=1000)
        assert exc.value.sqlstate == "QL409"
    assert snapshot(conn) == before


def test_snooze_job_a_snoozed_attempt_can_no_longer_succeed_or_fail(conn: psycopg.Connection) -> None:
    enqueue(conn)
    job = _claim(conn)
    _snooze(conn, job)
    before = snapshot(conn)
    for call in (lambda: db.mark_succeeded(conn, job_id=job["id"], lease_token=job["lease_token"]),
                 lambda: db.mark_failed(conn, job_id=job["id"], lease_token=job["lease_token"], error="late"),
                 lambda: db.release_job(conn, job_id=job["id"], lease_token=job["lease_token"], reason="late")):
        with pytest.raises(psycopg.Error) as exc:
            call()
        assert exc.value.sqlstate == "QL409"
    assert snapshot(conn) == before


def test_snooze_job_of_an_unknown_job_is_qn404(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as exc:
        conn.execute("select * from snooze_job(gen_random_uuid(), gen_random_uuid(), p_delay_ms => 1)")
    assert exc.value.sqlstate == "QN404"


@pytest.mark.parametrize("arguments, argument", [
    ("null, %(token)s, p_delay_ms => 1", "job_id"),
    ("%(id)s, null, p_delay_ms => 1", "lease_token"),
    ("%(id)s, %(token)s", "until"),                                         # neither a time nor a delay
    ("%(id)s, %(token)s, null, null", "until"),
    ("%(id)s, %(token)s, now() + interval '1 hour', 1000", "delay_ms"),       # both
    ("%(id)s, %(token)s, p_delay_ms => -1", "delay_ms"),
    ("%(id)s, %(token)s, p_delay_ms => -2147483648", "delay_ms"),
    ("%(id)s, %(token)s, 'infinity'", "until"),
    ("%(id)s, %(token)s, '-infinity'", "until"),
    ("%(id)s, %(token)s, '9999-01-01'", "until"),
])
def test_snooze_job_bad_arguments_are_qv400_naming_the_argument_and_change_nothing(
        conn: psycopg.Connection, arguments: str, argument: str) -> None:
    enqueue(conn)
    job = _claim(conn)
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(f"select * from snooze_job({arguments})", {"id": job["id"], "token": job["lease_token"]})
    assert exc.value.sqlstate == "QV400" and exc.value.diag.column_name == argument
    assert snapshot(conn) == before


def test_snooze_job_past_the_limit_ends_the_job_dead_its_attempt_failed(conn: psycopg.Connection) -> None:
    conn.execute("update queue_settings set max_snoozes = 2")
    enqueue(conn, max_attempts=3)
    for _ in range(2):
        assert _snooze(conn, _claim(conn)).status == "pending"
    job = _claim(conn)
    dead = _snooze(conn, job)
    assert (dead.status, dead.last_error, dead.already_recorded) == ("dead", "snoozed more than 2 times", False)
    assert dead.finished_at is not None and dead.locked_by is None
    assert (dead.attempts, dead.max_attempts) == (3, 5)   # two tries given back, none for the third
    assert [(n, outcome) for n, outcome, _ in _attempts(conn, job["id"])] == [(1, "snoozed"), (2, "snoozed"),
                                                                              (3, "failed")]
    assert _attempts(conn, job["id"])[-1][2] == "snoozed more than 2 times"
    before = snapshot(conn)
    assert _snooze(conn, job).already_recorded   # its repeat
    assert snapshot(conn) == before
    assert rows(conn, "select * from claim_jobs_at(now() + interval '10 days', 'w1', 1)") == []


def test_snooze_job_limit_of_the_task_type_wins_over_the_default(conn: psycopg.Connection) -> None:
    conn.execute("update task_types set max_snoozes = 1 where name = 't'")
    enqueue(conn, type="t")
    enqueue(conn, type="other")
    for _ in range(2):
        for job in rows(conn, "select (c.job).*, c.lease_token from claim_jobs_at(now() + interval '1 day', 'w1', 2) c"):
            _snooze(conn, job)
    t, other = (one(conn, "select status, last_error from jobs where type = %s", [name]) for name in ("t", "other"))
    assert t == {"status": "dead", "last_error": "snoozed more than 1 time"}
    assert other == {"status": "pending", "last_error": None}   # the default, 100


def test_snooze_job_limit_from_code_is_under_a_dbas_and_over_the_default(conn: psycopg.Connection) -> None:
    conn.execute("select register_task_types(%s::jsonb)",
                 [Jsonb([{"name": "t", "payload_schema": {}, "max_snoozes": 1}])])
    assert one(conn, "select max_snoozes from task_type_settings where name = 't'") == {"max_snoozes": 1}
    enqueue(conn, type="t")
    for _ in range(2):
        _snooze(conn, _claim(conn))
    assert one(conn, "select status, last_error from jobs where type = 't'") == {
        "status": "dead", "last_error": "snoozed more than 1 time"}
    conn.execute("update task_types set max_snoozes = 5 where name = 't'")   # a DBA's wins
    assert one(conn, "select max_snoozes from task_type_settings where name = 't'") == {"max_snoozes": 5}


def test_snooze_job_limit_of_zero_allows_none(conn: psycopg.Connection) -> None:
    conn.execute("update queue_settings set max_snoozes = 0")
    enqueue(conn)
    assert _snooze(conn, _claim(conn)).last_error == "snoozed more than 0 times"


def test_snooze_job_on_the_thousandth_attempt_ends_the_job_dead(conn: psycopg.Connection) -> None:
    enqueue(conn, max_attempts=1000)
    conn.execute("update jobs set attempts = 998")
    job = _claim(conn)
    spent = _snooze(conn, job)   # attempt 999 of 1000: no try can be given back, this one is spent
    assert (spent.status, spent.attempts, spent.max_attempts) == ("pending", 999, 1000)
    job = _claim(conn, "interval '2 days'")
    dead = _snooze(conn, job)
    assert (dead.status, dead.last_error) == ("dead", "snoozed on its last attempt: a job has at most 1000")
    assert _attempts(conn, job["id"])[-1] == (1000, "failed", dead.last_error)


def test_snooze_job_of_a_job_asked_to_cancel_ends_it_cancelled(conn: psycopg.Connection) -> None:
    enqueue(conn)
    job = _claim(conn)
    db.cancel_job(conn, job_id=job["id"])
    after = _snooze(conn, job)
    assert after.status == "cancelled" and after.finished_at is not None
    [(_, outcome, error)] = _attempts(conn, job["id"])
    assert outcome == "cancelled" and error.startswith("cancelled on request")
    assert _snooze(conn, job).already_recorded


def test_mark_failed_backoff_after_snoozes_is_the_first_failures(conn: psycopg.Connection) -> None:
    enqueue(conn, max_attempts=2)
    for _ in range(3):
        _snooze(conn, _claim(conn))
    job = _claim(conn)
    assert job["attempts"] == 4
    failed = one(conn, "select (m.job).status, (m.job).run_at - now() as wait from mark_failed(%s, %s, 'boom',"
                       " p_base_ms => 1000, p_max_jitter_ms => 0) m", [job["id"], job["lease_token"]])
    assert failed == {"status": "failed", "wait": timedelta(seconds=1)}   # backoff_delay(1), not (4)
    # The dead decision counts them the same way: the second failure is its last try (max_attempts 2).
    job = _claim(conn)
    last = db.mark_failed(conn, job_id=job["id"], lease_token=job["lease_token"], error="boom again")
    assert (last.status, last.attempts, last.max_attempts) == ("dead", 5, 5)


def test_mark_failed_backoff_without_snoozes_is_unchanged(conn: psycopg.Connection) -> None:
    enqueue(conn, max_attempts=3)
    _snooze(conn, _claim(conn))
    job = _claim(conn)
    db.mark_failed(conn, job_id=job["id"], lease_token=job["lease_token"], error="one")
    job = _claim(conn)
    failed = one(conn, "select (m.job).run_at - now() as wait from mark_failed(%s, %s, 'two',"
                       " p_base_ms => 1000, p_max_jitter_ms => 0) m", [job["id"], job["lease_token"]])
    assert failed["wait"] == timedelta(seconds=2)   # the second failure: backoff_delay(2)


def _notes(listener: psycopg.Connection, timeout: float = 0.5) -> list[tuple[str, str]]:
    return [(n.channel, n.payload) for n in listener.notifies(timeout=timeout)]


def test_snooze_job_notifies_when_the_job_comes_due(conn: psycopg.Connection, connect) -> None:
    enqueue(conn, queue="emails")
    enqueue(conn, queue="emails")
    later, now = _claim(conn), _claim(conn)
    listener = connect()
    listen_waiting(listener)
    _snooze(conn, later, delay_ms=30_000)
    [(channel, payload)] = _notes(listener)
    ms, queue = payload.split(" ", 1)
    assert channel == "pgqw_jobs_at" and queue == "emails" and 29_000 <= int(ms) <= 30_000
    _snooze(conn, now, delay_ms=0)
    assert _notes(listener) == [("pgqw_jobs", "emails")]
