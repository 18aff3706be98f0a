"""GET /api/schedules, POST /api/schedules/:name/pause and /resume (every response checked against the
OpenAPI document by the client)."""
from __future__ import annotations

from datetime import datetime

import psycopg
import pytest
from flask.testing import FlaskClient

from pgqw import db
from tests.helpers import rows


def test_schedules_list_gives_each_schedule_with_its_next_slot(client: FlaskClient, conn: psycopg.Connection) -> None:
    db.set_schedule(conn, name="nightly", task_type="noop", cron="0 3 * * *", payload={"n": 1}, queue="night",
                    priority=2, catch_up="all")
    db.register_schedules(conn, task_types=["noop"], schedules=[{"name": "every-5", "task_type": "noop",
                                                                 "cron": "*/5 * * * *"}])
    r = client.get("/api/schedules")
    assert r.status_code == 200
    found = r.get_json()["data"]["schedules"]
    assert [s["name"] for s in found] == ["every-5", "nightly"]
    nightly = found[1]
    assert {k: nightly[k] for k in ("taskType", "cron", "payload", "queue", "priority", "catchUp", "paused",
                                    "lastSlot", "source")} == {
        "taskType": "noop", "cron": "0 3 * * *", "payload": {"n": 1}, "queue": "night", "priority": 2,
        "catchUp": "all", "paused": False, "lastSlot": None, "source": "sql"}
    assert nightly["nextSlot"].endswith("T03:00:00.000Z")
    next_5 = datetime.fromisoformat(found[0]["nextSlot"])
    assert next_5.minute % 5 == 0 and next_5 > datetime.fromisoformat(found[0]["createdAt"])


def test_schedules_pause_and_resume_answer_the_schedule_and_are_idempotent(
        client: FlaskClient, conn: psycopg.Connection) -> None:
    db.set_schedule(conn, name="s.1", task_type="noop", cron="@hourly")
    for _ in range(2):
        r = client.post("/api/schedules/s.1/pause")
        assert r.status_code == 200
        data = r.get_json()["data"]
        assert (data["name"], data["paused"], data["nextSlot"]) == ("s.1", True, None)
    for _ in range(2):
        r = client.post("/api/schedules/s.1/resume")
        assert r.status_code == 200
        data = r.get_json()["data"]
        assert data["paused"] is False and data["nextSlot"].endswith(":00:00.000Z")
    assert rows(conn, "select paused from schedules") == [{"paused": False}]


@pytest.mark.parametrize("path", [
    "/api/schedules/ghost/pause", "/api/schedules/ghost/resume", "/api/schedules/a%20b/pause",
    "/api/schedules/%00/resume", "/api/schedules/" + "x" * 101 + "/pause",
])
def test_schedules_unknown_name_is_404_in_the_envelope_and_changes_nothing(
        client: FlaskClient, conn: psycopg.Connection, path: str) -> None:
    db.set_schedule(conn, name="kept", task_type="noop", cron="@daily")
    before = rows(conn, "select * from schedules")
    r = client.post(path)
    assert r.status_code == 404
    assert r.get_json()["error"]["code"] == "schedule_not_found"
    assert rows(conn, "select * from schedules") == before


def test_schedules_routes_take_no_other_method(client: FlaskClient) -> None:
    assert client.post("/api/schedules").status_code == 405
    assert client.get("/api/schedules/x/pause").status_code == 405
