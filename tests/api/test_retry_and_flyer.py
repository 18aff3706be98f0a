"""POST /api/jobs/:id/retry (retry_dead) and GET /api/jobs/:id/flyer (the PDF result of a listing_flyer job)."""
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


@pytest.mark.parametrize("make", [states.processing, states.failed, states.dead],
                         ids=["processing", "failed", "dead"])
def test_job_not_succeeded_has_no_stored_result_and_serves_none(
    client: FlaskClient, conn: psycopg.Connection, make: Callable[[psycopg.Connection], db.Job]
) -> None:
    """A result is stored only by mark_succeeded, with the success: a job that is running, failed or
    dead has no job_results row, and neither /flyer nor /result serves anything for it."""
    job = make(conn)
    assert db.get_result(conn, job_id=job.id) is None
    r = client.get(f"/api/jobs/{job.id}/flyer")
    assert r.status_code == 404 and r.get_json()["error"]["code"] == "flyer_not_ready"
    r = client.get(f"/api/jobs/{job.id}/result")
    assert r.status_code == 404 and r.get_json()["error"]["code"] == "result_not_ready"
    assert r.get_json()["error"]["details"] == {"status": job.status}


def test_flyer_is_served_from_the_moment_the_success_is_recorded(client: FlaskClient, conn: psycopg.Connection) -> None:
    """The PDF and the success commit together (mark_succeeded): there is no moment with one and not
    the other."""
    job = states.processing(conn)
    assert client.get(f"/api/jobs/{job.id}/flyer").status_code == 404
    db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token, result=("application/pdf", None, states.PDF))
    r = client.get(f"/api/jobs/{job.id}/flyer")
    assert r.status_code == 200 and r.data == states.PDF
    assert client.get(f"/api/jobs/{job.id}/result").data == states.PDF


def test_flyer_of_a_job_that_succeeded_without_a_pdf_returns_404(client: FlaskClient, conn: psycopg.Connection) -> None:
    job = states.succeeded(conn, pdf=None)
    r = client.get(f"/api/jobs/{job.id}/flyer")
    assert r.status_code == 404
    assert r.get_json()["error"]["code"] == "flyer_not_ready"
    assert r.get_json()["error"]["details"] == {"status": "succeeded"}


def test_result_of_a_job_that_failed_once_is_stored_by_its_retry(client: FlaskClient, conn: psycopg.Connection) -> None:
    """The failed attempt stored nothing; the attempt that succeeded stores the result."""
    job = states.pending(conn, max_attempts=3)
    first = db.claim_job(conn, worker_id="w-1", queues=[job.queue])
    assert first is not None
    db.mark_failed(conn, job_id=job.id, lease_token=first.lease_token, error="flaky", base_ms=0, max_jitter_ms=0)
    assert db.get_result(conn, job_id=job.id) is None
    second = db.claim_job(conn, worker_id="w-2", queues=[job.queue])
    assert second is not None and second.attempts == 2
    db.mark_succeeded(conn, job_id=job.id, lease_token=second.lease_token, result=("application/pdf", None, states.PDF))
    assert client.get(f"/api/jobs/{job.id}/flyer").data == states.PDF


def test_flyer_of_an_unknown_job_returns_404(shared_client: FlaskClient, unchanged: None) -> None:
    r = shared_client.get(f"/api/jobs/{uuid.uuid4()}/flyer")
    assert r.status_code == 404 and r.get_json()["error"]["code"] == "job_not_found"


def test_flyer_of_a_real_rendered_listing_is_a_readable_pdf(client: FlaskClient, conn: psycopg.Connection) -> None:
    import io

    import pypdf

    from pgqw.demo.flyer import render_flyer

    job = states.processing(conn)
    pdf = render_flyer(job.payload, job_id=str(job.id), flyer_url=f"http://x/api/jobs/{job.id}/flyer")
    db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token, result=("application/pdf", None, pdf))
    r = client.get(f"/api/jobs/{job.id}/flyer")
    text = pypdf.PdfReader(io.BytesIO(r.data)).pages[0].extract_text()
    assert "3-bedroom apartment in" in text and "₦2,700,000" in text and str(job.id) in text
