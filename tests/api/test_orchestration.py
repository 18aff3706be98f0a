"""Dependencies, workflows, batches, keys and limits per key over HTTP: POST /api/jobs with dependsOn,
runAnyway, serialKey, concurrencyKey and workflowId; GET /api/workflows/{id}; POST /api/batches and GET
/api/batches/{id}; PUT or POST /api/queues/{name}/key-limit. Bad input is a 4xx in the error envelope,
never a 500. (The rules themselves: tests/sql/test_dependencies.py, test_batches.py, test_key_limits.py.)"""
from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from pgqw import db
from tests.api import states
from tests.helpers import LISTING, job_row, rows

BODY: dict[str, Any] = {"type": "listing_flyer", "payload": LISTING}


def post_job(client: FlaskClient, **fields: Any):  # type: ignore[no-untyped-def]
    return client.post("/api/jobs", json={**BODY, **fields}, headers={"Idempotency-Key": f"k-{uuid.uuid4()}"})


def run(conn: psycopg.Connection, job_id: Any, *, succeed: bool = True) -> None:
    """Claims the job (alone in its queue) and ends its attempt: succeeded, or dead."""
    queue = job_row(conn, job_id)["queue"]
    claimed = db.claim_job(conn, worker_id="w", queues=[queue])
    assert claimed is not None and claimed.id == job_id
    if succeed:
        db.mark_succeeded(conn, job_id=claimed.id, lease_token=claimed.lease_token)
    else:
        db.mark_failed(conn, job_id=claimed.id, lease_token=claimed.lease_token, error="boom", retryable=False)


# ---- POST /api/jobs: dependencies, keys, workflow ----

def test_create_job_depending_on_another_is_blocked_in_its_parents_workflow(
    client: FlaskClient, conn: psycopg.Connection
) -> None:
    parent = post_job(client, queue="q-parent").get_json()["data"]
    assert parent["status"] == "pending" and parent["workflowId"] is None
    r = post_job(client, queue="q-child", dependsOn=[parent["id"]], serialKey="customer-7",
                 concurrencyKey="tenant-3")
    assert r.status_code == 202
    child = r.get_json()["data"]
    assert child["status"] == "blocked" and child["nextAttemptAt"] is None
    assert (child["workflowId"], child["batchId"], child["serialKey"], child["concurrencyKey"]) == (
        parent["id"], None, "customer-7", "tenant-3")
    assert client.get("/api/jobs?status=blocked").get_json()["data"]["jobs"][0]["id"] == child["id"]
    assert client.get("/api/stats").get_json()["data"]["counts"]["blocked"] == 1
    run(conn, uuid.UUID(parent["id"]))
    assert client.get(f"/api/jobs/{child['id']}").get_json()["data"]["status"] == "pending"


def test_create_job_run_anyway_and_workflow_id_are_stored(client: FlaskClient, conn: psycopg.Connection) -> None:
    workflow = uuid.uuid4()
    parent = post_job(client, queue="q-a", workflowId=str(workflow)).get_json()["data"]
    assert parent["workflowId"] == str(workflow)
    child = post_job(client, queue="q-b", dependsOn=[parent["id"]], runAnyway=True).get_json()["data"]
    assert child["workflowId"] == str(workflow)  # the parent's
    run(conn, uuid.UUID(parent["id"]), succeed=False)  # dead: a run_anyway child goes on
    assert client.get(f"/api/jobs/{child['id']}").get_json()["data"]["status"] == "pending"
    assert rows(conn, "select run_anyway from job_dependencies where job_id = %s", [child["id"]]) == [
        {"run_anyway": True}]


def test_create_job_depending_on_a_cancelled_job_is_created_cancelled(
    client: FlaskClient, conn: psycopg.Connection
) -> None:
    parent = states.pending(conn)
    db.cancel_job(conn, job_id=parent.id)
    r = post_job(client, dependsOn=[str(parent.id)])
    assert r.status_code == 202
    child = r.get_json()["data"]
    assert child["status"] == "cancelled" and str(parent.id) in child["lastError"]


