"""Every row of the queue's tables, to prove that a refused call changed nothing; a result with
exactly its success; and jobs driven into each status (with the lease token of their claim).

tests.helpers.snapshot predates task types, workers and results; this one also covers job_results
(bytes as a digest), task_types and workers, the tables a result, a registration or a presence
would change.
"""
from __future__ import annotations

import uuid
from typing import Any

import psycopg

from pgqw import db
from tests.api.states import PDF
from tests.helpers import LISTING, rows


def snapshot(conn: psycopg.Connection) -> list[Any]:
    return [
        rows(conn, "select * from jobs order by id"),
        rows(conn, "select * from job_attempts order by job_id, attempt"),
        rows(conn, "select job_id, content_type, value, md5(data) as data_md5, created_at"
                   " from job_results order by job_id"),
        rows(conn, "select * from task_types order by name"),
        rows(conn, "select * from workers order by id"),
        rows(conn, "select * from queue_settings"),
    ]


def results_only_for_succeeded_jobs(conn: psycopg.Connection) -> None:
    """A result exists only with a success: no job_results row of a job in any other status."""
    strays = rows(conn, "select r.job_id, j.status from job_results r join jobs j on j.id = r.job_id"
                        " where j.status <> 'succeeded'")
    assert strays == [], f"results of jobs that did not succeed: {strays}"


def results_exactly_for_succeeded_jobs(conn: psycopg.Connection) -> None:
    """For tests whose every success carries a result: a result exists exactly when its job succeeded."""
    with_result = {r["job_id"] for r in rows(conn, "select job_id from job_results")}
    succeeded = {r["id"] for r in rows(conn, "select id from jobs where status = 'succeeded'")}
    assert with_result == succeeded, (
        f"results of jobs that did not succeed: {with_result - succeeded};"
        f" succeeded jobs without their result: {succeeded - with_result}")


# ---- jobs driven into each status through the stored functions, each in a queue of its own -------
# (tests/api/states.py does the same for the API's tests; these return the claim's lease token too.)

def pending(conn: psycopg.Connection, **kwargs: Any) -> db.EnqueuedJob:
    kwargs.setdefault("type", "listing_flyer")
    kwargs.setdefault("payload", dict(LISTING))
    kwargs.setdefault("queue", f"q-{uuid.uuid4().hex[:12]}")
    return db.enqueue_job(conn, idempotency_key=f"k-{uuid.uuid4()}", **kwargs)


def processing(conn: psycopg.Connection, worker_id: str = "test-worker", **kwargs: Any) -> db.ClaimedJob:
    job = pending(conn, **kwargs)
    claimed = db.claim_job(conn, worker_id=worker_id, queues=[job.queue])
    assert claimed is not None and claimed.id == job.id
    return claimed


def succeeded(conn: psycopg.Connection, pdf: bytes | None = PDF, **kwargs: Any) -> db.RecordedJob:
    """Succeeded with the PDF as its result; pdf=None: succeeded without a result."""
    job = processing(conn, **kwargs)
    return db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token,
                             result=("application/pdf", None, pdf) if pdf is not None else None)


def dead(conn: psycopg.Connection, errors: tuple[str, ...] = ("boom",), **kwargs: Any) -> db.RecordedJob:
    """Dead after len(errors) failed attempts, each by its own worker; the last one not retryable."""
    job = pending(conn, max_attempts=len(errors) + 1, **kwargs)
    result: db.RecordedJob | None = None
    for n, error in enumerate(errors, start=1):
        claimed = db.claim_job(conn, worker_id=f"worker-{n}", queues=[job.queue])
        assert claimed is not None and claimed.id == job.id, "the job should be ready again"
        result = db.mark_failed(conn, job_id=job.id, lease_token=claimed.lease_token, error=error,
                                retryable=n < len(errors), base_ms=0, max_jitter_ms=0)
    assert result is not None and result.status == "dead"
    return result
