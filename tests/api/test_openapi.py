"""app/openapi.py stays true: the same routes and methods as the app, valid schemas, resolvable $refs, the
database's enums, and every route's real answer valid against it. (Every response of the other API tests
is validated against it too, by the CheckedClient.)"""
from __future__ import annotations

import re
from typing import Any, Iterator

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient
from jsonschema import Draft202012Validator

from pgqw import db
from pgqw.app import models
from tests.api import states
from tests.api.openapi_check import OPENAPI, check_response, openapi_path

IGNORED_METHODS = {"HEAD", "OPTIONS"}


def app_operations(app: Flask) -> set[tuple[str, str]]:
    return {
        (openapi_path(rule.rule), method.lower())
        for rule in app.url_map.iter_rules()
        if rule.rule.startswith("/api/")
        for method in (rule.methods or set()) - IGNORED_METHODS
    }


def documented_operations(document: dict[str, Any] | None = None) -> set[tuple[str, str]]:
    return {(path, method) for path, item in (document or OPENAPI)["paths"].items() for method in item}


def test_openapi_documents_every_api_route_and_nothing_else(shared_app: Flask) -> None:
    in_app, in_doc = app_operations(shared_app), documented_operations()
    assert in_app - in_doc == set(), "routes missing from app/openapi.py"
    assert in_doc - in_app == set(), "app/openapi.py documents routes the app does not have"


def test_openapi_is_served(shared_client: FlaskClient) -> None:
    r = shared_client.get("/api/openapi.json")
    assert r.status_code == 200
    assert r.get_json() == OPENAPI
    assert r.get_json()["openapi"].startswith("3.1")


def walk(node: Any) -> Iterator[Any]:
    yield node
    if isinstance(node, dict):
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


def resolve(pointer: str) -> Any:
    assert pointer.startswith("#/")
    node: Any = OPENAPI
    for part in pointer[2:].split("/"):
        node = node[part]
    return node


def test_openapi_refs_resolve_and_schemas_are_valid_json_schema() -> None:
    for node in walk(OPENAPI):
        if isinstance(node, dict) and "$ref" in node:
            assert resolve(node["$ref"]) is not None
    for name, schema in OPENAPI["components"]["schemas"].items():
        Draft202012Validator.check_schema(schema)
    for path, item in OPENAPI["paths"].items():
        for method, op in item.items():
            for status, response in op["responses"].items():
                for media in response.get("content", {}).values():
                    Draft202012Validator.check_schema(media["schema"])


def test_openapi_operations_are_complete() -> None:
    operation_ids = []
    for path, item in OPENAPI["paths"].items():
        for method, op in item.items():
            operation_ids.append(op["operationId"])
            assert op["summary"] and op["responses"]
            params = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert params == ({"id"} if "{id}" in path else set()), (method, path)
            for status, response in op["responses"].items():
                assert response["description"], (method, path, status)
                if int(status) >= 400:
                    assert response["content"]["application/json"]["schema"] == {
                        "$ref": "#/components/schemas/ErrorEnvelope"}
    assert len(operation_ids) == len(set(operation_ids))


def test_openapi_payload_schemas_are_the_registered_models() -> None:
    """The request body is made from the task types' payload models: the listing schema accepts the
    example and refuses what the model refuses."""
    from jsonschema import ValidationError

    from pgqw.demo import Listing
    from pgqw.demo.listing import EXAMPLE_LISTING

    schema = {"$ref": "#/components/schemas/Payload.listing_flyer", "components": OPENAPI["components"]}
    Draft202012Validator(schema).validate(EXAMPLE_LISTING)
    Listing.model_validate(EXAMPLE_LISTING)
    bad = {**EXAMPLE_LISTING, "currency": "XXX"}
    try:
        Listing.model_validate(bad)
    except Exception:  # noqa: BLE001 - pydantic's ValidationError
        pass
    else:
        raise AssertionError("the model accepts a currency it should refuse")
    try:
        Draft202012Validator(schema).validate(bad)
    except ValidationError:
        pass
    else:
        raise AssertionError("the schema accepts a currency the model refuses")
    variants = OPENAPI["components"]["schemas"]["CreateJob"]["oneOf"]
    assert {v["properties"]["type"]["const"] for v in variants} == {"listing_flyer", "noop"}


