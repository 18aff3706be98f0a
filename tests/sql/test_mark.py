"""mark_succeeded / mark_failed / release_job / backoff_delay: transitions, backoff in SQL, late results
ignored, a result presented with another attempt's lease token (or a made-up one) refused, and a
repeated result for the same attempt (same token) answered already_recorded."""
from __future__ import annotations

import uuid

import psycopg
import pytest

from pgqw import db
from tests.helpers import enqueue, one, rows, snapshot


def _claimed(conn: psycopg.Connection, worker: str = "w1", **kwargs) -> db.ClaimedJob:
    enqueue(conn, **kwargs)
    job = db.claim_job(conn, worker_id=worker)
    assert job is not None
    return job


def test_mark_succeeded_finishes_job_and_attempt(conn: psycopg.Connection) -> None:
    job = _claimed(conn)
    done = db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token)
    assert done.status == "succeeded"
    assert done.finished_at is not None and done.locked_by is None and done.lease_expires_at is None
    attempt = one(conn, "select * from job_attempts where job_id = %s", [job.id])
    assert attempt["outcome"] == "succeeded" and attempt["finished_at"] is not None


def test_mark_failed_with_attempts_left_schedules_retry_with_backoff(conn: psycopg.Connection) -> None:
    job = _claimed(conn)
    failed = one(
        conn,
        "select (r.job).*, r.already_recorded, (r.job).run_at - now() as wait from mark_failed(%s, %s, 'render crashed') r",
        [job.id, job.lease_token],
    )
    assert failed["status"] == "failed"
    assert failed["last_error"] == "render crashed"
    assert failed["locked_by"] is None and failed["finished_at"] is None
    # Default settings: 2 s base, up to 1 s jitter for the first retry.
    assert 2.0 <= failed["wait"].total_seconds() <= 3.0
    attempt = one(conn, "select * from job_attempts where job_id = %s", [job.id])
    assert (attempt["outcome"], attempt["error"]) == ("failed", "render crashed")


def test_mark_failed_waits_double_each_attempt(conn: psycopg.Connection) -> None:
    enqueue(conn, max_attempts=5)
    waits = []
    for attempt in range(1, 5):
        job = one(conn, "select (r.job).*, r.lease_token from claim_jobs_at(now() + interval '1 day', 'w1', 1) r")
        assert job["attempts"] == attempt
        row = one(
            conn,
            "select (r.job).status, (r.job).run_at - now() as wait from mark_failed(%s, %s, 'x',"
            " p_base_ms => 1000, p_max_jitter_ms => 100) r",
            [job["id"], job["lease_token"]],
        )
        assert row["status"] == "failed"
        waits.append(row["wait"].total_seconds())
    for n, wait in enumerate(waits, start=1):
        assert 2 ** (n - 1) <= wait <= 2 ** (n - 1) + 0.1, waits


def test_mark_failed_last_attempt_goes_dead(conn: psycopg.Connection) -> None:
    enqueue(conn, max_attempts=2)
    for attempt in (1, 2):
        job = one(conn, "select (r.job).*, r.lease_token from claim_jobs_at(now() + interval '1 day', 'w1', 1) r")
        assert job["attempts"] == attempt
        last = one(conn, "select (r.job).*, r.already_recorded from mark_failed(%s, %s, 'still broken') r", [job["id"], job["lease_token"]])
    assert last["status"] == "dead"
    assert last["finished_at"] is not None
    assert last["attempts"] == last["max_attempts"] == 2
    assert rows(conn, "select (r.job).*, r.lease_token from claim_jobs_at(now() + interval '10 days', 'w1', 1) r") == []


def test_mark_failed_not_retryable_goes_dead_at_once(conn: psycopg.Connection) -> None:
    job = _claimed(conn)
    dead = db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token, error="bad payload", retryable=False)
    assert dead.status == "dead" and dead.attempts == 1 and dead.max_attempts == 5


