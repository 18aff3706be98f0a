"""POST /api/jobs with timeoutMs: the job's own timeout, stored with it; out of range is a 422."""
from __future__ import annotations

import psycopg
import pytest
from flask.testing import FlaskClient

from pgqw import db
from pgqw.app.serialize import iso
from tests.api.test_create import BODY, post
from tests.helpers import job_row, snapshot


def test_create_job_with_timeout_ms_stores_the_jobs_own_timeout(client: FlaskClient, conn: psycopg.Connection) -> None:
    r = post(client, {**BODY, "timeoutMs": 1500})
    assert r.status_code == 202
    assert job_row(conn, r.get_json()["data"]["id"])["timeout_ms"] == 1500
    plain = post(client, key="key-2")
    assert plain.status_code == 202 and job_row(conn, plain.get_json()["data"]["id"])["timeout_ms"] is None


def test_job_and_attempt_answer_the_timeout_and_the_deadline(client: FlaskClient, conn: psycopg.Connection) -> None:
    job_id = post(client, {**BODY, "timeoutMs": 90_000}).get_json()["data"]["id"]
    assert client.get(f"/api/jobs/{job_id}").get_json()["data"]["timeoutMs"] == 90_000
    claimed = db.claim_job(conn, worker_id="w1")
    assert claimed is not None and str(claimed.id) == job_id and claimed.deadline_at is not None
    job = client.get(f"/api/jobs/{job_id}").get_json()["data"]
    [attempt] = client.get(f"/api/jobs/{job_id}/attempts").get_json()["data"]
    assert job["deadlineAt"] == attempt["deadlineAt"] == iso(claimed.deadline_at)


@pytest.mark.parametrize("timeout", [0, -1, 1.5, "1000", 2**31])
def test_create_job_with_a_bad_timeout_ms_is_refused_and_changes_nothing(
    client: FlaskClient, conn: psycopg.Connection, timeout: object
) -> None:
    before = snapshot(conn)
    r = post(client, {**BODY, "timeoutMs": timeout})
    assert r.status_code == 422
    assert [e["field"] for e in r.get_json()["error"]["details"]] == ["timeoutMs"]
    assert snapshot(conn) == before