def test_openapi_task_types_whose_names_sanitise_alike_keep_their_own_payloads() -> None:
    """A component name holds only A-Z a-z 0-9 . _ -: "send email" must not take send_email's place."""
    from pgqw.app.openapi_payloads import create_job_schemas

    schemas = create_job_schemas([("send email", {"type": "object", "required": ["a"]}, None),
                                  ("send_email", {"type": "object", "required": ["b"]}, None)])
    refs = {v["properties"]["type"]["const"]: v["properties"]["payload"]["$ref"]
            for v in schemas["CreateJob"]["oneOf"]}
    assert refs == {"send_email": "#/components/schemas/Payload.send_email",
                    "send email": "#/components/schemas/Payload.send_email_2"}
    assert schemas["Payload.send_email"]["required"] == ["b"]
    assert schemas["Payload.send_email_2"]["required"] == ["a"]


# ---- the enums are the database's own lists ----

def constraint_values(conn: psycopg.Connection, name: str) -> list[str]:
    """The values a check constraint (of a table or a domain) allows, in its order."""
    found = conn.execute("select pg_get_constraintdef(oid) from pg_constraint where conname = %s", [name]).fetchall()
    assert len(found) == 1, f"no single constraint {name}"
    return re.findall(r"'([^']*)'::text", found[0][0])


@pytest.mark.parametrize("constant, constraint", [
    ("STATUSES", "jobs_status_check"), ("OUTCOMES", "job_attempts_outcome_check"),
    ("CATCH_UP", "schedules_catch_up_check"), ("SOURCES", "schedules_source_check"),
])
def test_openapi_enums_are_the_lists_of_the_database(conn: psycopg.Connection, constant: str, constraint: str) -> None:
    assert list(getattr(models, constant)) == constraint_values(conn, constraint)


def test_openapi_enums_of_the_document_come_from_those_lists() -> None:
    schemas = OPENAPI["components"]["schemas"]
    assert schemas["Job"]["properties"]["status"]["enum"] == list(models.STATUSES)
    assert schemas["Attempt"]["properties"]["outcome"]["enum"] == [*models.OUTCOMES, None]
    assert schemas["Schedule"]["properties"]["catchUp"]["enum"] == list(models.CATCH_UP)
    assert schemas["Schedule"]["properties"]["source"]["enum"] == list(models.SOURCES)


# ---- every route, answered for real, as the document says ----

