"""`pgqw prune`: deletes old finished jobs in batches and prints the count; bad input is one line."""
from __future__ import annotations

import psycopg
import pytest

from pgqw import db
from tests.helpers import enqueue, rows
from tests.test_cli import _pgqw


def _finished(conn: psycopg.Connection, status: str, days_ago: int) -> None:
    job = enqueue(conn, max_attempts=1)
    claimed = db.claim_job(conn, worker_id="w-cli")
    assert claimed is not None and claimed.id == job.id
    if status == "succeeded":
        db.mark_succeeded(conn, job_id=job.id, lease_token=claimed.lease_token)
    else:
        db.mark_failed(conn, job_id=job.id, lease_token=claimed.lease_token, error="boom", retryable=False)
    conn.execute("update jobs set finished_at = now() - make_interval(days => %s) where id = %s", [days_ago, job.id])


def test_cli_prune_deletes_in_batches_and_prints_the_count(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        for status, days in [("succeeded", 8), ("succeeded", 9), ("succeeded", 10), ("succeeded", 1), ("dead", 8)]:
            _finished(conn, status, days)
        enqueue(conn)
    done = _pgqw("prune", "--older-than", "7d", "--status", "succeeded", "--batch", "2",
                 env={"DATABASE_URL": db_url})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "pruned 3 jobs"
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert sorted(r["status"] for r in rows(conn, "select status from jobs")) == ["dead", "pending", "succeeded"]
    done = _pgqw("prune", "--older-than", "168h", env={"DATABASE_URL": db_url})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "pruned 1 jobs"


def test_cli_prune_has_help() -> None:
    done = _pgqw("prune", "--help")
    assert done.returncode == 0 and done.stdout.startswith("usage: pgqw prune")


@pytest.mark.parametrize("args, message", [
    (["prune"], "--older-than"),
    (["prune", "--older-than", "7 days"], "must be a whole number and a unit"),
    (["prune", "--older-than=-1d"], "must be a whole number and a unit"),
    (["prune", "--older-than", "7d", "--status", "pending"], "QV400: status 'pending' is not final"),
    (["prune", "--older-than", "7d", "--batch", "100001"], "QV400: batch must be between 1 and 100000"),
])
def test_cli_prune_bad_input_is_one_line_and_changes_nothing(db_url: str, args: list[str], message: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        _finished(conn, "succeeded", 30)
    done = _pgqw(*args, env={"DATABASE_URL": db_url})
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert len(rows(conn, "select id from jobs")) == 1
