"""POST /api/jobs: one insert, 202 new / 200 repeat, and every way a request can be refused."""
from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from pgqw import db
from tests.helpers import LISTING, job_row, rows, snapshot

BODY = {"type": "listing_flyer", "payload": LISTING}


def post(client: FlaskClient, body: Any = BODY, key: str | None = "key-1", **headers: str):
    if key is not None:
        headers["Idempotency-Key"] = key
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.post("/api/jobs", data=data, headers={"Content-Type": "application/json", **headers})


def job_count(conn: psycopg.Connection) -> int:
    return rows(conn, "select count(*) as n from jobs")[0]["n"]


def test_create_job_returns_202_with_the_job_and_location(client: FlaskClient, conn: psycopg.Connection) -> None:
    r = post(client)
    assert r.status_code == 202
    job = r.get_json()["data"]
    assert r.headers["Location"] == f"/api/jobs/{job['id']}"
    assert job["status"] == "pending" and job["type"] == "listing_flyer"
    assert job["payload"] == LISTING
    assert (job["attempts"], job["maxAttempts"], job["queue"], job["priority"]) == (0, 5, "default", 0)
    assert job["nextAttemptAt"] == job["createdAt"] and job["createdAt"].endswith("Z")
    assert job["resultUrl"] is None and job["lastError"] is None and job["lockedBy"] is None
    row = job_row(conn, job["id"])
    assert row["idempotency_key"] == "key-1" and row["status"] == "pending"


def test_create_job_same_key_and_body_returns_200_with_the_same_job(
    client: FlaskClient, conn: psycopg.Connection
) -> None:
    first = post(client)
    again = post(client)
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.get_json()["data"] == first.get_json()["data"]
    assert again.headers["Location"] == first.headers["Location"]
    assert job_count(conn) == 1


def test_create_job_same_key_and_body_with_keys_reordered_is_the_same_body(client: FlaskClient) -> None:
    post(client)
    reordered = {"payload": dict(reversed(list(LISTING.items()))), "type": "listing_flyer"}
    assert post(client, reordered).status_code == 200


def test_create_job_same_key_different_body_returns_409(client: FlaskClient, conn: psycopg.Connection) -> None:
    post(client)
    before = snapshot(conn)
    r = post(client, {"type": "listing_flyer", "payload": {**LISTING, "bedrooms": 4}})
    assert r.status_code == 409
    error = r.get_json()["error"]
    assert error["code"] == "idempotency_key_reused"
    assert error["details"]["sqlstate"] == "QI409"
    assert "key-1" in error["message"]
    assert snapshot(conn) == before


@pytest.mark.parametrize("extra", [{"queue": "other"}, {"priority": 5}])
def test_create_job_same_key_different_queue_or_priority_returns_409(
    client: FlaskClient, conn: psycopg.Connection, extra: dict[str, Any]
) -> None:
    post(client)
    r = post(client, {**BODY, **extra})
    assert r.status_code == 409
    assert r.get_json()["error"]["code"] == "idempotency_key_reused"
    assert job_count(conn) == 1


def test_create_job_queue_and_priority_are_stored(client: FlaskClient) -> None:
    r = post(client, {**BODY, "queue": "flyers", "priority": -3})
    assert r.status_code == 202
    assert (r.get_json()["data"]["queue"], r.get_json()["data"]["priority"]) == ("flyers", -3)


def test_create_job_accepts_a_charset_parameter(client: FlaskClient) -> None:
    r = post(client, **{"Content-Type": "application/json; charset=utf-8"})
    assert r.status_code == 202


def test_create_job_key_of_255_characters_is_accepted(client: FlaskClient) -> None:
    assert post(client, key="k" * 255).status_code == 202


@pytest.mark.parametrize(
    "key, code",
    [
        (None, "missing_idempotency_key"),
        ("", "missing_idempotency_key"),
        ("   ", "missing_idempotency_key"),
        ("k" * 256, "invalid_idempotency_key"),
        ("tab\there", "invalid_idempotency_key"),
    ],
)
def test_create_job_without_a_good_idempotency_key_returns_400(
    shared_client: FlaskClient, unchanged: None, key: str | None, code: str
) -> None:
    r = post(shared_client, key=key)
    assert r.status_code == 400
    assert r.get_json()["error"]["code"] == code


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{",
        b"{'type': 'listing_flyer'}",
        b'{"type": "listing_flyer",}',
        b"\xff\xfe{}",
        b'{"type": "listing_flyer", "payload": {"priceMinor": NaN}}',
        b'{"a": Infinity}',
        b"[" * 30000 + b"]" * 30000,
        b'{"payload": {"priceMinor": ' + b"9" * 5000 + b"}}",
    ],
    ids=["empty", "truncated", "single-quotes", "trailing-comma", "not-utf8", "nan", "infinity", "deep", "huge-int"],
)
def test_create_job_body_that_is_not_json_returns_400(
    shared_client: FlaskClient, unchanged: None, raw: bytes
) -> None:
    r = post(shared_client, raw)
    assert r.status_code == 400
    assert r.get_json()["error"]["code"] == "invalid_json"


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/xml",
     "text/json"],
)
def test_create_job_wrong_content_type_returns_415(
    shared_client: FlaskClient, unchanged: None, content_type: str | None
) -> None:
    headers = {"Idempotency-Key": "k"}
    if content_type:
        headers["Content-Type"] = content_type
    r = shared_client.post("/api/jobs", data=json.dumps(BODY), headers=headers)
    assert r.status_code == 415
    assert r.get_json()["error"]["code"] == "unsupported_media_type"


