"""Task types the API knows only from the database: a type registered in task_types (here by hand, as
a worker would) is enqueued, checked and documented by the running app; GET /api/task-types shows its
effective settings; GET /api/jobs/{id}/result serves what its job stored with its success.

No handler code for send_welcome exists anywhere: the API reads the type from the table. Every response
of these tests is also checked against the document this app serves at the end of the test (with
send_welcome in it), besides the demo's document the CheckedClient uses."""
from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, Iterator

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient
from jsonschema import Draft202012Validator, FormatChecker

from pgqw import db
from pgqw.app import close_pool, create_app
from tests.api.conftest import CheckedClient
from tests.api.openapi_check import check_response
from tests.helpers import LISTING, job_row

TYPE = "send_welcome"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["to"],
    "properties": {"to": {"type": "string", "format": "email"}, "n": {"type": "integer", "minimum": 1}},
    "additionalProperties": False,
}
DESCRIPTION = "Sends the welcome mail."
PAYLOAD = {"to": "ada@example.com", "n": 2}
CACHE_KEY = "pgqw.task_types"  # where app/api/task_types.py keeps the TaskTypes cache of an app


def register(conn: psycopg.Connection, schema: dict[str, Any] = SCHEMA) -> None:
    """What a worker whose code defines send_welcome does at start."""
    db.register_task_types(conn, types=[{"name": TYPE, "payload_schema": schema, "description": DESCRIPTION,
                                         "queue": "emails", "priority": 3, "lease_ms": 20_000}])


def renew_cache(app: Flask) -> None:
    """What the cache's few seconds do: the next request reads the task types again."""
    app.extensions.pop(CACHE_KEY, None)


@pytest.fixture
def app(db_url: str) -> Iterator[Flask]:
    # MAX_ATTEMPTS None whatever the environment says: an unset max_attempts is the task type's.
    application = create_app({"TESTING": True, "DATABASE_URL": db_url, "MAX_ATTEMPTS": None})
    application.test_client_class = CheckedClient
    yield application
    close_pool(application)


@pytest.fixture
def client(app: Flask) -> Iterator[FlaskClient]:
    """The CheckedClient, and at the end every response checked against the document this app serves."""
    seen: list[tuple[str, str, int, str, Any]] = []

    class Recording(CheckedClient):
        def open(self, *args: Any, **kwargs: Any):  # type: ignore[no-untyped-def, override]
            response = super().open(*args, **kwargs)
            body = response.get_json(silent=True) if response.mimetype == "application/json" else None
            seen.append((response.request.method, response.request.path, response.status_code,
                         response.mimetype, body))
            return response

    app.test_client_class = Recording
    yield app.test_client()
    renew_cache(app)
    served = app.test_client().get("/api/openapi.json").get_json()
    for method, path, status, mimetype, body in seen:
        check_response(app, method, path, status, mimetype, body, document=served)


def post(client: FlaskClient, body: Any, key: str | None = None):  # type: ignore[no-untyped-def]
    return client.post("/api/jobs", json=body, headers={"Idempotency-Key": key or f"k-{uuid.uuid4()}"})


def created(client: FlaskClient, body: Any) -> dict[str, Any]:
    r = post(client, body)
    assert r.status_code == 202, r.get_json()
    return r.get_json()["data"]


def refusal(r) -> list[dict[str, str]]:  # type: ignore[no-untyped-def]
    assert r.status_code == 422, r.get_json()
    error = r.get_json()["error"]
    assert error["code"] == "validation_failed"
    return error["details"]


def served_request_schema(client: FlaskClient) -> Draft202012Validator:
    """CreateJob of the document the app serves now."""
    doc = client.get("/api/openapi.json").get_json()
    return Draft202012Validator({"$ref": "#/components/schemas/CreateJob", "components": doc["components"]},
                                format_checker=FormatChecker())