def test_mark_failed_delay_is_capped(conn: psycopg.Connection) -> None:
    job = _claimed(conn)
    row = one(
        conn,
        "select (r.job).run_at - now() as wait from mark_failed(%s, %s, 'x', p_base_ms => 600000,"
        " p_max_delay_ms => 1500) r",
        [job.id, job.lease_token],
    )
    assert row["wait"].total_seconds() == 1.5


def test_mark_failed_keeps_long_errors_bounded(conn: psycopg.Connection) -> None:
    job = _claimed(conn)
    failed = db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token, error="e" * 50_000)
    assert len(failed.last_error) == 10_000


def test_backoff_delay_table_doubles_with_jitter_bounds(conn: psycopg.Connection) -> None:
    table = rows(
        conn,
        "select n, extract(epoch from backoff_delay(n, p_jitter => 0)) as lo,"
        " extract(epoch from backoff_delay(n, p_jitter => 1)) as hi from generate_series(1, 5) n",
    )
    assert [(float(r["lo"]), float(r["hi"])) for r in table] == [(2, 3), (4, 5), (8, 9), (16, 17), (32, 33)]
    huge = one(conn, "select extract(epoch from backoff_delay(500)) as s")
    assert float(huge["s"]) == 3600  # capped at backoff_max_delay_ms


def test_mark_succeeded_late_result_after_sweep_changes_nothing(conn: psycopg.Connection) -> None:
    job = _claimed(conn)
    conn.execute("select * from sweep_stuck_at(now() + interval '2 minutes')")
    retaken = _claimed_again(conn, "w2")
    assert retaken.attempts == 2 and retaken.lease_token != job.lease_token
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token)
    assert exc.value.sqlstate == "QL409"
    assert "ignored" in exc.value.diag.message_primary
    assert "w2" in exc.value.diag.message_detail
    assert snapshot(conn) == before
    with pytest.raises(psycopg.Error) as exc:
        db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token, error="late")
    assert exc.value.sqlstate == "QL409"
    assert snapshot(conn) == before


def _claimed_again(conn: psycopg.Connection, worker: str) -> db.ClaimedJob:
    job = db.claim_job(conn, worker_id=worker)
    assert job is not None
    return job


UNKNOWN = "'00000000-0000-0000-0000-000000000000'"


@pytest.mark.parametrize(
    "call, code",
    [
        ("select mark_succeeded(null, {token})", "QV400"),
        ("select mark_succeeded({id}, null)", "QV400"),
        ("select mark_succeeded(null, null)", "QV400"),
        (f"select mark_succeeded({UNKNOWN}, {{token}})", "QN404"),
        ("select mark_succeeded({id}, gen_random_uuid())", "QL409"),  # a made-up token
        ("select mark_succeeded({id}, {other_token})", "QL409"),  # another job's token
        ("select mark_succeeded({other}, {token})", "QL409"),  # ... the other way round
        ("select mark_failed({id}, {token}, null)", "QV400"),
        ("select mark_failed({id}, {token}, '  ')", "QV400"),
        ("select mark_failed({id}, {token}, 'x', null)", "QV400"),
        ("select mark_failed({id}, {token}, 'x', p_base_ms => -1)", "QV400"),
        ("select mark_failed({id}, null, 'x')", "QV400"),
        (f"select mark_failed({UNKNOWN}, {{token}}, 'x')", "QN404"),
        ("select mark_failed({id}, gen_random_uuid(), 'x')", "QL409"),
        ("select mark_failed({id}, {other_token}, 'x', false)", "QL409"),
        ("select release_job({id}, null)", "QV400"),
        ("select release_job({id}, {other_token})", "QL409"),
        ("select backoff_delay(0)", "QV400"),
        ("select backoff_delay(null)", "QV400"),
        ("select backoff_delay(1, -5)", "QV400"),
        ("select backoff_delay(1, p_jitter => 2)", "QV400"),
    ],
)
def test_mark_bad_input_raises_and_changes_nothing(conn: psycopg.Connection, call: str, code: str) -> None:
    job = _claimed(conn)
    other = _claimed(conn)
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(call.format(id=f"'{job.id}'", token=f"'{job.lease_token}'::uuid", other=f"'{other.id}'",
                                 other_token=f"'{other.lease_token}'::uuid"))
    assert exc.value.sqlstate == code
    assert exc.value.diag.message_primary
    assert snapshot(conn) == before


