"""The real API and a real worker through a real PgBouncer in transaction mode (tests/pgbouncer.py).

Both log in through PgBouncer as their own roles with PGQW_PGBOUNCER=1 (no server-side prepared
statements, no startup options); the worker LISTENs on a direct connection (WORKER_LISTEN_URL), while
its polling is made so slow (POLL_INTERVAL_MS, SWEEP_INTERVAL_MS: 10 minutes) that only a LISTEN
wake-up can explain a job starting within seconds. 200 jobs posted at once from 16 threads must all
be accepted (no 500 "prepared statement _pg3_0 does not exist", which one request in about thirteen got
before), and all must succeed.
"""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgqw import db, launch
from tests.pgbouncer import PgBouncer

JOBS = 200
SLOW_POLL_MS = "600000"


def post_job(base: str) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"{base}/api/jobs", method="POST", data=json.dumps({"type": "noop", "payload": {}}).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": f"bouncer-{uuid.uuid4()}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


@pytest.fixture
def children(request: pytest.FixtureRequest) -> Iterator[list[launch.Child]]:
    started: list[launch.Child] = []
    yield started
    launch.stop_all(started, timeout=15)
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for child in started:
            print(f"----- {child.name} (exit {child.returncode}) -----\n{child.tail(60)}")


def statuses(conn: psycopg.Connection, ids: list[str]) -> dict[str, str]:
    return {str(i): db.get_job(conn, job_id=i).status for i in ids}  # type: ignore[union-attr]


@pytest.mark.timeout(180)
def test_pgbouncer_api_and_worker_run_200_jobs_in_transaction_mode_with_listen_direct(
    pgbouncer: PgBouncer, db_url: str, children: list[launch.Child], tmp_path: Path
) -> None:
    dbname = str(conninfo_to_dict(db_url)["dbname"])
    api = launch.start_api(env={"PGQW_PGBOUNCER": "1", "API_THREADS": "8"},
                           database_url=pgbouncer.url(dbname, "pgqw_api"), log=tmp_path / "api.log")
    children.append(api)
    worker = launch.start_worker(
        "bouncer-w1", concurrency=4, log=tmp_path / "worker.log",
        database_url=pgbouncer.url(dbname, "pgqw_worker"),
        env={"PGQW_PGBOUNCER": "1", "WORKER_LISTEN_URL": make_conninfo(db_url, user="pgqw_worker"),
             "POLL_INTERVAL_MS": SLOW_POLL_MS, "SWEEP_INTERVAL_MS": SLOW_POLL_MS})
    children.append(worker)
    api.wait_ready(30)
    worker.wait_ready(30)
    assert api.url is not None

    with psycopg.connect(db_url, autocommit=True) as conn:
        # Woken by LISTEN: the worker is idle until its next poll, 10 minutes away.
        status, body = post_job(api.url)
        assert status == 202, body
        first = body["data"]["id"]
        posted = time.monotonic()
        launch.wait_for(lambda: statuses(conn, [first])[first] == "succeeded", timeout=15,
                        what=lambda: f"the first job to succeed (LISTEN wake-up): {statuses(conn, [first])}")
        assert time.monotonic() - posted < 15

        with ThreadPoolExecutor(max_workers=16) as pool:
            answers = list(pool.map(lambda _n: post_job(api.url), range(JOBS)))  # type: ignore[arg-type]
        refused = [(s, b) for s, b in answers if s != 202]
        assert not refused, f"{len(refused)} of {JOBS} not accepted, e.g. {refused[:3]}"
        ids = [b["data"]["id"] for _s, b in answers]
        assert len(set(ids)) == JOBS

        def all_succeeded() -> bool:
            return set(statuses(conn, ids).values()) == {"succeeded"}

        launch.wait_for(all_succeeded, timeout=90, what=lambda: f"every job to succeed: "
                        f"{sorted(set(statuses(conn, ids).values()))}")

    for child in (api, worker):
        assert child.alive(), child.tail()
        assert "prepared statement" not in child.output(), child.tail()
        assert "Traceback" not in child.output(), child.tail()
    assert "listen on" in worker.output()  # the worker said it LISTENs (its "worker started" line)


def test_pgbouncer_sessions_get_the_roles_timeouts_from_migrate(pgbouncer: PgBouncer, db_url: str) -> None:
    """Through PgBouncer no connection may carry its own settings; the roles' (db/security/settings.sql)
    hold all the same."""
    dbname = str(conninfo_to_dict(db_url)["dbname"])
    with psycopg.connect(pgbouncer.url(dbname, "pgqw_api"), prepare_threshold=None, autocommit=True) as api:
        assert api.execute("show statement_timeout").fetchone() == ("5s",)
    with psycopg.connect(pgbouncer.url(dbname, "pgqw_worker"), prepare_threshold=None, autocommit=True) as worker:
        assert worker.execute("show idle_in_transaction_session_timeout").fetchone() == ("5s",)
