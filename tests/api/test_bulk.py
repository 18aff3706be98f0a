"""POST /api/jobs/bulk/retry and /api/jobs/bulk/cancel: every job a filter matches, in bounded calls each
its own transaction (db.retry_dead_all, db.cancel_all, on an autocommit connection of the API's pool);
200 {"changed": n}. No filter is a 400 unless {"all": true}; a bad filter is a 400, never a 500."""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from pgqw import db
from tests.api import states
from tests.helpers import LISTING, job_row, rows


def test_bulk_retry_retries_the_dead_jobs_the_filters_match(client: FlaskClient, conn: psycopg.Connection) -> None:
    mine = [states.dead(conn, errors=("printer on fire",), queue="q-print") for _ in range(2)]
    other_error = states.dead(conn, errors=("out of paper",), queue="q-print")
    elsewhere = states.dead(conn, errors=("printer on fire",))
    waiting = states.pending(conn, queue="q-print")
    r = client.post("/api/jobs/bulk/retry", json={"queue": "q-print", "error": "PRINTER"})
    assert r.status_code == 200 and r.get_json() == {"data": {"changed": 2}}
    assert [job_row(conn, j.id)["status"] for j in mine] == ["pending", "pending"]
    assert job_row(conn, other_error.id)["status"] == "dead" and job_row(conn, elsewhere.id)["status"] == "dead"
    assert job_row(conn, waiting.id)["status"] == "pending"
    # Again: nothing left to retry.
    assert client.post("/api/jobs/bulk/retry", json={"queue": "q-print", "error": "printer"}).get_json() == {
        "data": {"changed": 0}}


def test_bulk_retry_by_time_workflow_and_batch(client: FlaskClient, conn: psycopg.Connection) -> None:
    batch = client.post("/api/batches", json={"jobs": [{"type": "listing_flyer", "payload": LISTING,
                                                        "queue": f"q-{n}"} for n in range(2)]}).get_json()["data"]
    for job in batch["jobs"]:
        claimed = db.claim_job(conn, worker_id="w", queues=[job["queue"]])
        assert claimed is not None
        db.mark_failed(conn, job_id=claimed.id, lease_token=claimed.lease_token, error="boom", retryable=False)
    outside = states.dead(conn)
    now = datetime.now(timezone.utc)
    later = {"since": (now + timedelta(hours=1)).isoformat(), "until": (now + timedelta(hours=2)).isoformat()}
    assert client.post("/api/jobs/bulk/retry", json=later).get_json()["data"]["changed"] == 0
    r = client.post("/api/jobs/bulk/retry", json={"batchId": batch["id"], "since": (now - timedelta(hours=1)).isoformat()})
    assert r.get_json()["data"]["changed"] == 2
    assert job_row(conn, outside.id)["status"] == "dead"
    assert client.post("/api/jobs/bulk/retry", json={"workflowId": str(uuid.uuid4())}).get_json()["data"] == {
        "changed": 0}


def test_bulk_retry_all_retries_every_dead_job(client: FlaskClient, conn: psycopg.Connection) -> None:
    dead = [states.dead(conn) for _ in range(3)]
    r = client.post("/api/jobs/bulk/retry", json={"all": True})
    assert r.status_code == 200 and r.get_json()["data"]["changed"] == 3
    assert {job_row(conn, j.id)["status"] for j in dead} == {"pending"}


def test_bulk_cancel_cancels_waiting_jobs_and_asks_running_ones_to_stop(
    client: FlaskClient, conn: psycopg.Connection
) -> None:
    # In this order, so each claim of the states takes its own job: the failed one is due in an hour.
    failed = states.failed(conn, queue="q-bulk")
    running = states.processing(conn, queue="q-bulk")
    done = states.succeeded(conn, queue="q-bulk")
    pending = states.pending(conn, queue="q-bulk")
    elsewhere = states.pending(conn)
    r = client.post("/api/jobs/bulk/cancel", json={"queue": "q-bulk"})
    assert r.status_code == 200 and r.get_json()["data"]["changed"] == 3
    assert job_row(conn, pending.id)["status"] == "cancelled" and job_row(conn, failed.id)["status"] == "cancelled"
    assert job_row(conn, running.id)["status"] == "processing"  # asked to stop: its worker ends it
    assert job_row(conn, done.id)["status"] == "succeeded" and job_row(conn, elsewhere.id)["status"] == "pending"
    # A running job already asked is not counted again.
    assert client.post("/api/jobs/bulk/cancel", json={"queue": "q-bulk"}).get_json()["data"]["changed"] == 0


def test_bulk_cancel_by_status_and_type(client: FlaskClient, conn: psycopg.Connection) -> None:
    failed = states.failed(conn, queue="q-s")
    pending = states.pending(conn, queue="q-s")
    noop = states.pending(conn, type="noop", payload={}, queue="q-s")
    r = client.post("/api/jobs/bulk/cancel", json={"statuses": ["failed"]})
    assert r.get_json()["data"]["changed"] == 1 and job_row(conn, failed.id)["status"] == "cancelled"
    r = client.post("/api/jobs/bulk/cancel", json={"type": "noop", "statuses": ["pending", "blocked"]})
    assert r.get_json()["data"]["changed"] == 1 and job_row(conn, noop.id)["status"] == "cancelled"
    assert job_row(conn, pending.id)["status"] == "pending"


