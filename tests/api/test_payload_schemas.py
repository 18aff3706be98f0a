"""The API against the payload schemas it serves: a worker login can register any schema (register_task_types
checks only what the database can), so the API checks each one before it uses it (pgqw.payload_schema) and
validates with RE2 patterns, no fetching and a time limit. A schema it cannot use answers 422
invalid_payload_schema naming the type; the type's other routes, and every other type, keep working."""
from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient
from psycopg.types.json import Jsonb

from pgqw import db
from pgqw.app import api
from pgqw.app.api import task_types as api_task_types
from tests.api.live import serve_api
from tests.helpers import LISTING, rows

SLOW = "^(a+)+$"  # a backtracking engine takes 0.8 s at 24 characters, x4 per two more


def register(conn: psycopg.Connection, name: str, schema: dict[str, Any]) -> None:
    """What a worker login can do: register_task_types with a schema of its choosing."""
    db.register_task_types(conn, types=[{"name": name, "payload_schema": schema}])


def store(conn: psycopg.Connection, name: str, schema: dict[str, Any]) -> None:
    """A schema the database no longer takes (a remote $ref), as stored before its rules or by a DBA."""
    register(conn, name, {"type": "object"})
    conn.execute("update task_types set payload_schema = %s where name = %s", [Jsonb(schema), name])


def post(client: FlaskClient, job_type: str, payload: Any, key: str | None = None):  # type: ignore[no-untyped-def]
    return client.post("/api/jobs", json={"type": job_type, "payload": payload},
                       headers={"Idempotency-Key": key or f"k-{uuid.uuid4()}"})


def error_of(r: Any) -> dict[str, Any]:
    assert r.mimetype == "application/json"
    return r.get_json()["error"]


def test_payload_schemas_catastrophic_pattern_answers_at_once(client: FlaskClient, conn: psycopg.Connection) -> None:
    register(conn, "slow", {"type": "object", "properties": {"name": {"type": "string", "pattern": SLOW}}})
    started = time.monotonic()
    r = post(client, "slow", {"name": "a" * 30 + "!"})  # 50 s or so for Python's re
    assert time.monotonic() - started < 1
    assert r.status_code == 422
    assert error_of(r)["details"] == [{"field": "payload.name", "problem": f"must match the pattern {SLOW}"}]
    assert post(client, "slow", {"name": "a" * 60_000}).status_code == 202


@pytest.fixture
def slow_api(db_url: str, conn: psycopg.Connection) -> Iterator[str]:
    register(conn, "slow", {"type": "object", "properties": {"name": {"type": "string", "pattern": SLOW}}})
    with serve_api(db_url) as url:
        yield url


def _timed(request: urllib.request.Request) -> tuple[int, float]:
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            status = answer.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    return status, time.monotonic() - started


