"""GET /api/jobs/{id} answers the job's progress (null until its handler reports one), and the OpenAPI
document lists the field, as the Job model declares it."""
from __future__ import annotations

import json

import psycopg
from flask.testing import FlaskClient

from pgqw import db
from tests.api import states


def _job(client: FlaskClient, job_id: object) -> dict:
    r = client.get(f"/api/jobs/{job_id}")
    assert r.status_code == 200, r.get_json()
    return r.get_json()["data"]


def test_get_job_answers_its_progress(client: FlaskClient, conn: psycopg.Connection) -> None:
    job = states.processing(conn)
    assert _job(client, job.id)["progress"] is None
    db.heartbeat(conn, leases=[(job.id, job.lease_token)], progress=[json.dumps({"done": 2, "of": 5})])
    assert _job(client, job.id)["progress"] == {"done": 2, "of": 5}


def test_openapi_job_has_progress(client: FlaskClient) -> None:
    doc = client.get("/api/openapi.json").get_json()
    job = doc["components"]["schemas"]["Job"]
    assert "progress" in job["properties"] and "progress" in job["required"]
