"""prune_jobs: deletes old finished jobs with their attempts and results, in bounded batches that skip
locked rows and never hold up a claim."""
from __future__ import annotations

import uuid
from datetime import timedelta

import psycopg
import pytest

from pgqw import db
from tests.helpers import enqueue, job_row, rows
from tests.sql.queue_state import snapshot


def finished(conn: psycopg.Connection, status: str = "succeeded", *, days_ago: float = 10) -> uuid.UUID:
    """A job run once and finished (succeeded with a result, or dead), finished `days_ago` days ago."""
    job = enqueue(conn, max_attempts=1)
    claimed = db.claim_job(conn, worker_id="w")
    assert claimed is not None and claimed.id == job.id
    if status == "succeeded":
        db.mark_succeeded(conn, job_id=job.id, lease_token=claimed.lease_token,
                          result=("application/json", {"ok": True}, None))
    else:
        db.mark_failed(conn, job_id=job.id, lease_token=claimed.lease_token, error="boom", retryable=False)
    # Back-dated as the owner (the test's superuser): only finished_at matters to prune_jobs.
    conn.execute("update jobs set finished_at = now() - make_interval(secs => %s) where id = %s",
                 [days_ago * 86400, job.id])
    assert job_row(conn, job.id)["status"] == status
    return job.id


def ids(conn: psycopg.Connection) -> set[uuid.UUID]:
    return {r["id"] for r in rows(conn, "select id from jobs")}


def test_prune_jobs_deletes_only_finished_jobs_older_than_the_age(conn: psycopg.Connection) -> None:
    old_ok, new_ok = finished(conn, days_ago=8), finished(conn, days_ago=6)
    old_dead = finished(conn, "dead", days_ago=8)
    pending = enqueue(conn).id
    conn.execute("update jobs set created_at = now() - interval '100 days' where id = %s", [pending])
    assert db.prune_jobs(conn, older_than=timedelta(days=7), statuses=["succeeded"]) == 1
    assert ids(conn) == {new_ok, old_dead, pending}
    assert db.prune_jobs(conn, older_than=timedelta(days=7)) == 1  # the default list takes dead too
    assert ids(conn) == {new_ok, pending}
    assert db.prune_jobs(conn, older_than=timedelta(days=7)) == 0
    assert old_ok not in ids(conn)


def test_prune_jobs_takes_attempts_and_results_with_their_jobs(conn: psycopg.Connection) -> None:
    gone, kept = finished(conn, days_ago=10), finished(conn, days_ago=1)
    assert rows(conn, "select count(*) as n from job_results where job_id = %s", [gone])[0]["n"] == 1
    assert db.prune_jobs(conn, older_than=timedelta(days=7)) == 1
    for table in ("job_attempts", "job_results"):
        left = {r["job_id"] for r in rows(conn, f"select job_id from {table}")}
        assert left == {kept}, table


def test_prune_jobs_deletes_at_most_a_batch_per_call(conn: psycopg.Connection) -> None:
    for _ in range(5):
        finished(conn)
    counts = []
    while (n := db.prune_jobs(conn, older_than=timedelta(days=1), batch=2)) > 0:
        counts.append(n)
    assert counts == [2, 2, 1]
    assert ids(conn) == set()


def test_prune_jobs_age_zero_takes_every_finished_job(conn: psycopg.Connection) -> None:
    finished(conn, days_ago=0.001)
    assert db.prune_jobs(conn, older_than=timedelta(0)) == 1


def test_prune_jobs_skips_rows_another_prune_holds(connect) -> None:
    """Step by step: A prunes one row in an open transaction; B does not wait, it takes the others."""
    a, b = connect(autocommit=False), connect()
    made = {finished(b) for _ in range(3)}
    b.execute("set lock_timeout = '5s'")  # a regression fails the test instead of hanging it
    assert db.prune_jobs(a, older_than=timedelta(days=1), batch=1) == 1
    assert db.prune_jobs(b, older_than=timedelta(days=1)) == 2  # A's row skipped, not waited for
    assert len(ids(b)) == 1 and ids(b) <= made  # A's row, until A commits
    a.commit()
    assert ids(b) == set()


