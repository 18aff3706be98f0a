"""The trust boundary, seen from sessions logged in as the real roles.

Every worker logs in as the one role pgqw_worker, so grants cannot tell one worker's session from
another's: only the lease token a claim returned to its caller can. A session that knows a job's id
(from its own claims, from a log, or a guess) and may call every worker function still cannot finish,
fail, hand back or extend an attempt it did not claim, cannot read the tables that would tell it the
token's hash, and cannot claim or sweep as of another time. Every refused call changes nothing (all
the queue's rows compared before and after), and after every scenario a result exists exactly when its
job succeeded.
"""
from __future__ import annotations

import hashlib
import threading
import time
import uuid
from datetime import timedelta
from typing import Any, Callable, Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from pgqw import db
from tests.helpers import job_row, one, rows
from tests.sql.queue_state import pending, results_exactly_for_succeeded_jobs, snapshot

ROLES = ("pgqw_worker", "pgqw_api", "pgqw_admin")
RESULT = ("application/json", {"rendered": True}, None)


@pytest.fixture
def as_role(db_url: str) -> Iterator[Callable[..., psycopg.Connection]]:
    """as_role("pgqw_worker") → a new session logged in as that role (autocommit unless told)."""
    opened: list[psycopg.Connection] = []

    def connect(role: str, autocommit: bool = True) -> psycopg.Connection:
        c = psycopg.connect(make_conninfo(db_url, user=role), autocommit=autocommit)
        opened.append(c)
        return c

    yield connect
    for c in opened:
        c.close()


@pytest.fixture(autouse=True)
def _a_result_exactly_with_a_success(conn: psycopg.Connection) -> Iterator[None]:
    yield
    results_exactly_for_succeeded_jobs(conn)


def _claim(worker: psycopg.Connection, worker_id: str, queue: str, **kwargs: Any) -> db.ClaimedJob:
    job = db.claim_job(worker, worker_id=worker_id, queues=[queue], **kwargs)
    assert job is not None
    return job


def _refused(call: Callable[[], Any], code: str = "QL409") -> None:
    with pytest.raises(psycopg.Error) as exc:
        call()
    assert exc.value.sqlstate == code, exc.value


# ---- what a worker session can see ----------------------------------------------------------------

@pytest.mark.parametrize("table", ["jobs", "job_attempts", "job_results"])
def test_trust_a_worker_session_cannot_read_the_queues_tables(conn: psycopg.Connection, as_role, table: str) -> None:
    job = pending(conn)
    _claim(as_role("pgqw_worker"), "w-victim", job.queue)
    intruder = as_role("pgqw_worker")
    _refused(lambda: intruder.execute(f"select * from {table}"), "42501")
    _refused(lambda: intruder.execute("select lease_token_hash from job_attempts where job_id = %s", [job.id]),
             "42501")


def test_trust_only_a_claim_returns_a_token_and_no_function_returns_its_hash(conn: psycopg.Connection) -> None:
    """A token leaves the database once, in its claim's answer to its caller; no function answers with
    a token's hash. What a function answers with: its OUT columns, or the fields of the composite it
    returns (claimed_job: job, lease_token) and of the rows among them (the job's)."""
    returning = {r["proname"]: set(r["outs"]) for r in rows(
        conn, "select p.proname, coalesce(p.proargnames, '{}') || array("
              "    select a.attname::text from pg_type t join pg_attribute a on a.attrelid = t.typrelid"
              "     where t.oid = p.prorettype and a.attnum > 0 and not a.attisdropped"
              "    union all"
              "    select n.attname::text from pg_type t join pg_attribute a on a.attrelid = t.typrelid"
              "      join pg_type f on f.oid = a.atttypid join pg_attribute n on n.attrelid = f.typrelid"
              "     where t.oid = p.prorettype and a.attnum > 0 and n.attnum > 0 and not n.attisdropped) as outs"
              "  from pg_proc p where p.pronamespace = current_schema()::regnamespace")}
    assert {name for name, outs in returning.items() if "lease_token" in outs} == {
        "claim_job", "claim_jobs", "claim_jobs_at"}
    assert {name for name, outs in returning.items() if "lease_token_hash" in outs} == set()


def test_trust_the_hash_an_api_session_can_read_does_not_speak_for_the_attempt(
    conn: psycopg.Connection, as_role
) -> None:
    """pgqw_api reads job_attempts, hash included: neither the hash nor a token made from it holds
    the job, and pgqw_api may not call mark_succeeded anyway."""
    job = pending(conn)
    held = _claim(as_role("pgqw_worker"), "w-victim", job.queue)
    api = as_role("pgqw_api")
    digest = bytes(one(api, "select lease_token_hash as h from job_attempts where job_id = %s", [job.id])["h"])
    assert digest == hashlib.sha256(held.lease_token.bytes).digest()
    _refused(lambda: db.mark_succeeded(api, job_id=job.id, lease_token=uuid.UUID(bytes=digest[:16])), "42501")
    intruder = as_role("pgqw_worker")
    before = snapshot(conn)
    for forged in (uuid.UUID(bytes=digest[:16]), uuid.UUID(bytes=digest[16:])):
        _refused(lambda: db.mark_succeeded(intruder, job_id=job.id, lease_token=forged, result=RESULT))
    assert snapshot(conn) == before