def test_create_job_depending_on_an_unknown_job_is_422_and_makes_nothing(
    client: FlaskClient, conn: psycopg.Connection
) -> None:
    missing = uuid.uuid4()
    r = post_job(client, dependsOn=[str(missing)])
    assert r.status_code == 422
    error = r.get_json()["error"]
    assert error["code"] == "invalid_dependency" and error["details"]["sqlstate"] == "QW422"
    assert str(missing) in error["message"]
    assert rows(conn, "select count(*) as n from jobs") == [{"n": 0}]


@pytest.mark.parametrize("fields, field", [
    ({"dependsOn": "not-a-list"}, "dependsOn"),
    ({"dependsOn": ["not-a-uuid"]}, "dependsOn.0"),
    ({"dependsOn": [1]}, "dependsOn.0"),
    ({"dependsOn": [str(uuid.uuid4()) for _ in range(1001)]}, "dependsOn"),
    ({"runAnyway": "yes"}, "runAnyway"),
    ({"serialKey": ""}, "serialKey"),
    ({"serialKey": " "}, "serialKey"),
    ({"serialKey": "k" * 201}, "serialKey"),
    ({"serialKey": 7}, "serialKey"),
    ({"concurrencyKey": "nul\x00"}, "concurrencyKey"),
    ({"concurrencyKey": "k" * 201}, "concurrencyKey"),
    ({"workflowId": "nope"}, "workflowId"),
], ids=["depends-not-list", "depends-not-uuid", "depends-index", "depends-too-many", "run-anyway-not-bool",
        "serial-empty", "serial-blank", "serial-too-long", "serial-not-text", "concurrency-nul",
        "concurrency-too-long", "workflow-not-uuid"])
def test_create_job_bad_orchestration_field_is_422_naming_it(
    shared_client: FlaskClient, unchanged: None, fields: dict[str, Any], field: str
) -> None:
    r = post_job(shared_client, **fields)
    assert r.status_code == 422, r.get_json()
    error = r.get_json()["error"]
    assert error["code"] == "validation_failed"
    assert field in [d["field"] for d in error["details"]]


# ---- GET /api/workflows/{id} ----

def test_workflow_is_the_graph_of_its_jobs_with_their_parents(client: FlaskClient, conn: psycopg.Connection) -> None:
    root = post_job(client, queue="q-root").get_json()["data"]
    left = post_job(client, queue="q-left", dependsOn=[root["id"]]).get_json()["data"]
    right = post_job(client, queue="q-right", dependsOn=[root["id"]], runAnyway=True).get_json()["data"]
    join = post_job(client, queue="q-join", dependsOn=[left["id"], right["id"]]).get_json()["data"]
    r = client.get(f"/api/workflows/{root['id']}")
    assert r.status_code == 200
    data = r.get_json()["data"]
    assert data["id"] == root["id"]
    by_id = {j["id"]: j for j in data["jobs"]}
    assert [j["id"] for j in data["jobs"]][0] == root["id"] and [j["id"] for j in data["jobs"]][-1] == join["id"]
    assert set(by_id) == {root["id"], left["id"], right["id"], join["id"]}
    assert by_id[root["id"]]["dependsOn"] == [] and by_id[root["id"]]["status"] == "pending"
    assert by_id[right["id"]]["dependsOn"] == [root["id"]] and by_id[right["id"]]["runAnyway"] is True
    assert sorted(by_id[join["id"]]["dependsOn"]) == sorted([left["id"], right["id"]])
    assert {j["status"] for j in data["jobs"][1:]} == {"blocked"}
    assert by_id[join["id"]]["workflowId"] == root["id"] and by_id[join["id"]]["type"] == "listing_flyer"