def test_openapi_every_route_answers_as_the_served_document_says(app: Flask, conn: psycopg.Connection) -> None:
    """One real request per documented operation (a dead job, a cancelled attempt, a schedule and a worker
    among what they answer), each response checked against the document the app serves; and no route of
    the url_map is left without one."""
    client = app.test_client()
    served = client.get("/api/openapi.json").get_json()
    dead = states.dead(conn, errors=("a", "b"))
    running = states.processing(conn)
    db.cancel_job(conn, job_id=running.id)
    db.mark_cancelled(conn, job_id=running.id, lease_token=running.lease_token)
    done = states.succeeded(conn)
    waiting = states.pending(conn)
    db.set_schedule(conn, name="nightly", task_type="noop", cron="0 3 * * *", payload={"n": 1})
    db.register_worker(conn, worker_id="w-1", task_types=["noop"], queues=["default"])
    q = waiting.queue
    parent = states.pending(conn)
    child = db.enqueue_job(conn, type="noop", payload={}, idempotency_key="child", depends_on=[parent.id])
    batch = db.enqueue_batch(conn, jobs=[{"type": "noop", "payload": {}, "idempotency_key": "b-1"}],
                             callback={"type": "noop"})[0].batch_id
    calls = [
        ("GET", "/api/jobs?limit=5"), ("GET", f"/api/jobs?status=dead&type=listing_flyer&queue={dead.queue}"),
        ("GET", f"/api/jobs/{dead.id}"), ("GET", f"/api/jobs/{dead.id}/attempts"),
        ("GET", f"/api/jobs/{running.id}/attempts"), ("GET", f"/api/jobs/{done.id}/result"),
        ("GET", f"/api/jobs/{done.id}/flyer"), ("POST", f"/api/jobs/{dead.id}/retry"),
        ("POST", f"/api/jobs/{waiting.id}/cancel"), ("GET", "/api/stats"), ("GET", "/api/task-types"),
        ("GET", "/api/queues"), ("POST", f"/api/queues/{q}/pause"), ("POST", f"/api/queues/{q}/resume"),
        ("PUT", f"/api/queues/{q}/limit"), ("POST", f"/api/queues/{q}/limit"), ("PUT", f"/api/queues/{q}/rate"),
        ("POST", f"/api/queues/{q}/rate"), ("GET", "/api/workers"), ("GET", "/api/throughput?minutes=5"),
        ("GET", "/api/schedules"), ("POST", "/api/schedules/nightly/pause"), ("POST", "/api/schedules/nightly/resume"),
        ("GET", "/api/openapi.json"), ("GET", f"/api/workflows/{parent.id}"), ("GET", f"/api/batches/{batch}"),
        ("POST", "/api/batches"), ("PUT", f"/api/queues/{q}/key-limit"), ("POST", f"/api/queues/{q}/key-limit"),
        ("POST", "/api/jobs/bulk/cancel"), ("POST", "/api/jobs/bulk/retry"),
    ]
    bodies = {"limit": {"maxRunning": 2}, "rate": {"jobsPerSecond": 1.5}, "key-limit": {"maxRunning": 1},
              "batches": {"jobs": [{"type": "noop", "payload": {}}], "callback": {"type": "noop"}},
              "cancel": {"workflowId": str(parent.id)}, "retry": {"all": True}}
    adapter = app.url_map.bind("localhost")
    covered: set[tuple[str, str]] = set()
    answers: dict[str, Any] = {}
    for method, path in calls:
        body = bodies.get(path.rsplit("/", 1)[-1])
        headers = {"Idempotency-Key": "k"} if path == "/api/jobs" else {}
        r = client.open(path, method=method, json=body, headers=headers)
        assert r.status_code < 400, (method, path, r.get_data(as_text=True)[:300])
        json_body = r.get_json(silent=True) if r.mimetype == "application/json" else None
        check_response(app, method, r.request.path, r.status_code, r.mimetype, json_body, served)
        rule, _ = adapter.match(r.request.path, method=method, return_rule=True)
        covered.add((openapi_path(rule.rule), method.lower()))
        answers[f"{method} {path}"] = json_body
    r = client.post("/api/jobs", json={"type": "noop", "payload": {}}, headers={"Idempotency-Key": "new"})
    check_response(app, "POST", "/api/jobs", r.status_code, r.mimetype, r.get_json(), served)
    covered.add(("/api/jobs", "post"))
    assert app_operations(app) - covered == set(), "routes of the url_map no request above reached"
    assert app_operations(app) <= documented_operations(served)
    outcomes = [a["outcome"] for a in answers[f"GET /api/jobs/{running.id}/attempts"]["data"]]
    assert outcomes == ["cancelled"]  # the case the hand-written schema once refused
    assert answers[f"GET /api/jobs/{dead.id}"]["data"]["status"] == "dead"
    assert answers["GET /api/schedules"]["data"]["schedules"][0]["catchUp"] == "latest"
    assert [j["dependsOn"] for j in answers[f"GET /api/workflows/{parent.id}"]["data"]["jobs"]] == [[], [str(parent.id)]]
    assert answers[f"GET /api/workflows/{parent.id}"]["data"]["jobs"][1]["id"] == str(child.id)
    assert answers[f"GET /api/batches/{batch}"]["data"]["total"] == 1
    assert answers["POST /api/jobs/bulk/cancel"]["data"]["changed"] >= 1


def test_openapi_document_lacking_a_route_of_the_url_map_is_caught(shared_app: Flask) -> None:
    doc = {**OPENAPI, "paths": {p: item for p, item in OPENAPI["paths"].items() if p != "/api/stats"}}
    assert app_operations(shared_app) - documented_operations(doc) == {("/api/stats", "get")}
