"""GET /api/queues, POST /api/queues/:name/pause and /resume, PUT or POST /api/queues/:name/limit and /rate."""
from __future__ import annotations

from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from pgqw import db
from tests.helpers import enqueue, rows, snapshot


def queues_rows(conn: psycopg.Connection) -> list[dict[str, Any]]:
    return rows(conn, "select name, paused, max_running, jobs_per_second, rate_tokens, rate_refilled_at"
                      " from queues order by name")


def test_queues_pause_and_resume_answer_the_queue_and_are_idempotent(
    client: FlaskClient, conn: psycopg.Connection
) -> None:
    for n in range(2):  # a queue no job has named yet: made on request the first time
        r = client.post("/api/queues/emails/pause" + ("?create=true" if n == 0 else ""))
        assert r.status_code == 200
        assert r.get_json()["data"] == {"name": "emails", "paused": True, "maxRunning": None,
                                             "jobsPerSecond": None, "keyMaxRunning": None}
    enqueue(conn, queue="emails")
    assert db.claim_job(conn, worker_id="w") is None
    for _ in range(2):
        r = client.post("/api/queues/emails/resume")
        assert r.status_code == 200 and r.get_json()["data"]["paused"] is False
    assert db.claim_job(conn, worker_id="w") is not None


@pytest.mark.parametrize("method", ["put", "post"])
def test_queues_limit_sets_and_removes_the_limit(client: FlaskClient, conn: psycopg.Connection, method: str) -> None:
    r = getattr(client, method)("/api/queues/emails/limit", json={"max_running": 2, "create": True})
    assert r.status_code == 200
    assert r.get_json()["data"] == {"name": "emails", "paused": False, "maxRunning": 2,
                                         "jobsPerSecond": None, "keyMaxRunning": None}
    r = getattr(client, method)("/api/queues/emails/limit", json={"max_running": None})
    assert r.status_code == 200 and r.get_json()["data"]["maxRunning"] is None
    assert [(q["name"], q["paused"], q["max_running"]) for q in queues_rows(conn)] == [("emails", False, None)]


@pytest.mark.parametrize("method", ["put", "post"])
def test_queues_rate_sets_and_removes_the_rate(client: FlaskClient, conn: psycopg.Connection, method: str) -> None:
    client.put("/api/queues/emails/limit?create=true", json={"max_running": 3})
    r = getattr(client, method)("/api/queues/emails/rate", json={"jobs_per_second": 2.5})
    assert r.status_code == 200
    assert r.get_json()["data"] == {"name": "emails", "paused": False, "maxRunning": 3, "jobsPerSecond": 2.5,
                                    "keyMaxRunning": None}
    assert getattr(client, method)("/api/queues/emails/rate", json={"jobs_per_second": 1}).get_json()["data"][
        "jobsPerSecond"] == 1
    r = getattr(client, method)("/api/queues/emails/rate", json={"jobs_per_second": None})
    assert r.status_code == 200 and r.get_json()["data"]["jobsPerSecond"] is None
    [q] = queues_rows(conn)
    assert (q["max_running"], q["jobs_per_second"], q["rate_tokens"], q["rate_refilled_at"]) == (3, None, None, None)


def test_queues_rate_is_enforced_by_the_claim(client: FlaskClient, conn: psycopg.Connection) -> None:
    for _ in range(5):
        enqueue(conn, queue="emails")
    assert client.put("/api/queues/emails/rate", json={"jobs_per_second": 0.001}).status_code == 200
    assert len(db.claim_jobs(conn, worker_id="w", limit=10)) == 1  # a bucket of one, then one in 1000 s
    assert db.claim_jobs(conn, worker_id="w", limit=10) == []


