"""Jobs driven into each status through the real stored functions (enqueue_job, claim_job, mark_*).

Each job gets a queue of its own, so claiming it cannot take another test job."""
from __future__ import annotations

import uuid
from typing import Any

import psycopg

from pgqw import db
from tests.helpers import LISTING

# A small but real PDF (one empty page): the result a listing_flyer job stores with its success.
PDF = (
    b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n"
    b"2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n"
    b"3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 595 842]>>endobj\n"
    b"trailer<</Root 1 0 R>>\n%%EOF\n"
)


def pending(conn: psycopg.Connection, **kwargs: Any) -> db.EnqueuedJob:
    kwargs.setdefault("type", "listing_flyer")
    kwargs.setdefault("payload", dict(LISTING))
    kwargs.setdefault("queue", f"q-{uuid.uuid4().hex[:12]}")
    return db.enqueue_job(conn, idempotency_key=f"k-{uuid.uuid4()}", **kwargs)


def processing(conn: psycopg.Connection, worker_id: str = "test-worker", **kwargs: Any) -> db.ClaimedJob:
    """Claimed by worker_id; the answer carries the lease token that alone may finish the attempt."""
    job = pending(conn, **kwargs)
    claimed = db.claim_job(conn, worker_id=worker_id, queues=[job.queue])
    assert claimed is not None and claimed.id == job.id
    return claimed


def failed(conn: psycopg.Connection, error: str = "renderer timed out", **kwargs: Any) -> db.Job:
    """Failed with attempts left, due again in an hour."""
    job = processing(conn, **kwargs)
    return db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token, error=error, retryable=True,
                          base_ms=3_600_000, max_jitter_ms=0)


def dead(conn: psycopg.Connection, errors: tuple[str, ...] = ("boom",), **kwargs: Any) -> db.Job:
    """Dead after len(errors) failed attempts, each by its own worker; the last one not retryable."""
    job = pending(conn, max_attempts=len(errors) + 1, **kwargs)
    result: db.Job = job
    for n, error in enumerate(errors, start=1):
        claimed = db.claim_job(conn, worker_id=f"worker-{n}", queues=[job.queue])
        assert claimed is not None and claimed.id == job.id, "the job should be ready again"
        result = db.mark_failed(conn, job_id=job.id, lease_token=claimed.lease_token, error=error,
                                retryable=n < len(errors), base_ms=0, max_jitter_ms=0)
    assert result.status == "dead"
    return result


def succeeded(conn: psycopg.Connection, pdf: bytes | None = PDF, **kwargs: Any) -> db.Job:
    """Succeeded with the PDF as its result (stored by mark_succeeded, with the success); pdf=None:
    succeeded without a result."""
    job = processing(conn, **kwargs)
    return db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token,
                             result=("application/pdf", None, pdf) if pdf is not None else None)
