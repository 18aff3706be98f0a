"""The deploy order of a team, in real processes: migrate (with the tasks), then the API and the workers in
any order. Jobs posted before any worker has run answer 202 at once and succeed when a worker starts."""
from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import psycopg

from pgqw.launch import wait_for
from tests.helpers import SCHEMA
from tests.lab.stack import Stack
from tests.test_cli import _pgqw

# The original README's request, as it was written there.
FIRST_FLYER = {"type": "listing_flyer", "payload": {
    "title": "3-bedroom apartment in Yaba", "priceMinor": 270000000, "currency": "NGN",
    "address": "12 Herbert Macaulay Way, Yaba, Lagos", "bedrooms": 3}}
FAST = {"SIM_MIN_LATENCY_MS": "10", "SIM_MAX_LATENCY_MS": "20", "SIM_FAILURE_RATE": "0"}


def _post(url: str, body: dict, key: str) -> tuple[int, dict]:
    request = urllib.request.Request(f"{url}/api/jobs", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Idempotency-Key": key})
    with urllib.request.urlopen(request, timeout=10) as r:
        return r.status, json.load(r)


def test_migrate_then_the_api_accepts_jobs_before_any_worker_and_a_worker_started_later_runs_them(
    empty_db_url: str, tmp_path: Path
) -> None:
    done = _pgqw("migrate", env={"DATABASE_URL": empty_db_url})
    assert done.returncode == 0, done.stderr
    with Stack(empty_db_url, tmp_path / "logs", env=FAST) as stack:
        url = stack.start_api()
        status, answer = _post(url, FIRST_FLYER, "my-first-flyer")
        assert status == 202 and answer["data"]["status"] == "pending", answer
        burst = _pgqw("burst", "3", "--url", url, env={"DATABASE_URL": empty_db_url})
        assert burst.returncode == 0 and "HTTP 202: 3" in burst.stdout, burst.stdout + burst.stderr
        with psycopg.connect(empty_db_url, autocommit=True) as conn:
            assert conn.execute(f"select count(*) from {SCHEMA}.workers").fetchone() == (0,)  # none has ever run

            def statuses() -> list[str]:
                return [r[0] for r in conn.execute(f"select status from {SCHEMA}.jobs order by created_at")]

            assert statuses() == ["pending"] * 4
            stack.start_worker("late")
            wait_for(lambda: statuses() == ["succeeded"] * 4, timeout=60, what="the four jobs to succeed")

