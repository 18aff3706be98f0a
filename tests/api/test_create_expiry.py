"""POST /api/jobs with expiresAt or expireAfterMs: the job's expiry, stored with it and answered; an expiry not
after the job's start, both fields or a bad value is a 422 that changes nothing."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from flask.testing import FlaskClient

from tests.api.test_create import BODY, post
from tests.helpers import job_row, snapshot


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def test_create_job_with_expires_at_stores_and_answers_the_expiry(client: FlaskClient, conn: psycopg.Connection) -> None:
    at = (datetime.now(timezone.utc) + timedelta(hours=1)).replace(microsecond=0)
    r = post(client, {**BODY, "expiresAt": _iso(at)})
    assert r.status_code == 202
    data = r.get_json()["data"]
    assert job_row(conn, data["id"])["expires_at"] == at and data["expiresAt"] == _iso(at).replace("Z", ".000Z")
    after = post(client, {**BODY, "expireAfterMs": 60_000, "delayMs": 3_600_000}, key="key-2")
    row = job_row(conn, after.get_json()["data"]["id"])
    assert after.status_code == 202 and row["expires_at"] == row["run_at"] + timedelta(minutes=1)
    plain = post(client, key="key-3")
    assert plain.get_json()["data"]["expiresAt"] is None


@pytest.mark.parametrize(("extra", "field"), [
    ({"expiresAt": "2001-01-01T00:00:00Z"}, "expiresAt"),
    ({"expiresAt": "soon"}, "expiresAt"),
    ({"runAt": "PLUS2H", "expiresAt": "PLUS1H"}, "expiresAt"),
    ({"expiresAt": "PLUS1H", "expireAfterMs": 1000}, "expiresAt"),
    ({"expireAfterMs": 0}, "expireAfterMs"),
    ({"expireAfterMs": "1000"}, "expireAfterMs"),
])
def test_create_job_with_a_bad_expiry_is_refused_and_changes_nothing(
    client: FlaskClient, conn: psycopg.Connection, extra: dict, field: str
) -> None:
    now = datetime.now(timezone.utc)
    times = {"PLUS1H": _iso(now + timedelta(hours=1)), "PLUS2H": _iso(now + timedelta(hours=2))}
    body = {**BODY, **{k: times.get(v, v) if isinstance(v, str) else v for k, v in extra.items()}}
    before = snapshot(conn)
    r = post(client, body)
    assert r.status_code == 422
    assert [e["field"] for e in r.get_json()["error"]["details"]] == [field]
    assert snapshot(conn) == before
