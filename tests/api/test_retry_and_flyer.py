"""POST /api/jobs/:id/retry (retry_dead) and GET /api/jobs/:id/flyer."""
from __future__ import annotations

import uuid
from typing import Callable

import psycopg
import pytest
from flask.testing import FlaskClient

from pgqw import db
from tests.api import states
from tests.helpers import job_row, snapshot

# ---- retry ----


def test_retry_dead_job_returns_202_and_the_job_pending_again(client: FlaskClient, conn: psycopg.Connection) -> None:
    job = states.dead(conn, errors=("a", "b"))
    r = client.post(f"/api/jobs/{job.id}/retry")
    assert r.status_code == 202
    got = r.get_json()["data"]
    assert r.headers["Location"] == f"/api/jobs/{job.id}"
    assert (got["status"], got["attempts"], got["finishedAt"]) == ("pending", 2, None)
    assert got["maxAttempts"] == job.max_attempts + 5  # queue_settings.retry_extra_attempts
    assert got["nextAttemptAt"] is not None
    assert got["lastError"] == "b"  # kept: it is still the latest error
    assert job_row(conn, job.id)["status"] == "pending"
    assert len(db.get_attempts(conn, job_id=job.id)) == 2  # the history is kept


def test_retried_job_can_be_claimed_again(client: FlaskClient, conn: psycopg.Connection) -> None:
    job = states.dead(conn)
    client.post(f"/api/jobs/{job.id}/retry")
    again = db.claim_job(conn, worker_id="w-again", queues=[job.queue])
    assert again is not None and again.id == job.id and again.attempts == 2


@pytest.mark.parametrize("make", [states.pending, states.processing, states.failed, states.succeeded],
                         ids=["pending", "processing", "failed", "succeeded"])
def test_retry_job_that_is_not_dead_returns_409(
    client: FlaskClient, conn: psycopg.Connection, make: Callable[[psycopg.Connection], db.Job]
) -> None:
    job = make(conn)
    before = snapshot(conn)
    r = client.post(f"/api/jobs/{job.id}/retry")
    assert r.status_code == 409
    error = r.get_json()["error"]
    assert error["code"] == "job_not_in_state" and error["details"]["sqlstate"] == "QS409"
    assert job.status in error["message"]
    assert snapshot(conn) == before


def test_retry_twice_the_second_is_409(client: FlaskClient, conn: psycopg.Connection) -> None:
    job = states.dead(conn)
    assert client.post(f"/api/jobs/{job.id}/retry").status_code == 202
    assert client.post(f"/api/jobs/{job.id}/retry").status_code == 409


def test_retry_unknown_job_returns_404(shared_client: FlaskClient, unchanged: None) -> None:
    r = shared_client.post(f"/api/jobs/{uuid.uuid4()}/retry")
    assert r.status_code == 404
    assert r.get_json()["error"] == {
        "code": "job_not_found", "message": r.get_json()["error"]["message"], "details": {"sqlstate": "QN404"}}


def test_retry_malformed_id_returns_404(shared_client: FlaskClient, unchanged: None) -> None:
    assert shared_client.post("/api/jobs/not-a-uuid/retry").status_code == 404


def test_retry_with_get_returns_405(client: FlaskClient, conn: psycopg.Connection) -> None:
    r = client.get(f"/api/jobs/{states.dead(conn).id}/retry")
    assert r.status_code == 405 and "POST" in r.headers["Allow"]


# ---- flyer ----

def test_flyer_of_a_succeeded_job_is_the_pdf(client: FlaskClient, conn: psycopg.Connection) -> None:
    job = states.succeeded(conn)
    r = client.get(f"/api/jobs/{job.id}/flyer")
    assert r.status_code == 200
    assert r.mimetype == "application/pdf"
    assert r.headers["Content-Disposition"] == f'inline; filename="flyer-{job.id}.pdf"'
    assert r.data == states.PDF


@pytest.mark.parametrize("make", [states.pending, states.processing, states.failed, states.dead],
                         ids=["pending", "processing", "failed", "dead"])
def test_flyer_before_the_job_succeeded_returns_404(
    client: FlaskClient, conn: psycopg.Connection, make: Callable[[psycopg.Connection], db.Job]
) -> None:
    job = make(conn)
    r = client.get(f"/api/jobs/{job.id}/flyer")
    assert r.status_code == 404
    error = r.get_json()["error"]
    assert error["code"] == "flyer_not_ready" and error["details"] == {"status": job.status}


def test_flyer_saved_but_job_not_yet_marked_succeeded_returns_404(
    client: FlaskClient, conn: psycopg.Connection
) -> None:
    """The worker stores the PDF, then marks the job; between the two the flyer is not served."""
    job = states.processing(conn)
    db.save_flyer(conn, job_id=job.id, pdf=states.PDF)
    assert client.get(f"/api/jobs/{job.id}/flyer").status_code == 404
    db.mark_succeeded(conn, job_id=job.id, worker_id=job.locked_by or "", attempt=job.attempts)
    assert client.get(f"/api/jobs/{job.id}/flyer").status_code == 200


def test_flyer_of_an_unknown_job_returns_404(shared_client: FlaskClient, unchanged: None) -> None:
    r = shared_client.get(f"/api/jobs/{uuid.uuid4()}/flyer")
    assert r.status_code == 404 and r.get_json()["error"]["code"] == "job_not_found"


def test_flyer_of_a_real_rendered_listing_is_a_readable_pdf(client: FlaskClient, conn: psycopg.Connection) -> None:
    import io

    import pypdf

    from pgqw.worker.flyer import render_flyer

    job = states.processing(conn)
    db.save_flyer(conn, job_id=job.id, pdf=render_flyer(job.payload, job_id=str(job.id),
                                                           flyer_url=f"http://x/api/jobs/{job.id}/flyer"))
    db.mark_succeeded(conn, job_id=job.id, worker_id=job.locked_by or "", attempt=job.attempts)
    r = client.get(f"/api/jobs/{job.id}/flyer")
    text = pypdf.PdfReader(io.BytesIO(r.data)).pages[0].extract_text()
    assert "3-bedroom apartment in" in text and "₦2,700,000" in text and str(job.id) in text