def test_prune_jobs_skips_a_row_locked_by_another_session(connect) -> None:
    a, b = connect(autocommit=False), connect()
    held, free = finished(b), finished(b)
    a.execute("select id from jobs where id = %s for update", [held])  # e.g. retry_dead in progress
    b.execute("set lock_timeout = '5s'")
    assert db.prune_jobs(b, older_than=timedelta(days=1)) == 1
    assert ids(b) == {held}
    a.rollback()
    assert db.prune_jobs(b, older_than=timedelta(days=1)) == 1
    assert free not in ids(b) and ids(b) == set()


def test_prune_jobs_never_blocks_a_claim(connect) -> None:
    """Step by step: A's prune holds its rows in an open transaction; B claims and finishes at once."""
    a, b = connect(autocommit=False), connect()
    for _ in range(2):
        finished(b)
    ready = enqueue(b).id
    b.execute("set lock_timeout = '5s'")
    assert db.prune_jobs(a, older_than=timedelta(days=1)) == 2
    claimed = db.claim_job(b, worker_id="B")
    assert claimed is not None and claimed.id == ready
    db.mark_succeeded(b, job_id=claimed.id, lease_token=claimed.lease_token)
    assert db.enqueue_job(b, type="t", payload={}, idempotency_key="while-pruning").created
    a.commit()
    assert ready in ids(b) and len(ids(b)) == 2


@pytest.mark.parametrize(("call", "named"), [
    ("select prune_jobs(interval '-1 day')", "older_than"),
    ("select prune_jobs(null)", "older_than"),
    ("select prune_jobs(interval '1 day', array[]::text[])", "statuses"),
    ("select prune_jobs(interval '1 day', null)", "statuses"),
    ("select prune_jobs(interval '1 day', array['succeeded', 'pending'])", "pending"),
    ("select prune_jobs(interval '1 day', array['processing'])", "processing"),
    ("select prune_jobs(interval '1 day', array['failed'])", "failed"),
    ("select prune_jobs(interval '1 day', array['succeeded', null])", "null"),
    ("select prune_jobs(interval '1 day', p_batch => 0)", "batch"),
    ("select prune_jobs(interval '1 day', p_batch => 100001)", "batch"),
    ("select prune_jobs(interval '1 day', p_batch => null)", "batch"),
])
def test_prune_jobs_bad_input_raises_qv400_and_changes_nothing(
    conn: psycopg.Connection, call: str, named: str
) -> None:
    finished(conn)
    finished(conn, "dead")
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(call)
    assert exc.value.sqlstate == "QV400"
    assert named in exc.value.diag.message_primary
    assert snapshot(conn) == before


def test_prune_jobs_may_be_run_by_operators(conn: psycopg.Connection) -> None:
    finished(conn)
    conn.execute("set role pgqw_admin")
    assert db.prune_jobs(conn, older_than=timedelta(days=1)) == 1


@pytest.mark.parametrize("role", ["pgqw_api", "pgqw_worker"])
def test_prune_jobs_of_any_age_is_refused_to_the_api_and_worker_roles(conn: psycopg.Connection, role: str) -> None:
    conn.execute(f"set role {role}")
    with pytest.raises(psycopg.Error) as exc:
        db.prune_jobs(conn, older_than=timedelta(days=1))
    assert exc.value.sqlstate == "42501"


@pytest.mark.parametrize("status", db.STATUSES)
def test_prune_takes_exactly_the_final_statuses_pgqw_db_lists(conn: psycopg.Connection, status: str) -> None:
    """pgqw.db.FINAL (what the client waits for) is the database's own list of final statuses: prune_jobs
    takes each of them and refuses every other status (QV400)."""
    if status in db.FINAL:
        assert db.prune_jobs(conn, older_than=timedelta(days=1), statuses=[status]) == 0
    else:
        with pytest.raises(psycopg.Error) as exc:
            db.prune_jobs(conn, older_than=timedelta(days=1), statuses=[status])
        assert exc.value.sqlstate == "QV400"