def test_payload_schemas_catastrophic_pattern_stalls_no_other_request(slow_api: str) -> None:
    """Two such requests at once, and a GET /api/stats beside them, on a real server: each answers in well
    under a second (with Python's re the two held the interpreter, and the GET, for as long as they ran)."""
    body = json.dumps({"type": "slow", "payload": {"name": "a" * 30 + "!"}}).encode()
    results: list[tuple[int, float]] = []

    def attack(n: int) -> None:
        results.append(_timed(urllib.request.Request(
            f"{slow_api}/api/jobs", data=body, method="POST",
            headers={"Content-Type": "application/json", "Idempotency-Key": f"slow-{n}"})))

    threads = [threading.Thread(target=attack, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    status, took = _timed(urllib.request.Request(f"{slow_api}/api/stats"))
    for t in threads:
        t.join()
    assert (status, sorted(s for s, _ in results)) == (200, [422, 422])
    assert took < 1 and all(t < 1 for _, t in results), (took, results)


class _Counting(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:
        self.hits.append(self.path)
        time.sleep(0.5)
        self.send_response(200)
        self.send_header("Content-Type", "application/schema+json")
        self.end_headers()
        self.wfile.write(b'{"type": "string"}')

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def schema_server() -> Iterator[tuple[str, list[str]]]:
    """A server that would hand out a schema (slowly), and the paths anyone asked it for."""
    hits: list[str] = []
    handler = type("Handler", (_Counting,), {"hits": hits})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", hits
    server.shutdown()
    server.server_close()


def test_payload_schemas_remote_ref_is_never_fetched(
    client: FlaskClient, conn: psycopg.Connection, schema_server: tuple[str, list[str]]
) -> None:
    url, hits = schema_server
    with pytest.raises(psycopg.Error) as exc:  # the database takes none now
        register(conn, "remote", {"type": "object", "properties": {"a": {"$ref": f"{url}/a.json"}}})
    assert exc.value.sqlstate == "QV400"
    store(conn, "remote", {"type": "object", "properties": {"a": {"$ref": f"{url}/a.json"}}})
    store(conn, "unreachable", {"$ref": "http://127.0.0.1:9/nothing.json"})
    for name in ("remote", "unreachable"):
        started = time.monotonic()
        r = post(client, name, {"a": "text"})
        assert time.monotonic() - started < 0.5
        assert r.status_code == 422 and error_of(r)["code"] == "invalid_payload_schema", r.get_json()
        assert "points outside the schema" in error_of(r)["message"]
    assert hits == []


BROKEN = [
    ({"$ref": "#"}, "leads back to the top"),
    ({"type": 5}, "at /type: not a valid Draft 2020-12 schema"),
    ({"type": "object", "properties": {"a": {"type": "string", "pattern": "^(?!x)"}}}, "is not a pattern"),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/gone"}}}, "points at nothing"),
]


@pytest.mark.parametrize("schema, says", BROKEN, ids=["recursion", "bad-type", "lookahead", "dangling-ref"])
def test_payload_schemas_broken_at_use_answers_422_naming_the_type(
    client: FlaskClient, conn: psycopg.Connection, schema: dict[str, Any], says: str
) -> None:
    register(conn, "broken", schema)  # within the database's rules: only the API can tell
    r = post(client, "broken", {"a": "x"})
    assert r.status_code == 422
    error = error_of(r)
    assert error["code"] == "invalid_payload_schema"
    assert "task type 'broken'" in error["message"] and says in error["message"]
    assert error["details"]["taskType"] == "broken" and says in error["details"]["problem"]
    assert rows(conn, "select count(*) as n from jobs where type = 'broken'")[0]["n"] == 0
    # Its other routes, and the other types, keep working.
    listed = client.get("/api/task-types")
    assert listed.status_code == 200
    assert [t["payloadSchema"] for t in listed.get_json()["data"] if t["name"] == "broken"] == [schema]
    assert client.get("/api/jobs?type=broken").status_code == 200
    doc = client.get("/api/openapi.json")
    assert doc.status_code == 200
    titles = [v["title"] for v in doc.get_json()["components"]["schemas"]["CreateJob"]["oneOf"]]
    assert "CreateJob.listing_flyer" in titles and "CreateJob.broken" not in titles
    assert post(client, "listing_flyer", LISTING).status_code == 202
    assert post(client, "broken", {"a": "x"}).status_code == 422  # still, and from the process's cache


def test_payload_schemas_check_over_its_time_answers_422_payload_check_timeout(
    client: FlaskClient, conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both branches of the anyOf recurse: 2^depth steps, each cheap; the time limit ends it.
    branch = {"type": "array", "items": {"$ref": "#/$defs/n"}}
    register(conn, "exponential", {"type": "object", "properties": {"tree": {"$ref": "#/$defs/n"}},
                                   "$defs": {"n": {"anyOf": [{**branch, "minItems": 2}, {**branch, "maxItems": 0}]}}})
    monkeypatch.setattr(api_task_types, "PAYLOAD_CHECK_SECONDS", 0.3)
    tree: Any = "leaf"
    for _ in range(60):
        tree = [tree]
    started = time.monotonic()
    r = post(client, "exponential", {"tree": tree})
    assert time.monotonic() - started < 1.5
    assert r.status_code == 422
    assert error_of(r)["code"] == "payload_check_timeout"
    assert "'exponential'" in error_of(r)["message"]
    assert post(client, "exponential", {"tree": []}).status_code == 202


@pytest.mark.parametrize("raw, field", [
    (b'{"a": 1e400}', "payload.a"),
    (b'{"a": -1e400}', "payload.a"),
    (b'{"a": {"b": [1, 2.5e308]}}', "payload.a.b.1"),
])
def test_create_job_number_beyond_a_double_answers_422_naming_the_field(
    shared_client: FlaskClient, unchanged: None, raw: bytes, field: str
) -> None:
    """1e400 is valid JSON; read as a double it is infinity, which jsonb cannot hold (it was a 500)."""
    r = shared_client.post("/api/jobs", data=b'{"type": "noop", "payload": ' + raw + b"}",
                           headers={"Content-Type": "application/json", "Idempotency-Key": "big-number"})
    assert r.status_code == 422
    assert error_of(r)["code"] == "validation_failed"
    assert error_of(r)["details"] == [{"field": field, "problem": api.NUMBER_PROBLEM}]


def test_create_job_number_beyond_a_double_in_a_typed_field_names_that_field(
    shared_client: FlaskClient, unchanged: None
) -> None:
    body = json.dumps({"type": "listing_flyer", "payload": {**LISTING, "priceMinor": 1}}).replace(
        '"priceMinor": 1', '"priceMinor": 1e400').encode()
    r = shared_client.post("/api/jobs", data=body,
                           headers={"Content-Type": "application/json", "Idempotency-Key": "big-price"})
    assert r.status_code == 422
    assert error_of(r)["details"] == [{"field": "payload.priceMinor", "problem": api.NUMBER_PROBLEM}]


START = (datetime.now(UTC) + timedelta(days=2)).replace(hour=10, minute=0, second=0, microsecond=0)
WINDOW = f"{START:%Y-%m-%dT%H:%M:%S}.000Z"


def test_create_job_plain_key_in_the_window_form_answers_422(client: FlaskClient, conn: psycopg.Connection) -> None:
    """`<key>@<window start>` is how a unique_for_ms key is stored: a plain key in that form would take, or be
    handed, some window's job."""
    r = post(client, "listing_flyer", LISTING, key=f"report-7@{WINDOW}")
    assert r.status_code == 422
    assert error_of(r)["code"] == "idempotency_key_reserved"
    assert error_of(r)["details"][0]["field"] == "Idempotency-Key"
    assert rows(conn, "select count(*) as n from jobs")[0]["n"] == 0
    r = client.post("/api/jobs", json={"type": "listing_flyer", "payload": LISTING, "unique_for_ms": 3_600_000,
                                       "run_at": f"{START:%Y-%m-%dT%H}:05:00Z"}, headers={"Idempotency-Key": "report-7"})
    assert r.status_code == 202  # the windowed caller gets its own job
    assert rows(conn, "select idempotency_key from jobs")[0]["idempotency_key"] == f"report-7@{WINDOW}"


def test_create_job_key_forms_of_other_kinds_are_refused_and_the_rest_accepted(client: FlaskClient) -> None:
    r = client.post("/api/jobs", json={"type": "listing_flyer", "payload": LISTING, "unique_for_ms": 1000},
                    headers={"Idempotency-Key": "schedule:nightly"})
    assert (r.status_code, error_of(r)["code"]) == (422, "idempotency_key_reserved")
    for key in ("ada@example.com", f"schedule:nightly@{WINDOW}", f"k@{WINDOW}x", f"k@{START:%Y-%m-%d}"):
        assert post(client, "listing_flyer", LISTING, key=key).status_code == 202, key
