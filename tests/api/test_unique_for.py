"""POST /api/jobs with unique_for_ms: the Idempotency-Key is unique only within a window of run_at."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import psycopg
from flask.testing import FlaskClient

from tests.api.test_create import BODY, job_count, post

HOUR_MS = 3_600_000
START = (datetime.now(timezone.utc) + timedelta(days=2)).replace(hour=10, minute=0, second=0, microsecond=0)


def at(offset: timedelta) -> str:
    return (START + offset).isoformat()


def test_create_job_unique_for_ms_same_window_200_next_window_202(
    client: FlaskClient, conn: psycopg.Connection
) -> None:
    first = post(client, {**BODY, "run_at": at(timedelta(minutes=1)), "unique_for_ms": HOUR_MS}, key="hourly")
    again = post(client, {**BODY, "run_at": at(timedelta(minutes=59)), "unique_for_ms": HOUR_MS}, key="hourly")
    later = post(client, {**BODY, "run_at": at(timedelta(hours=1)), "unique_for_ms": HOUR_MS}, key="hourly")
    assert (first.status_code, again.status_code, later.status_code) == (202, 200, 202)
    assert again.get_json()["data"]["id"] == first.get_json()["data"]["id"]
    assert later.get_json()["data"]["id"] != first.get_json()["data"]["id"]
    assert job_count(conn) == 2


def test_create_job_unique_for_ms_out_of_range_returns_422_and_a_long_key_400(
    client: FlaskClient, conn: psycopg.Connection
) -> None:
    for bad in (0, -1, "3600000", 366 * 86_400_000 + 1):
        r = post(client, {**BODY, "unique_for_ms": bad}, key="bad-window")
        assert r.status_code == 422 and "unique_for_ms" in r.get_data(as_text=True), bad
    # The stored key is `<key>@<window start>`: with a window the key may have 230 characters, not 255.
    r = post(client, {**BODY, "unique_for_ms": HOUR_MS}, key="k" * 231)
    assert r.status_code == 400 and "230" in r.get_data(as_text=True)
    assert job_count(conn) == 0