def time_of(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def succeed(conn: psycopg.Connection, job: dict[str, Any], result: tuple[str, Any, bytes | None] | None) -> None:
    """Drives the job as a worker of its type would: claim it, then record the success with its result."""
    claimed = db.claim_job(conn, worker_id="w-results", queues=[job["queue"]], task_types=[job["type"]])
    assert claimed is not None and str(claimed.id) == job["id"]
    db.mark_succeeded(conn, job_id=claimed.id, lease_token=claimed.lease_token, result=result)


# ---- a type registered in the database ----

def test_task_types_type_registered_while_the_app_runs_is_accepted(
    app: Flask, client: FlaskClient, conn: psycopg.Connection
) -> None:
    assert post(client, {"type": "listing_flyer", "payload": LISTING}).status_code == 202  # the cache is filled
    r = post(client, {"type": TYPE, "payload": PAYLOAD})
    assert (r.status_code, r.get_json()["error"]["code"]) == (422, "unknown_task_type")
    register(conn)
    # No restart and no wait: a name the cache does not hold is read from the table at once.
    job = created(client, {"type": TYPE, "payload": PAYLOAD})
    assert (job["type"], job["payload"], job["status"]) == (TYPE, PAYLOAD, "pending")
    assert (job["queue"], job["priority"]) == ("emails", 3)  # the type's code defaults
    assert job_row(conn, job["id"])["type"] == TYPE


def test_task_types_api_imports_no_handler_code(db_url: str, conn: psycopg.Connection) -> None:
    """A process that has only the app, not the module that defines send_welcome (nor pgqw.tasks),
    accepts its jobs: the API knows the type from the table alone. (A task module the process does
    have is imported, for its init_app: here the one named is not installed.)"""
    register(conn)
    script = (
        "import json, sys\n"
        "from pgqw.app import close_pool, create_app\n"
        "app = create_app({'TESTING': True, 'DATABASE_URL': sys.argv[1], 'TASK_MODULES': 'myapp.tasks'})\n"
        "r = app.test_client().post('/api/jobs', json={'type': sys.argv[2], 'payload': json.loads(sys.argv[3])},\n"
        "                           headers={'Idempotency-Key': 'no-handler'})\n"
        "close_pool(app)\n"
        "print(json.dumps({'status': r.status_code,\n"
        "                  'modules': sorted(m for m in sys.modules if m.startswith('pgqw'))}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, db_url, TYPE, json.dumps(PAYLOAD)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["status"] == 202
    assert not {"pgqw.tasks", "pgqw.demo", "pgqw.worker"} & set(answer["modules"]), answer["modules"]


@pytest.mark.parametrize("payload,details", [
    ({}, [("payload.to", "is required")]),
    ({"to": "ada@example.com", "n": 0}, [("payload.n", "must be at least 1")]),
    ({"to": "ada@example.com", "cc": "bob@example.com"}, [("payload.cc", "unknown field")]),
    ({"n": 0, "cc": 1, "bcc": 2}, [("payload.to", "is required"), ("payload.n", "must be at least 1"),
                                   ("payload.bcc", "unknown field"), ("payload.cc", "unknown field")]),
    ({"to": "not an address"}, [("payload.to", "must be a valid email")]),
    ({"to": 7}, [("payload.to", "must be a string")]),
    ({"to": "ada@example.com", "n": "2"}, [("payload.n", "must be an integer")]),
    ({"to": "ada@example.com", "n": 1.5}, [("payload.n", "must be an integer")]),
], ids=["missing", "minimum", "unknown", "all-at-once", "format", "string", "integer", "fraction"])
def test_task_types_payload_refusals_name_each_field(
    client: FlaskClient, conn: psycopg.Connection, payload: dict[str, Any], details: list[tuple[str, str]]
) -> None:
    register(conn)
    body = {"type": TYPE, "payload": payload}
    assert refusal(post(client, body)) == [{"field": f, "problem": p} for f, p in details]
    assert conn.execute("select count(*) from jobs").fetchone()[0] == 0
    # The served document refuses it too, and accepts the valid payload.
    schema = served_request_schema(client)
    assert not schema.is_valid(body)
    assert schema.is_valid({"type": TYPE, "payload": PAYLOAD})


def test_task_types_unknown_type_names_the_registered_ones(client: FlaskClient, conn: psycopg.Connection) -> None:
    register(conn)
    r = post(client, {"type": "send_welcom", "payload": PAYLOAD})
    error = r.get_json()["error"]
    assert (r.status_code, error["code"], error["details"]["sqlstate"]) == (422, "unknown_task_type", "QT422")
    assert error["details"]["detail"].startswith("registered: ") and "send_welcome" in error["details"]["detail"]
    # The envelope and the payload are both checked: every bad field in one answer.
    assert refusal(post(client, {"type": TYPE, "payload": {}, "priority": "high", "colour": "red"})) == [
        {"field": "priority", "problem": "must be an integer"},
        {"field": "colour", "problem": "unknown field"},
        {"field": "payload.to", "problem": "is required"},
    ]


# ---- when, and the settings of the request ----

def test_task_types_run_at_and_delay_ms_make_the_job_start_later(client: FlaskClient, conn: psycopg.Connection) -> None:
    register(conn)
    now = created(client, {"type": TYPE, "payload": PAYLOAD, "queue": "now"})
    assert now["nextAttemptAt"] == now["createdAt"]

    at = (datetime.now(timezone.utc) + timedelta(days=1)).replace(microsecond=123000)
    scheduled = created(client, {"type": TYPE, "payload": PAYLOAD, "queue": "later",
                                 "run_at": at.astimezone(timezone(timedelta(hours=1))).isoformat()})
    assert time_of(scheduled["nextAttemptAt"]) == at  # given with +01:00, answered in UTC

    delayed = created(client, {"type": TYPE, "payload": PAYLOAD, "queue": "later", "delay_ms": 90_000})
    # The delay counts from the database's clock, in the statement that makes the job.
    assert time_of(delayed["nextAttemptAt"]) - time_of(delayed["createdAt"]) == timedelta(seconds=90)

    assert db.claim_job(conn, worker_id="w-now", queues=["later"]) is None  # neither is ready yet
    claimed = db.claim_job(conn, worker_id="w-now", queues=["now"])
    assert claimed is not None and str(claimed.id) == now["id"]


def test_task_types_run_at_with_delay_ms_is_422(client: FlaskClient, conn: psycopg.Connection) -> None:
    register(conn)
    soon = (datetime.now(timezone.utc) + timedelta(days=30)).isoformat()
    r = post(client, {"type": TYPE, "payload": PAYLOAD, "run_at": soon, "delay_ms": 1000})
    assert refusal(r) == [{"field": "body", "problem": "give run_at or delay_ms, not both"}]
    assert conn.execute("select count(*) from jobs").fetchone()[0] == 0


def test_task_types_max_attempts_queue_and_priority_of_the_request_are_applied(
    client: FlaskClient, conn: psycopg.Connection
) -> None:
    register(conn)
    job = created(client, {"type": TYPE, "payload": PAYLOAD, "queue": "vip", "priority": -7, "max_attempts": 2})
    assert (job["queue"], job["priority"], job["maxAttempts"]) == ("vip", -7, 2)
    row = job_row(conn, job["id"])
    assert (row["queue"], row["priority"], row["max_attempts"]) == ("vip", -7, 2)


def test_task_types_unset_settings_follow_a_dba_update(
    app: Flask, client: FlaskClient, conn: psycopg.Connection
) -> None:
    register(conn)
    default_attempts = db.get_queue_settings(conn).max_attempts
    job = created(client, {"type": TYPE, "payload": PAYLOAD})
    assert (job["queue"], job["priority"], job["maxAttempts"]) == ("emails", 3, default_attempts)

    conn.execute("update task_types set queue = 'mail', max_attempts = 9 where name = %s", [TYPE])
    renew_cache(app)
    job = created(client, {"type": TYPE, "payload": PAYLOAD})
    assert (job["queue"], job["priority"], job["maxAttempts"]) == ("mail", 3, 9)
    # The request's own values still win.
    job = created(client, {"type": TYPE, "payload": PAYLOAD, "queue": "vip", "max_attempts": 1})
    assert (job["queue"], job["maxAttempts"]) == ("vip", 1)
    # A worker registering the type again (a restart, a deploy) leaves the DBA's values alone.
    register(conn)
    renew_cache(app)
    job = created(client, {"type": TYPE, "payload": PAYLOAD})
    assert (job["queue"], job["maxAttempts"]) == ("mail", 9)


def test_task_types_changed_schema_is_used_once_the_cache_is_renewed(
    app: Flask, client: FlaskClient, conn: psycopg.Connection
) -> None:
    register(conn)
    assert refusal(post(client, {"type": TYPE, "payload": {**PAYLOAD, "lang": "yo"}})) == [
        {"field": "payload.lang", "problem": "unknown field"}]
    register(conn, {**SCHEMA, "properties": {**SCHEMA["properties"], "lang": {"enum": ["en", "yo"]}}})
    renew_cache(app)
    assert created(client, {"type": TYPE, "payload": {**PAYLOAD, "lang": "yo"}})["payload"]["lang"] == "yo"
    assert refusal(post(client, {"type": TYPE, "payload": {**PAYLOAD, "lang": "fr"}})) == [
        {"field": "payload.lang", "problem": "must be one of en, yo"}]
    doc = client.get("/api/openapi.json").get_json()
    assert "lang" in doc["components"]["schemas"][f"Payload.{TYPE}"]["properties"]


# ---- GET /api/task-types and the document ----

def test_task_types_list_shows_the_effective_settings(client: FlaskClient, conn: psycopg.Connection) -> None:
    register(conn)
    settings = db.get_queue_settings(conn)

    def listed() -> dict[str, dict[str, Any]]:
        r = client.get("/api/task-types")
        assert r.status_code == 200
        found = r.get_json()["data"]
        assert [t["name"] for t in found] == ["listing_flyer", "noop", TYPE]
        return {t["name"]: t for t in found}

    assert listed()[TYPE] == {
        "name": TYPE, "description": DESCRIPTION, "queue": "emails", "priority": 3,
        "maxAttempts": settings.max_attempts, "backoffBaseMs": settings.backoff_base_ms,
        "backoffMaxDelayMs": settings.backoff_max_delay_ms, "backoffMaxJitterMs": settings.backoff_max_jitter_ms,
        "leaseMs": 20_000, "timeoutMs": None, "expireAfterMs": None, "maxSnoozes": settings.max_snoozes,
        "retainSucceededS": settings.prune_succeeded_after.total_seconds(),
        "retainFailedS": settings.prune_finished_after.total_seconds(), "payloadSchema": SCHEMA,
    }
    conn.execute("update task_types set queue = 'mail', max_attempts = 9, backoff_base_ms = 60000, timeout_ms = 5000,"
                 " expire_after_ms = 60000, max_snoozes = 3, retain_succeeded = '1 hour' where name = %s", [TYPE])
    after = listed()[TYPE]
    assert (after["queue"], after["maxAttempts"], after["backoffBaseMs"], after["priority"]) == ("mail", 9, 60000, 3)
    assert (after["timeoutMs"], after["expireAfterMs"], after["maxSnoozes"], after["retainSucceededS"]) == (
        5000, 60000, 3, 3600.0)


def test_task_types_openapi_lists_the_payload_schema_of_each_type(
    client: FlaskClient, conn: psycopg.Connection
) -> None:
    register(conn)
    post(client, {"type": TYPE, "payload": PAYLOAD})  # the cache now holds send_welcome
    doc = client.get("/api/openapi.json").get_json()
    variants = {v["properties"]["type"]["const"]: v for v in doc["components"]["schemas"]["CreateJob"]["oneOf"]}
    assert sorted(variants) == ["listing_flyer", "noop", TYPE]
    assert variants[TYPE]["properties"]["payload"] == {"$ref": f"#/components/schemas/Payload.{TYPE}"}
    assert variants[TYPE]["additionalProperties"] is False
    assert doc["components"]["schemas"][f"Payload.{TYPE}"] == {**SCHEMA, "description": DESCRIPTION}
    schema = served_request_schema(client)
    assert schema.is_valid({"type": TYPE, "payload": PAYLOAD, "queue": "vip", "delay_ms": 5})
    assert schema.is_valid({"type": "listing_flyer", "payload": LISTING})
    assert not schema.is_valid({"type": TYPE, "payload": LISTING})  # each type with its own payload


# ---- GET /api/jobs/{id}/result ----

@pytest.mark.parametrize("value", [{"sent": True, "messageId": "m-1"}, ["a", 1], "queued", 0, None],
                         ids=["object", "array", "string", "number", "null"])
def test_result_json_is_served_as_data(client: FlaskClient, conn: psycopg.Connection, value: Any) -> None:
    register(conn)
    job = created(client, {"type": TYPE, "payload": PAYLOAD})
    succeed(conn, job, ("application/json", value, None))
    assert client.get(f"/api/jobs/{job['id']}").get_json()["data"]["resultUrl"] == f"/api/jobs/{job['id']}/result"
    r = client.get(f"/api/jobs/{job['id']}/result")
    assert r.status_code == 200 and r.mimetype == "application/json"
    assert r.get_json() == {"data": value}


@pytest.mark.parametrize("content_type,data", [
    ("text/csv", b"to,sent\nada@example.com,1\n"),
    ("text/plain;charset=latin-1", "Zoë".encode("latin-1")),
    ("image/png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"),
    ("application/octet-stream", b"\x00\xff" * 100),
])
def test_result_file_is_served_with_its_content_type(
    client: FlaskClient, conn: psycopg.Connection, content_type: str, data: bytes
) -> None:
    register(conn)
    job = created(client, {"type": TYPE, "payload": PAYLOAD})
    succeed(conn, job, (content_type, None, data))
    r = client.get(f"/api/jobs/{job['id']}/result")
    assert r.status_code == 200
    assert r.headers["Content-Type"] == content_type and r.data == data  # as stored: no charset added


def test_result_file_runs_nothing_on_the_apis_origin(client: FlaskClient, conn: psycopg.Connection) -> None:
    """A file result may carry what a payload put in it; served as HTML from the origin where the page
    keeps its token, it would run. It is sandboxed; a PDF is not (browsers would not show it)."""
    register(conn)
    page, flyer = (created(client, {"type": TYPE, "payload": PAYLOAD}) for _ in range(2))
    succeed(conn, page, ("text/html", None, b"<script>fetch('/api/jobs')</script>"))
    succeed(conn, flyer, ("application/pdf", None, b"%PDF-1.4\n%%EOF\n"))
    r = client.get(f"/api/jobs/{page['id']}/result")
    assert r.headers["Content-Type"] == "text/html"
    assert r.headers["Content-Security-Policy"] == "sandbox; default-src 'none'"
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    r = client.get(f"/api/jobs/{flyer['id']}/result")
    assert r.headers["Content-Type"] == "application/pdf" and "Content-Security-Policy" not in r.headers


def test_result_of_a_pending_job_is_404_not_ready(client: FlaskClient, conn: psycopg.Connection) -> None:
    register(conn)
    job = created(client, {"type": TYPE, "payload": PAYLOAD})
    r = client.get(f"/api/jobs/{job['id']}/result")
    assert r.status_code == 404
    assert r.get_json()["error"]["code"] == "result_not_ready"
    assert r.get_json()["error"]["details"] == {"status": "pending"}


def test_result_of_a_success_without_one_is_404_no_result(client: FlaskClient, conn: psycopg.Connection) -> None:
    register(conn)
    job = created(client, {"type": TYPE, "payload": PAYLOAD})
    succeed(conn, job, None)
    r = client.get(f"/api/jobs/{job['id']}/result")
    assert r.status_code == 404
    assert r.get_json()["error"]["code"] == "no_result"
    assert r.get_json()["error"]["details"] == {"status": "succeeded"}
    assert db.get_result(conn, job_id=job["id"]) is None


def test_result_of_an_unknown_job_is_404(client: FlaskClient) -> None:
    for job_id in (uuid.uuid4(), "not-a-uuid"):
        r = client.get(f"/api/jobs/{job_id}/result")
        assert r.status_code == 404 and r.get_json()["error"]["code"] == "job_not_found"