@pytest.mark.parametrize("call", [
    "select mark_succeeded({id}, 'w1', 1)",
    "select mark_failed({id}, 'w1', 1, 'x')",
    "select release_job({id}, 'w1', 1, 'x')",
    "select claim_job('w1', null, null, now())",
    "select sweep_stuck(now())",
])
def test_mark_the_old_worker_and_attempt_forms_are_gone(conn: psycopg.Connection, call: str) -> None:
    """A worker id and an attempt number no longer speak for an attempt, and a role's claim or sweep
    takes no time: those calls match no function (42883)."""
    job = _claimed(conn)
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(call.format(id=f"'{job.id}'"))
    assert exc.value.sqlstate == "42883"
    assert snapshot(conn) == before


def test_mark_succeeded_repeated_with_the_same_token_answers_already_recorded(conn: psycopg.Connection) -> None:
    # A retry after a lost reply: the first call committed, the second is answered, not refused.
    job = _claimed(conn)
    first = db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token)
    assert (first.status, first.already_recorded) == ("succeeded", False)
    before = snapshot(conn)
    again = db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token)
    assert (again.status, again.attempts, again.already_recorded) == ("succeeded", 1, True)
    assert again.finished_at == first.finished_at
    assert snapshot(conn) == before


@pytest.mark.parametrize("token", ["made-up", "other job's"])
def test_mark_succeeded_on_a_job_another_token_finished_raises_ql409(conn: psycopg.Connection, token: str) -> None:
    job = _claimed(conn)
    other = _claimed(conn)
    db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token)
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        db.mark_succeeded(conn, job_id=job.id, lease_token=uuid.uuid4() if token == "made-up" else other.lease_token)
    assert exc.value.sqlstate == "QL409"
    assert snapshot(conn) == before


def test_mark_succeeded_after_the_attempt_failed_raises_ql409(conn: psycopg.Connection) -> None:
    job = _claimed(conn)
    db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token, error="boom", base_ms=60_000)
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token)
    assert exc.value.sqlstate == "QL409"
    assert snapshot(conn) == before


@pytest.mark.parametrize("retryable, status", [(True, "failed"), (False, "dead")])
def test_mark_failed_repeated_with_the_same_error_answers_already_recorded(
        conn: psycopg.Connection, retryable: bool, status: str) -> None:
    job = _claimed(conn)
    error = "render crashed " + "x" * 20_000  # longer than what is kept: the function compares its own cut
    first = db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token, error=error, retryable=retryable)
    assert (first.status, first.already_recorded) == (status, False)
    before = snapshot(conn)
    again = db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token, error=error, retryable=retryable)
    assert (again.status, again.run_at, again.already_recorded) == (status, first.run_at, True)
    assert snapshot(conn) == before


def test_mark_failed_repeated_after_the_retry_was_claimed_answers_already_recorded(
        conn: psycopg.Connection) -> None:
    job = _claimed(conn)
    db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token, error="boom", base_ms=0, max_jitter_ms=0)
    retaken = _claimed_again(conn, "w2")
    assert retaken.id == job.id and retaken.attempts == 2
    before = snapshot(conn)
    again = db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token, error="boom")
    # The answer is the job as it is now: attempt 2, held by w2.
    assert (again.already_recorded, again.status, again.attempts, again.locked_by) == (True, "processing", 2, "w2")
    assert snapshot(conn) == before
    # The first attempt's token does not speak for the second.
    with pytest.raises(psycopg.Error) as exc:
        db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token)
    assert exc.value.sqlstate == "QL409"
    assert snapshot(conn) == before