def test_create_job_body_too_large_returns_413(shared_client: FlaskClient, unchanged: None) -> None:
    limit = shared_client.application.config["MAX_CONTENT_LENGTH"]
    body = json.dumps({**BODY, "payload": {**LISTING, "title": "x" * limit}})
    r = post(shared_client, body)
    assert r.status_code == 413
    error = r.get_json()["error"]
    assert error["code"] == "payload_too_large" and str(limit) in error["message"]


def test_create_job_chunked_body_too_large_returns_413(shared_client: FlaskClient, unchanged: None) -> None:
    """No Content-Length to judge by: the limit applies while the body is read."""
    import io

    limit = shared_client.application.config["MAX_CONTENT_LENGTH"]
    r = shared_client.post("/api/jobs", input_stream=io.BytesIO(b" " * (limit + 10)),
                        headers={"Content-Type": "application/json", "Idempotency-Key": "k",
                             "Transfer-Encoding": "chunked"},
                    environ_overrides={"wsgi.input_terminated": True})  # what waitress sets for chunked
    assert r.status_code == 413


def test_create_job_body_at_the_limit_is_read(client: FlaskClient) -> None:
    limit = client.application.config["MAX_CONTENT_LENGTH"]
    body = json.dumps(BODY)
    r = post(client, body + " " * (limit - len(body)))
    assert r.status_code == 202


def fields(r) -> list[str]:  # type: ignore[no-untyped-def]
    assert r.status_code == 422, r.get_json()
    error = r.get_json()["error"]
    assert error["code"] == "validation_failed"
    return [d["field"] for d in error["details"]]


def with_payload(**changes: Any) -> dict[str, Any]:
    payload = {**LISTING, **changes}
    return {"type": "listing_flyer", "payload": {k: v for k, v in payload.items() if v is not ...}}


@pytest.mark.parametrize(
    "body, bad_field, problem",
    [
        (with_payload(title=...), "payload.title", "is required"),
        (with_payload(priceMinor=...), "payload.priceMinor", "is required"),
        (with_payload(currency=...), "payload.currency", "is required"),
        (with_payload(address=...), "payload.address", "is required"),
        (with_payload(bedrooms=...), "payload.bedrooms", "is required"),
        (with_payload(title=42), "payload.title", "must be a string"),
        (with_payload(priceMinor="270000000"), "payload.priceMinor", "must be an integer"),
        (with_payload(priceMinor=2700.5), "payload.priceMinor", "must be an integer"),
        (with_payload(priceMinor=True), "payload.priceMinor", "must be an integer"),
        (with_payload(bedrooms=None), "payload.bedrooms", "must be an integer"),
        (with_payload(priceMinor=-1), "payload.priceMinor", "must not be negative"),
        (with_payload(priceMinor=10**16), "payload.priceMinor", "must be at most"),
        (with_payload(bedrooms=-2), "payload.bedrooms", "must not be negative"),
        (with_payload(currency="XYZ"), "payload.currency", "must be one of"),
        (with_payload(currency="ngn"), "payload.currency", "must be one of"),
        (with_payload(title=""), "payload.title", "must not be blank"),
        (with_payload(title="   "), "payload.title", "must not be blank"),
        (with_payload(title="t" * 201), "payload.title", "must be at most 200 characters"),
        (with_payload(address="a" * 301), "payload.address", "must be at most 300 characters"),
        (with_payload(title="nul\x00byte"), "payload.title", "NUL"),
        (with_payload(address="half \ud800 pair"), "payload.address", "surrogates"),
        (with_payload(colour="red"), "payload.colour", "unknown field"),
        ({"type": "listing_flyer", "payload": [1, 2]}, "payload", "must be a JSON object"),
        ({"type": "listing_flyer", "payload": "text"}, "payload", "must be a JSON object"),
        ({"type": "listing_flyer"}, "payload", "is required"),
        ({"payload": LISTING}, "type", "is required"),
        ({"type": ["listing_flyer"], "payload": LISTING}, "type", "must be a string"),
        ({**BODY, "queue": ""}, "queue", "must not be blank"),
        ({**BODY, "queue": 7}, "queue", "must be a string"),
        ({**BODY, "queue": "q" * 101}, "queue", "at most 100"),
        ({**BODY, "queue": "a\x00b"}, "queue", "NUL"),
        ({**BODY, "priority": "high"}, "priority", "must be an integer"),
        ({**BODY, "priority": 1.5}, "priority", "must be an integer"),
        ({**BODY, "priority": False}, "priority", "must be an integer"),
        ({**BODY, "priority": 2**31}, "priority", "must be at most 2147483647"),
        ({**BODY, "max_attempts": 0}, "max_attempts", "must be at least 1"),
        ({**BODY, "delay_ms": -1}, "delay_ms", "must be at least 0"),
        ({**BODY, "run_at": "tomorrow"}, "run_at", "ISO 8601"),
        ({**BODY, "run_at": "2030-01-01T09:00:00"}, "run_at", "time zone"),
        ({**BODY, "runAt": "tomorrow"}, "runAt", "ISO 8601"),
            ({**BODY, "camelCase": 1}, "camelCase", "unknown field"),
        ([BODY], "body", "must be a JSON object"),
        ("listing_flyer", "body", "must be a JSON object"),
        (42, "body", "must be a JSON object"),
        (None, "body", "must be a JSON object"),
    ],
)
def test_create_job_invalid_body_returns_422_naming_the_field(
    shared_client: FlaskClient, unchanged: None, body: Any, bad_field: str, problem: str
) -> None:
    r = post(shared_client, json.dumps(body))
    assert fields(r) == [bad_field]
    detail = r.get_json()["error"]["details"][0]
    assert problem in detail["problem"]
    assert bad_field in r.get_json()["error"]["message"]