# ---- a job id is not enough ---------------------------------------------------------------------------

def test_trust_with_only_a_job_id_a_worker_cannot_end_or_extend_another_sessions_attempt(
    conn: psycopg.Connection, as_role
) -> None:
    """The intruder knows the victim's job id and holds a claim of its own: with a made-up token, the
    nil token, or its own job's token, every call for the victim's job is refused (QL409) or extends
    nothing, and no row of any table changes. It cannot force the job dead either."""
    victim_job, own_job = pending(conn), pending(conn)
    victim = as_role("pgqw_worker")
    held = _claim(victim, "w-victim", victim_job.queue)
    intruder = as_role("pgqw_worker")
    own = _claim(intruder, "w-intruder", own_job.queue)
    before = snapshot(conn)

    for token in (uuid.uuid4(), uuid.UUID(int=0), own.lease_token):
        _refused(lambda: db.mark_succeeded(intruder, job_id=victim_job.id, lease_token=token, result=RESULT))
        _refused(lambda: db.mark_failed(intruder, job_id=victim_job.id, lease_token=token, error="forced",
                                        retryable=False))
        _refused(lambda: db.release_job(intruder, job_id=victim_job.id, lease_token=token, reason="taken"))
        assert db.mark_jobs_succeeded(intruder, done=[(victim_job.id, token)], results=[{"forged": 1}]) == []
        assert db.heartbeat(intruder, leases=[(victim_job.id, token)], lease_ms=86_400_000) == []
    assert snapshot(conn) == before
    row = job_row(conn, victim_job.id)
    assert (row["status"], row["locked_by"], row["lease_expires_at"]) == ("processing", "w-victim",
                                                                           held.lease_expires_at)

    # The victim's own token still works, from its own session.
    done = db.mark_succeeded(victim, job_id=victim_job.id, lease_token=held.lease_token, result=RESULT)
    assert (done.status, done.already_recorded) == ("succeeded", False)


def test_trust_a_token_of_one_job_does_not_work_for_another(conn: psycopg.Connection, as_role) -> None:
    """Both jobs claimed by the same session: each token speaks for its own job only, swapped they
    change nothing."""
    first_job, second_job = pending(conn), pending(conn)
    worker = as_role("pgqw_worker")
    first = _claim(worker, "w1", first_job.queue)
    second = _claim(worker, "w1", second_job.queue)
    before = snapshot(conn)
    for job, token in ((first, second.lease_token), (second, first.lease_token)):
        _refused(lambda: db.mark_succeeded(worker, job_id=job.id, lease_token=token, result=RESULT))
        _refused(lambda: db.mark_failed(worker, job_id=job.id, lease_token=token, error="boom"))
        _refused(lambda: db.release_job(worker, job_id=job.id, lease_token=token, reason="x"))
    swapped = [(first.id, second.lease_token), (second.id, first.lease_token)]
    assert db.mark_jobs_succeeded(worker, done=swapped, results=[1, 2]) == []
    assert db.heartbeat(worker, leases=swapped, lease_ms=600_000) == []
    assert snapshot(conn) == before

    done = db.mark_jobs_succeeded(worker, done=[(first.id, first.lease_token), (second.id, second.lease_token)],
                                  results=[1, 2])
    assert sorted(j.id for j in done) == sorted([first.id, second.id])


def test_trust_a_token_is_refused_once_the_sweep_handed_its_job_on(conn: psycopg.Connection, as_role) -> None:
    """A worker that stalled past its lease comes back with its token: the sweep has abandoned its
    attempt and another session holds a new one. Its success, failure, hand-back and heartbeat are
    refused and change nothing; the new attempt's token works."""
    job = pending(conn)
    stalled = as_role("pgqw_worker")
    old = _claim(stalled, "w-stalled", job.queue, lease_ms=1)
    assert [s.job_id for s in db.sweep_stuck_at(conn, now=old.lease_expires_at + timedelta(seconds=1))] == [job.id]
    successor = as_role("pgqw_worker")
    new = _claim(successor, "w-successor", job.queue)
    assert (new.attempts, new.lease_token != old.lease_token) == (2, True)
    before = snapshot(conn)
    _refused(lambda: db.mark_succeeded(stalled, job_id=job.id, lease_token=old.lease_token, result=RESULT))
    _refused(lambda: db.mark_failed(stalled, job_id=job.id, lease_token=old.lease_token, error="late",
                                    retryable=False))
    _refused(lambda: db.release_job(stalled, job_id=job.id, lease_token=old.lease_token, reason="late"))
    assert db.mark_jobs_succeeded(stalled, done=[(job.id, old.lease_token)], results=[RESULT[1]]) == []
    assert db.heartbeat(stalled, leases=[(job.id, old.lease_token)]) == []
    assert snapshot(conn) == before

    done = db.mark_succeeded(successor, job_id=job.id, lease_token=new.lease_token, result=RESULT)
    assert (done.status, done.attempts, done.already_recorded) == ("succeeded", 2, False)
    # Still refused once the job is done: the stale token never becomes a repeat of the success.
    _refused(lambda: db.mark_succeeded(stalled, job_id=job.id, lease_token=old.lease_token, result=RESULT))