def test_queues_list_gives_each_known_queue_with_its_numbers(client: FlaskClient, conn: psycopg.Connection) -> None:
    for _ in range(3):
        enqueue(conn, queue="emails")
    db.claim_job(conn, worker_id="w", queues=["emails"])
    client.put("/api/queues/emails/limit", json={"max_running": 4})
    client.put("/api/queues/emails/rate", json={"jobs_per_second": 0.5})
    client.post("/api/queues/reports/pause?create=true")
    r = client.get("/api/queues")
    assert r.status_code == 200
    found = {q["name"]: q for q in r.get_json()["data"]}
    assert sorted(found) == ["emails", "reports"]
    emails = found["emails"]
    assert (emails["paused"], emails["maxRunning"], emails["depth"], emails["running"]) == (False, 4, 2, 1)
    assert emails["jobsPerSecond"] == 0.5
    assert emails["oldestReadyAgeSeconds"] >= 0
    assert found["reports"] == {"name": "reports", "paused": True, "maxRunning": None, "jobsPerSecond": None,
                                "keyMaxRunning": None, "depth": 0, "running": 0, "oldestReadyAgeSeconds": 0}


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
    ("/api/queues/emails/rate", {"jobs_per_second": 0}),
    ("/api/queues/emails/rate", {"jobs_per_second": -1.5}),
    ("/api/queues/emails/rate", {"jobs_per_second": 1000000.5}),
    ("/api/queues/emails/rate", {"jobs_per_second": 0.0000001}),  # 7 decimal places: set_queue_rate's QV400
    ("/api/queues/emails/rate", {"jobs_per_second": 1 / 3}),
    ("/api/queues/emails/rate", {"jobs_per_second": "2"}),
    ("/api/queues/emails/rate", {"jobs_per_second": True}),
    ("/api/queues/emails/rate", {}),
    ("/api/queues/emails/rate", [2]),
    ("/api/queues/emails/rate", {"jobs_per_second": 2, "max_running": 1}),
    ("/api/queues/" + "q" * 101 + "/rate", {"jobs_per_second": 2}),
    ("/api/queues/" + "q" * 101 + "/pause", None),
    ("/api/queues/%20/resume", None),
    ("/api/queues/a%00b/pause", None),
])
def test_queues_bad_input_is_400_in_the_envelope_and_changes_nothing(
    client: FlaskClient, conn: psycopg.Connection, path: str, body: Any
) -> None:
    db.set_queue_limit(conn, queue="emails", max_running=7, create=True)
    db.set_queue_rate(conn, queue="emails", jobs_per_second=3)
    before = snapshot(conn) + queues_rows(conn)
    r = client.put(path, json=body) if path.endswith(("/limit", "/rate")) else client.post(path)
    assert r.status_code == 400, r.get_json()
    error = r.get_json()["error"]
    assert error["code"] == "invalid_argument" and error["message"]
    assert snapshot(conn) + queues_rows(conn) == before


@pytest.mark.parametrize("method, path, body", [
    ("post", "/api/queues/nosuchqueue/pause", None),
    ("post", "/api/queues/nosuchqueue/resume", None),
    ("put", "/api/queues/nosuchqueue/limit", {"max_running": 3}),
    ("put", "/api/queues/nosuchqueue/rate", {"jobs_per_second": 1}),
    ("put", "/api/queues/nosuchqueue/rate", {"jobs_per_second": 1, "create": False}),
    ("post", "/api/queues/nosuchqueue/pause?create=false", None),
])
def test_queues_never_seen_is_404_and_makes_nothing(client: FlaskClient, conn: psycopg.Connection, method: str,
                                                    path: str, body: Any) -> None:
    enqueue(conn, queue="emails")
    before = snapshot(conn) + queues_rows(conn)
    r = getattr(client, method)(path, json=body) if body is not None else getattr(client, method)(path)
    assert r.status_code == 404
    error = r.get_json()["error"]
    assert (error["code"], error["details"]["sqlstate"]) == ("queue_not_found", "QU404")
    assert "nosuchqueue" in error["message"] and "create" in error["details"]["hint"]
    assert snapshot(conn) + queues_rows(conn) == before


def test_queues_create_must_be_a_boolean(client: FlaskClient, conn: psycopg.Connection) -> None:
    assert client.post("/api/queues/q/pause?create=yes").status_code == 400
    assert client.put("/api/queues/q/limit", json={"max_running": 1, "create": "yes"}).status_code == 400
    assert queues_rows(conn) == []


def test_queues_rate_too_large_for_a_float_is_400(client: FlaskClient, conn: psycopg.Connection) -> None:
    """1e400 is valid JSON and reads as infinity: refused before the database."""
    r = client.put("/api/queues/emails/rate", data='{"jobs_per_second": 1e400}', content_type="application/json")
    assert r.status_code == 400 and r.get_json()["error"]["code"] == "invalid_argument"
    assert queues_rows(conn) == []


@pytest.mark.parametrize("path, data", [("/api/queues/emails/limit", "max_running=2"),
                                        ("/api/queues/emails/rate", "jobs_per_second=2")])
def test_queues_limit_and_rate_need_a_json_body(client: FlaskClient, path: str, data: str) -> None:
    r = client.put(path, data=data, content_type="application/x-www-form-urlencoded")
    assert r.status_code == 415
