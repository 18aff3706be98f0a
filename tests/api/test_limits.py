"""The API's limits, each a clear 4xx that changes nothing, and held by the database where it owns
the rule: idempotency-key length and charset (constraint jobs_idempotency_key_charset), payload size
(queue_settings.max_payload_bytes, QV413); and the API's own where only it can hold them: how deeply a
body nests, the range of run_at. Body size and page size: tests/api/test_create.py and
tests/api/test_read.py."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from flask.testing import FlaskClient

from tests.helpers import LISTING, one

BODY = {"type": "listing_flyer", "payload": LISTING}


@pytest.mark.parametrize("key", [
    "has space", "tab\there", "caf\u00e9", "k" * 256, " leading", "trailing ", "\x7f",
], ids=["space", "tab", "non-ascii", "256-chars", "leading-space", "trailing-space", "del"])
def test_limits_idempotency_key_charset_and_length_are_400(shared_client: FlaskClient, unchanged: None,
                                                            key: str) -> None:
    r = shared_client.post("/api/jobs", json=BODY, headers={"Idempotency-Key": key})
    assert r.status_code == 400
    assert r.get_json()["error"]["code"] == "invalid_idempotency_key"


@pytest.mark.parametrize("key", ["a", "~" * 255, "order-42:v1/2026.11.30_#!@$%^&*()+={}[]|\\;'\"<>,?`"])
def test_limits_idempotency_key_of_visible_ascii_is_accepted(client: FlaskClient, conn: psycopg.Connection,
                                                            key: str) -> None:
    r = client.post("/api/jobs", json=BODY, headers={"Idempotency-Key": key})
    assert r.status_code == 202
    stored = conn.execute("select idempotency_key from jobs where id = %s", [r.get_json()["data"]["id"]]).fetchone()
    assert stored == (key,)


@pytest.mark.parametrize("key", ["has space", "caf\u00e9", "nul\u0001", ""])
def test_limits_idempotency_key_rule_is_a_table_constraint(conn: psycopg.Connection, key: str) -> None:
    # Even the table's owner, writing the row by hand, cannot store a key outside the rule.
    with pytest.raises(psycopg.errors.CheckViolation) as exc:
        conn.execute("insert into jobs (type, payload, max_attempts, idempotency_key) values ('listing_flyer', '{}', 5, %s)", [key])
    assert exc.value.diag.constraint_name in ("jobs_idempotency_key_charset", "jobs_idempotency_key_length")
    assert conn.execute("select count(*) from jobs").fetchone()[0] == 0


def test_limits_payload_size_is_the_databases_rule(client: FlaskClient, conn: psycopg.Connection) -> None:
    # The API has no payload limit of its own: lower the table's and the same request becomes a 413.
    size = len(json.dumps(LISTING).encode())
    assert client.post("/api/jobs", json=BODY, headers={"Idempotency-Key": "fits"}).status_code == 202
    conn.execute("update queue_settings set max_payload_bytes = %s", [size // 2])
    r = client.post("/api/jobs", json=BODY, headers={"Idempotency-Key": "too-big"})
    assert r.status_code == 413
    assert r.get_json()["error"]["code"] == "payload_too_large"
    assert r.get_json()["error"]["details"]["sqlstate"] == "QV413"
    assert conn.execute("select count(*) from jobs").fetchone()[0] == 1


def test_limits_constraint_violation_is_a_400_naming_the_rule(client: FlaskClient, conn: psycopg.Connection) -> None:
    # A table rule the API does not check itself still ends as a 400 in the envelope, never a 500:
    # here a DBA's extra constraint on the queue name.
    conn.execute("alter table jobs add constraint jobs_queue_no_test check (queue <> 'forbidden')")
    r = client.post("/api/jobs", json={**BODY, "queue": "forbidden"}, headers={"Idempotency-Key": "q-1"})
    assert r.status_code == 400
    error = r.get_json()["error"]
    assert error["code"] == "constraint_violated"
    assert error["details"] == {"sqlstate": "23514", "constraint": "jobs_queue_no_test"}
    assert conn.execute("select count(*) from jobs").fetchone()[0] == 0


def nested(depth: int) -> str:
    """A body whose payload holds arrays nested so that the body is depth levels deep."""
    inner = depth - 2  # the body and the payload are two levels
    return json.dumps({"type": "noop", "payload": {"a": "@"}}).replace('"@"', "[" * inner + "]" * inner)


def test_limits_body_nested_100_levels_is_accepted(client: FlaskClient) -> None:
    r = client.post("/api/jobs", data=nested(100), content_type="application/json",
                    headers={"Idempotency-Key": "deep-100"})
    assert r.status_code == 202


@pytest.mark.parametrize("depth", [101, 500, 940, 990])
def test_limits_body_nested_deeper_is_400_never_500(shared_client: FlaskClient, unchanged: None,
                                                     depth: int) -> None:
    # Near the interpreter's recursion limit such a body used to parse, then fail to be stored: a 500.
    r = shared_client.post("/api/jobs", data=nested(depth), content_type="application/json",
                           headers={"Idempotency-Key": f"deep-{depth}"})
    assert r.status_code == 400
    assert r.get_json()["error"]["code"] == "invalid_json"


def _in(days: float) -> str:
    return (datetime.now(timezone.utc) + timedelta(days=days)).isoformat()


RUN_AT_PROBLEM = [{"field": "run_at", "problem": "must be between 1970-01-01T00:00:00Z and 366 days from now"}]


@pytest.mark.parametrize("run_at", [
    "0001-01-01T00:00:00+14:00",  # year 0 in UTC
    "9999-12-31T23:59:59-14:00",  # year 10000 in UTC
    "1969-12-31T23:59:59Z",
    "9999-06-01T00:00:00Z",
    "1970-01-01T00:59:59+01:00",  # a second before the epoch
    "in 367 days",
])
def test_limits_run_at_out_of_range_is_422_never_500(shared_client: FlaskClient, unchanged: None,
                                                      run_at: str) -> None:
    # The same bounds as enqueue_job's over SQL (tests/sql/test_enqueue.py). A time that PostgreSQL
    # stores but psycopg cannot read back (year 0 or 10000 in the session's time zone) used to be a 500.
    run_at = _in(367) if run_at == "in 367 days" else run_at
    r = shared_client.post("/api/jobs", json={**BODY, "run_at": run_at}, headers={"Idempotency-Key": "far"})
    assert r.status_code == 422
    assert r.get_json()["error"]["details"] == RUN_AT_PROBLEM


@pytest.mark.parametrize("run_at", ["1970-01-01T00:00:00Z", "1970-01-01T01:00:00+01:00", "in 365 days"])
def test_limits_run_at_at_the_ends_of_its_range_is_accepted(client: FlaskClient, run_at: str) -> None:
    run_at = _in(365) if run_at == "in 365 days" else run_at
    r = client.post("/api/jobs", json={**BODY, "run_at": run_at}, headers={"Idempotency-Key": "edge"})
    assert r.status_code == 202
    assert client.get(f"/api/jobs/{r.get_json()['data']['id']}").status_code == 200


def test_limits_delay_ms_is_at_most_366_days(client: FlaskClient, conn: psycopg.Connection) -> None:
    most = 366 * 24 * 3600 * 1000
    r = client.post("/api/jobs", json={**BODY, "delay_ms": most + 1}, headers={"Idempotency-Key": "late"})
    assert r.status_code == 422
    assert r.get_json()["error"]["details"] == [{"field": "delay_ms", "problem": f"must be at most {most}"}]
    r = client.post("/api/jobs", json={**BODY, "delay_ms": most}, headers={"Idempotency-Key": "latest"})
    assert r.status_code == 202  # and enqueue_job, over SQL, takes exactly as much
    assert one(conn, "select run_at - created_at as wait from jobs")["wait"] == timedelta(days=366)