# ---- the clock belongs to the owner --------------------------------------------------------------------

@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("call", [
    "select (r.job).*, r.lease_token from claim_jobs_at(now() + interval '1 day', 'w-early', 10) r",
    "select (r.job).*, r.lease_token from claim_jobs_at(now(), 'w-now', 1) r",
    "select * from sweep_stuck_at(now() + interval '1 day')",
    "select * from sweep_stuck_at(now())",
])
def test_trust_no_runtime_role_may_claim_or_sweep_as_of_another_time(
    conn: psycopg.Connection, as_role, role: str, call: str
) -> None:
    job = pending(conn)
    _claim(as_role("pgqw_worker"), "w-victim", job.queue, lease_ms=60_000)
    pending(conn)  # one ready job a claim could take
    session = as_role(role)
    before = snapshot(conn)
    _refused(lambda: session.execute(call), "42501")
    assert snapshot(conn) == before


@pytest.mark.parametrize("call", [
    "select (r.job).*, r.lease_token from claim_job('w1', p_now => now() + interval '1 day') r",
    "select (r.job).*, r.lease_token from claim_job('w1'::text, null::text[], null::integer, now() + interval '1 day', null::text[]) r",
    "select (r.job).*, r.lease_token from claim_jobs('w1', 10, p_now => now() + interval '1 day') r",
    "select (r.job).*, r.lease_token from claim_jobs('w1'::text, 10, null::text[], null::integer, now() + interval '1 day') r",
    "select * from sweep_stuck(now() + interval '1 day')",
    "select * from sweep_stuck(p_now => now() + interval '1 day')",
])
@pytest.mark.parametrize("role", ["pgqw_worker", "pgqw_admin"])
def test_trust_a_roles_claim_and_sweep_take_no_time(conn: psycopg.Connection, as_role, role: str, call: str) -> None:
    pending(conn)
    session = as_role(role)
    before = snapshot(conn)
    _refused(lambda: session.execute(call), "42883")
    assert snapshot(conn) == before


# ---- two sessions with the same token at once -------------------------------------------------------

def _wait_until_blocked(observer: psycopg.Connection, pid: int, by: int, thread: threading.Thread) -> None:
    """Returns once backend pid waits for a lock held by backend by: a condition read from the server,
    asked again until it holds (no sleep decides the order of the steps)."""
    deadline = time.monotonic() + 30
    while by not in one(observer, "select pg_blocking_pids(%s) as pids", [pid])["pids"]:
        assert thread.is_alive(), "the second call finished without waiting for the first"
        assert time.monotonic() < deadline, "the second call never waited for the first"


@pytest.mark.parametrize("first_ends", ["commit", "rollback"])
def test_trust_two_sessions_with_the_same_token_at_once_record_one_success_and_one_result(
    conn: psycopg.Connection, as_role, first_ends: str
) -> None:
    """A lost reply retried on a second connection while the first call is still open: session A has
    recorded the success (its transaction open, the job's row locked); B presents the same token and
    waits for A. A commits: B answers already_recorded, and A's result is the one stored. A rolls
    back: B records the success with its own result. Either way one success and one result row."""
    job = pending(conn)
    token = _claim(as_role("pgqw_worker"), "w1", job.queue).lease_token
    a, b = as_role("pgqw_worker", autocommit=False), as_role("pgqw_worker")
    first = db.mark_succeeded(a, job_id=job.id, lease_token=token, result=("application/json", "from A", None))
    assert first.already_recorded is False

    answers: list[db.RecordedJob] = []
    errors: list[BaseException] = []

    def second_call() -> None:
        try:
            answers.append(db.mark_succeeded(b, job_id=job.id, lease_token=token,
                                             result=("application/json", "from B", None)))
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    thread = threading.Thread(target=second_call)
    thread.start()
    _wait_until_blocked(conn, b.info.backend_pid, a.info.backend_pid, thread)
    if first_ends == "commit":
        a.commit()
    else:
        a.rollback()
    thread.join(30)
    assert not thread.is_alive() and errors == []
    [second] = answers
    assert (second.status, second.already_recorded) == ("succeeded", first_ends == "commit")
    stored = rows(conn, "select job_id, value from job_results")
    assert stored == [{"job_id": job.id, "value": "from A" if first_ends == "commit" else "from B"}]
    assert rows(conn, "select attempt, outcome from job_attempts where job_id = %s", [job.id]) == [
        {"attempt": 1, "outcome": "succeeded"}]
    assert job_row(conn, job.id)["status"] == "succeeded"
