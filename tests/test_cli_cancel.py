"""pgqw cancel JOB: a full id or a unique prefix; one line; a non-zero exit on error."""
from __future__ import annotations

import psycopg

from pgqw import db
from tests.test_cli import _job_with_id, _pgqw


def test_cli_cancel_takes_a_prefix_and_cancels_a_pending_job(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        job = _job_with_id(conn, "c0ffee01-0000-4000-8000-000000000001")
    done = _pgqw("cancel", str(job.id)[:8], env={"DATABASE_URL": db_url})
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"job {job.id} cancelled\n"
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert db.get_job(conn, job_id=job.id).status == "cancelled"
    again = _pgqw("cancel", str(job.id), env={"DATABASE_URL": db_url})
    assert again.returncode != 0 and again.stdout == ""
    assert again.stderr.startswith("pgqw cancel: job ") and "is cancelled" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1, again.stderr


def test_cli_cancel_processing_job_says_it_is_asked_to_stop(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        job = _job_with_id(conn, "5a5a5a5a-0000-4000-8000-000000000001")
        assert db.claim_job(conn, worker_id="w-cli") is not None
    done = _pgqw("cancel", str(job.id), env={"DATABASE_URL": db_url})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"job {job.id} is processing: its worker is asked to stop")


def test_cli_cancel_unknown_job_is_one_line_and_fails(db_url: str) -> None:
    done = _pgqw("cancel", "0123abcd", env={"DATABASE_URL": db_url})
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.startswith("pgqw cancel: no job with an id starting 0123abcd")
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