@pytest.mark.parametrize("workflow_id", [str(uuid.uuid4()), "not-a-uuid"])
def test_workflow_unknown_is_404(shared_client: FlaskClient, unchanged: None, workflow_id: str) -> None:
    r = shared_client.get(f"/api/workflows/{workflow_id}")
    assert r.status_code == 404 and r.get_json()["error"]["code"] == "workflow_not_found"


def test_workflow_of_a_job_without_dependencies_is_that_job(client: FlaskClient, conn: psycopg.Connection) -> None:
    """workflow_jobs names a graph after its root: a lone job is a workflow of one."""
    job = states.pending(conn)
    r = client.get(f"/api/workflows/{job.id}")
    assert r.status_code == 200 and [j["id"] for j in r.get_json()["data"]["jobs"]] == [str(job.id)]


# ---- POST /api/batches, GET /api/batches/{id} ----

def batch_body(**extra: Any) -> dict[str, Any]:
    return {"jobs": [{**BODY, "queue": "q-first"}, {**BODY, "queue": "q-second", "dependsOn": [1]}],
            "callback": {"type": "noop", "payload": {"n": 1}, "queue": "q-callback", "priority": 5}, **extra}


def test_batch_enqueues_its_jobs_and_counts_them_until_the_callback(
    client: FlaskClient, conn: psycopg.Connection
) -> None:
    r = client.post("/api/batches", json=batch_body())
    assert r.status_code == 202
    data = r.get_json()["data"]
    first, second = data["jobs"]
    assert first["batchId"] == second["batchId"] == data["id"]
    assert (first["status"], second["status"]) == ("pending", "blocked")
    assert second["workflowId"] == first["id"]  # a parent given by its place in the batch
    r = client.get(f"/api/batches/{data['id']}")
    assert r.status_code == 200
    status = r.get_json()["data"]
    assert (status["id"], status["total"], status["callbackJobId"], status["finishedAt"]) == (data["id"], 2, None, None)
    assert status["counts"]["pending"] == 1 and status["counts"]["blocked"] == 1
    assert sum(status["counts"].values()) == 2
    run(conn, uuid.UUID(first["id"]))
    run(conn, uuid.UUID(second["id"]), succeed=False)
    status = client.get(f"/api/batches/{data['id']}").get_json()["data"]
    assert (status["counts"]["succeeded"], status["counts"]["dead"]) == (1, 1)
    assert status["finishedAt"] is not None and status["callbackJobId"] is not None
    callback = client.get(f"/api/jobs/{status['callbackJobId']}").get_json()["data"]
    assert (callback["type"], callback["queue"], callback["priority"]) == ("noop", "q-callback", 5)
    assert callback["payload"]["n"] == 1
    assert callback["payload"]["batch"] == {"id": data["id"], "total": 2, "succeeded": 1, "dead": 1,
                                            "cancelled": 0, "expired": 0}


def test_batch_with_the_same_idempotency_key_answers_the_same_batch(
    client: FlaskClient, conn: psycopg.Connection
) -> None:
    first = client.post("/api/batches", json=batch_body(idempotencyKey="nightly-2026-12-03"))
    assert first.status_code == 202
    again = client.post("/api/batches", json=batch_body(idempotencyKey="nightly-2026-12-03"))
    assert again.status_code == 200
    assert again.get_json()["data"]["id"] == first.get_json()["data"]["id"]
    assert sorted(j["id"] for j in again.get_json()["data"]["jobs"]) == sorted(
        j["id"] for j in first.get_json()["data"]["jobs"])
    assert rows(conn, "select count(*) as n from jobs") == [{"n": 2}]


def test_batch_without_a_callback_and_with_job_keys(client: FlaskClient, conn: psycopg.Connection) -> None:
    r = client.post("/api/batches", json={"jobs": [{**BODY, "idempotencyKey": "report-1", "serialKey": "s"}]})
    assert r.status_code == 202
    job = r.get_json()["data"]["jobs"][0]
    assert job_row(conn, job["id"])["idempotency_key"] == "report-1" and job["serialKey"] == "s"
    status = client.get(f"/api/batches/{r.get_json()['data']['id']}").get_json()["data"]
    assert status["total"] == 1 and status["callbackJobId"] is None