@pytest.mark.parametrize("token, error", [("same", "another error"), ("made-up", "boom"), ("other job's", "boom")])
def test_mark_failed_repeated_with_another_error_or_token_raises_ql409(
        conn: psycopg.Connection, token: str, error: str) -> None:
    job = _claimed(conn)
    other = _claimed(conn)
    db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token, error="boom")
    before = snapshot(conn)
    presented = {"same": job.lease_token, "made-up": uuid.uuid4(), "other job's": other.lease_token}[token]
    with pytest.raises(psycopg.Error) as exc:
        db.mark_failed(conn, job_id=job.id, lease_token=presented, error=error)
    assert exc.value.sqlstate == "QL409"
    assert snapshot(conn) == before


def test_mark_failed_after_the_attempt_succeeded_raises_ql409(conn: psycopg.Connection) -> None:
    job = _claimed(conn)
    db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token)
    with pytest.raises(psycopg.Error) as exc:
        db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token, error="boom")
    assert exc.value.sqlstate == "QL409"


def test_release_job_repeated_answers_already_recorded(conn: psycopg.Connection) -> None:
    job = _claimed(conn)
    first = db.release_job(conn, job_id=job.id, lease_token=job.lease_token, reason="stopping")
    assert (first.status, first.max_attempts, first.already_recorded) == ("pending", 6, False)
    before = snapshot(conn)
    again = db.release_job(conn, job_id=job.id, lease_token=job.lease_token, reason="stopping")
    assert (again.status, again.max_attempts, again.already_recorded) == ("pending", 6, True)  # not 7
    assert snapshot(conn) == before


def test_release_job_after_a_sweep_or_with_another_token_raises_ql409(conn: psycopg.Connection) -> None:
    job = _claimed(conn)
    enqueue(conn)
    other = db.claim_job(conn, worker_id="w2", lease_ms=600_000)  # not swept: its token is live
    assert other is not None
    conn.execute("select * from sweep_stuck_at(now() + interval '2 minutes')")  # abandoned, but not handed back
    before = snapshot(conn)
    for token in (job.lease_token, uuid.uuid4(), other.lease_token):
        with pytest.raises(psycopg.Error) as exc:
            db.release_job(conn, job_id=job.id, lease_token=token, reason="stopping")
        assert exc.value.sqlstate == "QL409"
    assert snapshot(conn) == before


def test_mark_succeeded_after_a_hand_back_raises_ql409(conn: psycopg.Connection) -> None:
    job = _claimed(conn)
    db.release_job(conn, job_id=job.id, lease_token=job.lease_token, reason="stopping")
    with pytest.raises(psycopg.Error) as exc:
        db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token)
    assert exc.value.sqlstate == "QL409"


@pytest.mark.parametrize("call", [
    "select (r.job).*, r.already_recorded from mark_succeeded('00000000-0000-0000-0000-000000000000', gen_random_uuid()) r",
    "select (r.job).*, r.already_recorded from mark_failed('00000000-0000-0000-0000-000000000000', gen_random_uuid(), 'x') r",
    "select (r.job).*, r.already_recorded from release_job('00000000-0000-0000-0000-000000000000', gen_random_uuid()) r",
])
def test_mark_unknown_job_still_raises_qn404(conn: psycopg.Connection, call: str) -> None:
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(call)
    assert exc.value.sqlstate == "QN404"


def test_mark_unknown_job_with_a_real_token_raises_qn404(conn: psycopg.Connection) -> None:
    """A real token with a job id it was not issued for: no such job is QN404, whatever the token."""
    job = _claimed(conn)
    with pytest.raises(psycopg.Error) as exc:
        db.mark_succeeded(conn, job_id=uuid.UUID(int=0), lease_token=job.lease_token)
    assert exc.value.sqlstate == "QN404"