def test_bulk_cancel_of_a_workflow_cancels_its_blocked_jobs(client: FlaskClient, conn: psycopg.Connection) -> None:
    root = states.pending(conn)
    child = db.enqueue_job(conn, type="listing_flyer", payload=dict(LISTING), idempotency_key="child",
                           depends_on=[root.id])
    assert child.status == "blocked"
    r = client.post("/api/jobs/bulk/cancel", json={"workflowId": str(root.id)})  # the root is named by its id
    # Cancelling the root cancels its blocked child with it; the child is counted only when the call
    # reached it first.
    assert r.status_code == 200 and 1 <= r.get_json()["data"]["changed"] <= 2
    assert {job_row(conn, j)["status"] for j in (root.id, child.id)} == {"cancelled"}


def test_bulk_cancel_goes_past_one_call_of_1000(client: FlaskClient, conn: psycopg.Connection) -> None:
    """More jobs than one bounded call takes: the route repeats the call, each committed on its own."""
    db.enqueue_jobs(conn, jobs=[{"type": "noop", "payload": {}, "idempotency_key": f"many-{n}", "queue": "q-many"}
                                for n in range(1205)])
    r = client.post("/api/jobs/bulk/cancel", json={"queue": "q-many"})
    assert r.status_code == 200 and r.get_json()["data"]["changed"] == 1205
    assert rows(conn, "select status, count(*) as n from jobs group by status") == [{"status": "cancelled", "n": 1205}]


@pytest.mark.parametrize("action", ["retry", "cancel"])
@pytest.mark.parametrize("body", [{}, {"all": False}, {"type": None}], ids=["empty", "all-false", "null-filter"])
def test_bulk_without_a_filter_is_400(shared_client: FlaskClient, unchanged: None, action: str,
                                      body: dict[str, Any]) -> None:
    r = shared_client.post(f"/api/jobs/bulk/{action}", json=body)
    assert r.status_code == 400
    error = r.get_json()["error"]
    assert error["code"] == "filter_required" and "give at least one filter" in error["message"]


@pytest.mark.parametrize("action", ["retry", "cancel"])
@pytest.mark.parametrize("body, field", [
    ({"type": ""}, "type"),
    ({"type": 7}, "type"),
    ({"queue": "q" * 101}, "queue"),
    ({"queue": "nul\x00"}, "queue"),
    ({"error": "e" * 1001}, "error"),
    ({"since": "yesterday"}, "since"),
    ({"since": "2026-01-01T00:00:00"}, "since"),  # no time zone
    ({"workflowId": "nope"}, "workflowId"),
    ({"batchId": 5}, "batchId"),
    ({"all": "yes"}, "all"),
    ({"id": str(uuid.uuid4())}, "id"),
], ids=["type-empty", "type-not-text", "queue-too-long", "queue-nul", "error-too-long", "since-not-a-time",
        "since-naive", "workflow-not-uuid", "batch-not-uuid", "all-not-bool", "unknown"])
def test_bulk_bad_filter_is_400_naming_it(shared_client: FlaskClient, unchanged: None, action: str,
                                          body: dict[str, Any], field: str) -> None:
    r = shared_client.post(f"/api/jobs/bulk/{action}", json=body)
    assert r.status_code == 400, r.get_json()
    error = r.get_json()["error"]
    assert error["code"] == "invalid_argument" and field in [d["field"] for d in error["details"]]


@pytest.mark.parametrize("statuses", [["dead"], ["succeeded"], [], "pending", ["nope"]])
def test_bulk_cancel_bad_statuses_is_400(shared_client: FlaskClient, unchanged: None, statuses: Any) -> None:
    r = shared_client.post("/api/jobs/bulk/cancel", json={"statuses": statuses})
    assert r.status_code == 400 and r.get_json()["error"]["details"][0]["field"].startswith("statuses")


def test_bulk_retry_takes_no_statuses(shared_client: FlaskClient, unchanged: None) -> None:
    r = shared_client.post("/api/jobs/bulk/retry", json={"statuses": ["dead"]})
    assert r.status_code == 400 and r.get_json()["error"]["details"][0]["field"] == "statuses"


@pytest.mark.parametrize("action", ["retry", "cancel"])
def test_bulk_since_not_before_until_is_the_databases_400(shared_client: FlaskClient, unchanged: None,
                                                          action: str) -> None:
    r = shared_client.post(f"/api/jobs/bulk/{action}", json={"since": "2026-01-02T00:00:00Z",
                                                             "until": "2026-01-01T00:00:00Z"})
    assert r.status_code == 400
    assert r.get_json()["error"]["details"]["sqlstate"] == "QV400"


@pytest.mark.parametrize("action", ["retry", "cancel"])
def test_bulk_body_must_be_a_json_object(shared_client: FlaskClient, unchanged: None, action: str) -> None:
    path = f"/api/jobs/bulk/{action}"
    assert shared_client.post(path, data="{", content_type="application/json").status_code == 400
    assert shared_client.post(path, data="all", content_type="text/plain").status_code == 415
    assert shared_client.post(path, json=["all"]).status_code == 400
    assert shared_client.post(path).status_code == 415