def test_batch_job_may_depend_on_a_job_outside_the_batch(client: FlaskClient, conn: psycopg.Connection) -> None:
    outside = states.pending(conn)
    r = client.post("/api/batches", json={"jobs": [{**BODY, "dependsOn": [str(outside.id)], "runAnyway": True}]})
    assert r.status_code == 202
    job = r.get_json()["data"]["jobs"][0]
    assert (job["status"], job["workflowId"]) == ("blocked", str(outside.id))
    graph = client.get(f"/api/workflows/{outside.id}").get_json()["data"]["jobs"]
    assert [(j["id"], j["runAnyway"]) for j in graph] == [(str(outside.id), False), (job["id"], True)]


@pytest.mark.parametrize("body, field", [
    ({"jobs": []}, "jobs"),
    ({}, "jobs"),
    ({"jobs": "x"}, "jobs"),
    ({"jobs": [7]}, "jobs.0"),
    ({"jobs": [{**BODY, "payload": {**LISTING, "bedrooms": "3"}}]}, "jobs.0.payload.bedrooms"),
    ({"jobs": [{**BODY, "priority": "high"}]}, "jobs.0.priority"),
    ({"jobs": [{**BODY, "dependsOn": [0]}]}, "jobs.0.dependsOn.0"),
    ({"jobs": [{**BODY, "idempotencyKey": "has space"}]}, "jobs.0.idempotencyKey"),
    ({"jobs": [BODY], "callback": {"payload": {}}}, "callback.type"),
    ({"jobs": [BODY], "callback": {"type": "noop", "payload": []}}, "callback.payload"),
    ({"jobs": [BODY], "callback": {"type": "noop", "extra": 1}}, "callback.extra"),
    ({"jobs": [BODY], "idempotencyKey": ""}, "idempotencyKey"),
    ({"jobs": [BODY], "other": 1}, "other"),
], ids=["empty", "no-jobs", "jobs-not-list", "job-not-object", "payload", "priority", "depends-zero",
        "job-key", "callback-type", "callback-payload", "callback-unknown", "batch-key", "unknown"])
def test_batch_bad_body_is_422_naming_the_field(shared_client: FlaskClient, unchanged: None,
                                                body: dict[str, Any], field: str) -> None:
    r = shared_client.post("/api/batches", json=body)
    assert r.status_code == 422, r.get_json()
    error = r.get_json()["error"]
    assert error["code"] == "validation_failed"
    assert field in [d["field"] for d in error["details"]], error["details"]


def test_batch_number_beyond_a_double_is_422_naming_it(shared_client: FlaskClient, unchanged: None) -> None:
    text = '{"jobs": [{"type": "noop", "payload": {"n": -1e400}}], "callback": {"type": "noop", "payload": {"n": 1e400}}}'
    r = shared_client.post("/api/batches", data=text, content_type="application/json")
    assert r.status_code == 422
    assert {d["field"] for d in r.get_json()["error"]["details"]} == {"jobs.0.payload.n", "callback.payload.n"}


@pytest.mark.parametrize("jobs", [
    [{**BODY, "dependsOn": [1]}],  # itself
    [{**BODY, "dependsOn": [2]}, BODY],  # a later one
    [{**BODY, "dependsOn": [str(uuid.uuid4())]}],  # nobody
], ids=["itself", "later", "unknown"])
def test_batch_impossible_dependency_is_422_and_makes_nothing(
    shared_client: FlaskClient, unchanged: None, jobs: list[dict[str, Any]]
) -> None:
    r = shared_client.post("/api/batches", json={"jobs": jobs})
    assert r.status_code == 422
    assert r.get_json()["error"]["code"] == "invalid_dependency"


