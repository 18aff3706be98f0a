"""POST /api/jobs/:id/cancel (cancel_job): 202 with the job (a dead one too), 409 for a job that succeeded or
was cancelled, 404 unknown."""
from __future__ import annotations

import uuid
from typing import Callable

import psycopg
import pytest
from flask.testing import FlaskClient

from pgqw import db
from tests.api import states
from tests.helpers import job_row, snapshot


@pytest.mark.parametrize("make", [states.pending, states.failed], ids=["pending", "failed"])
def test_cancel_waiting_job_returns_202_and_the_job_cancelled(
    client: FlaskClient, conn: psycopg.Connection, make: Callable[[psycopg.Connection], db.Job]
) -> None:
    job = make(conn)
    r = client.post(f"/api/jobs/{job.id}/cancel")
    assert r.status_code == 202
    assert r.headers["Location"] == f"/api/jobs/{job.id}"
    got = r.get_json()["data"]
    assert got["status"] == "cancelled" and got["finishedAt"] is not None
    assert job_row(conn, job.id)["status"] == "cancelled"
    counts = client.get("/api/stats").get_json()["data"]["counts"]
    assert counts["cancelled"] == 1
    listed = client.get("/api/jobs?status=cancelled").get_json()["data"]["jobs"]
    assert [j["id"] for j in listed] == [str(job.id)]


def test_cancel_processing_job_returns_202_with_the_job_still_processing(
    client: FlaskClient, conn: psycopg.Connection
) -> None:
    job = states.processing(conn)
    r = client.post(f"/api/jobs/{job.id}/cancel")
    assert r.status_code == 202
    assert r.get_json()["data"]["status"] == "processing"
    assert client.post(f"/api/jobs/{job.id}/cancel").status_code == 202  # asked again: the same


def test_cancel_dead_job_returns_202_and_the_job_cancelled(client: FlaskClient, conn: psycopg.Connection) -> None:
    """A person may give up on a dead job (cancel_job): it ends cancelled instead of waiting for a retry."""
    job = states.dead(conn)
    r = client.post(f"/api/jobs/{job.id}/cancel")
    assert r.status_code == 202 and r.get_json()["data"]["status"] == "cancelled"


@pytest.mark.parametrize("make", [states.succeeded], ids=["succeeded"])
def test_cancel_finished_job_returns_409(
    client: FlaskClient, conn: psycopg.Connection, make: Callable[[psycopg.Connection], db.Job]
) -> None:
    job = make(conn)
    before = snapshot(conn)
    r = client.post(f"/api/jobs/{job.id}/cancel")
    assert r.status_code == 409
    error = r.get_json()["error"]
    assert error["code"] == "job_not_in_state" and error["details"]["sqlstate"] == "QS409"
    assert job.status in error["message"]
    assert snapshot(conn) == before


def test_cancel_twice_the_second_is_409(client: FlaskClient, conn: psycopg.Connection) -> None:
    job = states.pending(conn)
    assert client.post(f"/api/jobs/{job.id}/cancel").status_code == 202
    r = client.post(f"/api/jobs/{job.id}/cancel")
    assert r.status_code == 409 and "cancelled" in r.get_json()["error"]["message"]


@pytest.mark.parametrize("job_id", [str(uuid.uuid4()), "not-a-uuid"])
def test_cancel_unknown_job_returns_404(shared_client: FlaskClient, unchanged: None, job_id: str) -> None:
    assert shared_client.post(f"/api/jobs/{job_id}/cancel").status_code == 404