def test_create_job_422_names_every_bad_field_at_once(shared_client: FlaskClient, unchanged: None) -> None:
    r = post(shared_client, {"type": "nope", "queue": "", "priority": "x", "extra": 1,
                      "payload": {"title": "", "priceMinor": -5, "currency": "XXX", "bedrooms": "3", "pool": True}})
    # An unknown type has no payload rules to apply; whether it is refused is enqueue_job's to say, once
    # the rest of the request is valid (test_create_job_unknown_type_is_the_databases_qt422).
    assert sorted(fields(r)) == sorted(["queue", "priority", "extra"])
    r = post(shared_client, {"type": "listing_flyer",
                      "payload": {"title": "", "priceMinor": -5, "currency": "XXX", "bedrooms": "3", "pool": True}})
    assert fields(r) == ["payload.title", "payload.priceMinor", "payload.currency", "payload.address",
                         "payload.bedrooms", "payload.pool"]


def test_create_job_unknown_type_is_the_databases_qt422(shared_client: FlaskClient, unchanged: None) -> None:
    """The same answer as enqueue_job's and the client's: QT422, a 422, and how to register the type."""
    r = post(shared_client, {"type": "send_reciept", "payload": {"order": 1}})
    assert r.status_code == 422
    error = r.get_json()["error"]
    assert error["code"] == "unknown_task_type"
    assert error["details"]["sqlstate"] == "QT422"
    assert "'send_reciept' is not registered" in error["message"]
    assert "pgqw tasks register --tasks" in error["message"]
    assert "accept_unregistered_types" in error["details"]["hint"]


def test_create_job_validation_happens_before_the_key_is_spent(client: FlaskClient) -> None:
    """A refused body does not use up its key: the corrected body with the same key makes the job."""
    assert post(client, with_payload(priceMinor=-1), key="retry-me").status_code == 422
    assert post(client, key="retry-me").status_code == 202


def test_create_job_non_ascii_text_round_trips(client: FlaskClient) -> None:
    body = with_payload(title="Duplex · Lekki ₦ 🏠", address="Ọba Akran Avenue, Ikeja")
    r = post(client, body)
    assert r.status_code == 202
    assert r.get_json()["data"]["payload"]["title"] == "Duplex · Lekki ₦ 🏠"


def test_create_job_does_not_wait_for_or_start_the_work(client: FlaskClient, conn: psycopg.Connection) -> None:
    job = post(client).get_json()["data"]
    assert rows(conn, "select count(*) as n from job_attempts")[0]["n"] == 0
    assert db.get_result(conn, job_id=uuid.UUID(job["id"])) is None


def test_create_job_max_attempts_comes_from_the_environment(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """MAX_ATTEMPTS is copied into each job the API creates; unset, queue_settings decides (5)."""
    from pgqw.app import close_pool, create_app

    monkeypatch.setenv("MAX_ATTEMPTS", "3")
    app = create_app({"TESTING": True, "DATABASE_URL": db_url})
    try:
        r = post(app.test_client())
        assert r.status_code == 202
        assert r.get_json()["data"]["maxAttempts"] == 3
    finally:
        close_pool(app)
    monkeypatch.delenv("MAX_ATTEMPTS")
    app = create_app({"TESTING": True, "DATABASE_URL": db_url})
    try:
        r = post(app.test_client(), key="key-2")
        assert r.get_json()["data"]["maxAttempts"] == 5
    finally:
        close_pool(app)