def test_batch_callback_of_an_unregistered_type_is_422(shared_client: FlaskClient, unchanged: None) -> None:
    r = shared_client.post("/api/batches", json={"jobs": [BODY], "callback": {"type": "no_such_type"}})
    assert r.status_code == 422 and r.get_json()["error"]["code"] == "unknown_task_type"


def test_batch_body_not_json_is_400_or_415(shared_client: FlaskClient, unchanged: None) -> None:
    assert shared_client.post("/api/batches", data="{", content_type="application/json").status_code == 400
    assert shared_client.post("/api/batches", data="{}", content_type="text/plain").status_code == 415
    assert shared_client.post("/api/batches", json=[1]).status_code == 422


@pytest.mark.parametrize("batch_id", [str(uuid.uuid4()), "not-a-uuid"])
def test_batch_unknown_is_404(shared_client: FlaskClient, unchanged: None, batch_id: str) -> None:
    r = shared_client.get(f"/api/batches/{batch_id}")
    assert r.status_code == 404 and r.get_json()["error"]["code"] == "batch_not_found"


# ---- PUT or POST /api/queues/{name}/key-limit ----

@pytest.mark.parametrize("method", ["put", "post"])
def test_queue_key_limit_sets_and_removes_the_limit_per_key(
    client: FlaskClient, conn: psycopg.Connection, method: str
) -> None:
    r = getattr(client, method)("/api/queues/emails/key-limit", json={"maxRunning": 2, "create": True})
    assert r.status_code == 200
    assert r.get_json()["data"] == {"name": "emails", "paused": False, "maxRunning": None, "jobsPerSecond": None,
                                    "keyMaxRunning": 2}
    listed = {q["name"]: q for q in client.get("/api/queues").get_json()["data"]}
    assert listed["emails"]["keyMaxRunning"] == 2
    r = getattr(client, method)("/api/queues/emails/key-limit", json={"maxRunning": None})
    assert r.status_code == 200 and r.get_json()["data"]["keyMaxRunning"] is None
    assert rows(conn, "select key_max_running from queues where name = 'emails'") == [{"key_max_running": None}]


def test_queue_key_limit_holds_per_concurrency_key(client: FlaskClient, conn: psycopg.Connection) -> None:
    client.put("/api/queues/tenants/key-limit?create=true", json={"maxRunning": 1})
    for key in ("a", "a", "b"):
        assert post_job(client, queue="tenants", concurrencyKey=key).status_code == 202
    claimed = [db.claim_job(conn, worker_id="w", queues=["tenants"]) for _ in range(3)]
    assert sorted(job_row(conn, c.id)["concurrency_key"] for c in claimed if c is not None) == ["a", "b"]


def test_queue_key_limit_of_an_unknown_queue_is_404(shared_client: FlaskClient, unchanged: None) -> None:
    r = shared_client.put("/api/queues/nobody-named-it/key-limit", json={"maxRunning": 2})
    assert r.status_code == 404 and r.get_json()["error"]["code"] == "queue_not_found"


@pytest.mark.parametrize("body", [{}, {"maxRunning": 0}, {"maxRunning": 1.5}, {"maxRunning": True},
                                  {"maxRunning": "2"}, {"maxRunning": 2, "other": 1}, {"max_running": 2},
                                  {"maxRunning": 2, "create": "yes"}, [2]])
def test_queue_key_limit_bad_body_is_400(shared_client: FlaskClient, unchanged: None, body: Any) -> None:
    r = shared_client.put("/api/queues/emails/key-limit?create=true", json=body)
    assert r.status_code == 400 and r.get_json()["error"]["code"] == "invalid_argument"


def test_queue_key_limit_not_json_is_415(shared_client: FlaskClient, unchanged: None) -> None:
    r = shared_client.put("/api/queues/emails/key-limit", data="maxRunning=2",
                          content_type="application/x-www-form-urlencoded")
    assert r.status_code == 415
