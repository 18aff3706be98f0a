"""GET /api/queues, POST /api/queues/:name/pause and /resume, PUT or POST /api/queues/:name/limit."""
from __future__ import annotations

from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from pgqw import db
from tests.helpers import enqueue, rows, snapshot


def queues_rows(conn: psycopg.Connection) -> list[dict[str, Any]]:
    return rows(conn, "select name, paused, max_running from queues order by name")


def test_queues_pause_and_resume_answer_the_queue_and_are_idempotent(
    client: FlaskClient, conn: psycopg.Connection
) -> None:
    for _ in range(2):
        r = client.post("/api/queues/emails/pause")
        assert r.status_code == 200
        assert r.get_json()["data"] == {"name": "emails", "paused": True, "maxRunning": None}
    enqueue(conn, queue="emails")
    assert db.claim_job(conn, worker_id="w") is None
    for _ in range(2):
        r = client.post("/api/queues/emails/resume")
        assert r.status_code == 200 and r.get_json()["data"]["paused"] is False
    assert db.claim_job(conn, worker_id="w") is not None


@pytest.mark.parametrize("method", ["put", "post"])
def test_queues_limit_sets_and_removes_the_limit(client: FlaskClient, conn: psycopg.Connection, method: str) -> None:
    r = getattr(client, method)("/api/queues/emails/limit", json={"max_running": 2})
    assert r.status_code == 200
    assert r.get_json()["data"] == {"name": "emails", "paused": False, "maxRunning": 2}
    r = getattr(client, method)("/api/queues/emails/limit", json={"max_running": None})
    assert r.status_code == 200 and r.get_json()["data"]["maxRunning"] is None
    assert queues_rows(conn) == [{"name": "emails", "paused": False, "max_running": None}]


def test_queues_list_gives_each_known_queue_with_its_numbers(client: FlaskClient, conn: psycopg.Connection) -> None:
    for _ in range(3):
        enqueue(conn, queue="emails")
    db.claim_job(conn, worker_id="w", queues=["emails"])
    client.put("/api/queues/emails/limit", json={"max_running": 4})
    client.post("/api/queues/reports/pause")
    r = client.get("/api/queues")
    assert r.status_code == 200
    found = {q["name"]: q for q in r.get_json()["data"]}
    assert sorted(found) == ["emails", "reports"]
    emails = found["emails"]
    assert (emails["paused"], emails["maxRunning"], emails["depth"], emails["running"]) == (False, 4, 2, 1)
    assert emails["oldestReadyAgeSeconds"] >= 0
    assert found["reports"] == {"name": "reports", "paused": True, "maxRunning": None, "depth": 0, "running": 0,
                                "oldestReadyAgeSeconds": 0}


@pytest.mark.parametrize("path, body", [
    ("/api/queues/emails/limit", {"max_running": 0}),
    ("/api/queues/emails/limit", {"max_running": -3}),
    ("/api/queues/emails/limit", {"max_running": 1.5}),
    ("/api/queues/emails/limit", {"max_running": "2"}),
    ("/api/queues/emails/limit", {"max_running": True}),
    ("/api/queues/emails/limit", {"max_running": 2**31}),
    ("/api/queues/emails/limit", {}),
    ("/api/queues/emails/limit", [2]),
    ("/api/queues/emails/limit", {"max_running": 2, "extra": 1}),
    ("/api/queues/" + "q" * 101 + "/limit", {"max_running": 2}),
    ("/api/queues/%20%20/limit", {"max_running": 2}),
    ("/api/queues/" + "q" * 101 + "/pause", None),
    ("/api/queues/%20/resume", None),
    ("/api/queues/a%00b/pause", None),
])
def test_queues_bad_input_is_400_in_the_envelope_and_changes_nothing(
    client: FlaskClient, conn: psycopg.Connection, path: str, body: Any
) -> None:
    db.set_queue_limit(conn, queue="emails", max_running=7)
    before = snapshot(conn) + queues_rows(conn)
    r = client.put(path, json=body) if path.endswith("/limit") else client.post(path)
    assert r.status_code == 400, r.get_json()
    error = r.get_json()["error"]
    assert error["code"] == "invalid_argument" and error["message"]
    assert snapshot(conn) + queues_rows(conn) == before


def test_queues_limit_needs_a_json_body(client: FlaskClient) -> None:
    r = client.put("/api/queues/emails/limit", data="max_running=2",
                   content_type="application/x-www-form-urlencoded")
    assert r.status_code == 415
