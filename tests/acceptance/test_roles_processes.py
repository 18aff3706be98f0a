"""The real code runs on the least-privilege roles: real worker processes log in as pgqw_worker and
the real API (app.create_app) as pgqw_api, and together they take jobs through every path: a
retryable failure to dead, a retry through the API, a job handed back on shutdown, a job swept
after its worker was killed, successes with flyers the API serves, /metrics. If a grant were
missing, a call would fail with 42501 and a job would never reach its status."""
from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any, Iterator

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

from pgqw.app import close_pool, create_app
from tests.helpers import LISTING, one, rows
from tests.worker.conftest import WorkerProcess, wait_for

SLOW = {"SIM_MIN_LATENCY_MS": "20000", "SIM_MAX_LATENCY_MS": "20000"}  # still running when we act


@pytest.fixture
def api(db_url: str) -> Iterator[Flask]:
    app = create_app({"TESTING": True, "DATABASE_URL": make_conninfo(db_url, user="pgqw_api"), "MAX_ATTEMPTS": 2})
    yield app
    close_pool(app)


@pytest.fixture
def workers(db_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """workers("id", env={...}) → a started worker process logged in as pgqw_worker."""
    dsn = make_conninfo(db_url, user="pgqw_worker")
    started: list[WorkerProcess] = []

    def start(worker_id: str, env: dict[str, str] | None = None) -> WorkerProcess:
        proc = WorkerProcess(worker_id, dsn, tmp_path / f"{worker_id}.log", env or {}, [])
        started.append(proc)
        return proc.started()

    start.started = started  # type: ignore[attr-defined]
    yield start
    for proc in started:
        proc.close()
    for proc in started:
        print(f"----- log of worker {proc.worker_id} (exit {proc.proc.returncode}) -----\n{proc.text()}")


def post_job(client: FlaskClient, queue: str = "default") -> str:
    r = client.post("/api/jobs", json={"type": "listing_flyer", "payload": dict(LISTING), "queue": queue},
                    headers={"Idempotency-Key": f"roles-{uuid.uuid4()}"})
    assert r.status_code == 202, r.get_data(as_text=True)
    return r.get_json()["data"]["id"]


def job(client: FlaskClient, job_id: str) -> dict[str, Any]:
    r = client.get(f"/api/jobs/{job_id}")
    assert r.status_code == 200, r.get_data(as_text=True)
    return r.get_json()["data"]


def until_status(client: FlaskClient, ids: list[str], status: str, timeout: float = 20.0) -> None:
    wait_for(lambda: f"{status}: {[(i[:8], job(client, i)['status']) for i in ids]}",
             lambda: all(job(client, i)["status"] == status for i in ids), timeout)


def outcomes(client: FlaskClient, job_id: str) -> list[tuple[str, str | None]]:
    r = client.get(f"/api/jobs/{job_id}/attempts")
    assert r.status_code == 200
    return [(a["workerId"], a["outcome"]) for a in r.get_json()["data"]]


def test_roles_real_worker_and_api_run_every_path_on_their_own_roles(
    api: Flask, workers: Any, conn: psycopg.Connection
) -> None:
    client = api.test_client()
    with api.extensions["pgqw.pool"].connection() as c:
        assert one(c, "select current_user as u")["u"] == "pgqw_api"

    # 1. Every attempt fails (retryably) until the job is dead. This worker has no lease setting:
    #    its claims get queue_settings.lease_ms, which the worker learns from the claim.
    failing = workers("roles-fail", env={"SIM_FAILURE_RATE": "1", "STUCK_JOB_TIMEOUT_MS": ""})
    assert "lease queue_settings" in failing.lines("worker started:")[0]
    flaky = post_job(client)
    until_status(client, [flaky], "dead")
    assert "60000ms granted by the claim" in failing.lines("lease")[0]
    assert outcomes(client, flaky) == [("roles-fail", "failed"), ("roles-fail", "failed")]
    assert len(failing.lines("failed")) == 2 and "next run" in failing.lines("failed")[0]
    failing.signal(signal.SIGTERM)
    assert failing.wait(10) == 0

    # 2. A job still running at shutdown is handed back; its lease was extended by heartbeats meanwhile.
    slow = workers("roles-slow", env={**SLOW, "SHUTDOWN_GRACE_MS": "300"})
    held = post_job(client)
    until_status(client, [held], "processing")
    first_lease = one(conn, "select lease_expires_at from jobs where id = %s", [held])["lease_expires_at"]
    wait_for("a heartbeat to extend the lease",
             lambda: one(conn, "select lease_expires_at from jobs where id = %s", [held])["lease_expires_at"]
             > first_lease, timeout=10)
    slow.signal(signal.SIGTERM)
    assert slow.wait(10) == 0
    assert len(slow.lines("handed back")) == 1
    assert job(client, held)["status"] == "pending"

    # 3. The next worker to take it is killed mid-job: the sweep of another worker recovers it.
    doomed = workers("roles-killed", env=SLOW)
    wait_for("the handed-back job claimed again",
             lambda: job(client, held)["lockedBy"] == "roles-killed", timeout=10)
    doomed.signal(signal.SIGKILL)
    assert doomed.wait(5) == -signal.SIGKILL

    # 4. A healthy worker: sweeps, runs everything to success, saves flyers. The API retries the dead job.
    healthy = workers("roles-ok")
    fresh = [post_job(client) for _ in range(3)]
    r = client.post(f"/api/jobs/{flaky}/retry")
    assert r.status_code == 202 and r.get_json()["data"]["status"] == "pending"
    everything = [flaky, held, *fresh]
    until_status(client, everything, "succeeded", timeout=30)

    assert outcomes(client, flaky) == [("roles-fail", "failed"), ("roles-fail", "failed"), ("roles-ok", "succeeded")]
    assert outcomes(client, held) == [("roles-slow", "abandoned"), ("roles-killed", "abandoned"),
                                      ("roles-ok", "succeeded")]
    assert len(healthy.lines("swept")) == 1 and "of worker roles-killed" in healthy.lines("swept")[0]
    for job_id in everything:
        r = client.get(f"/api/jobs/{job_id}/flyer")
        assert r.status_code == 200 and r.mimetype == "application/pdf"
        assert r.data.startswith(b"%PDF-")

    listed = client.get("/api/jobs?status=succeeded&limit=2")
    assert listed.status_code == 200
    page = listed.get_json()["data"]
    assert len(page["jobs"]) == 2 and page["nextCursor"]
    rest = client.get(f"/api/jobs?status=succeeded&limit=10&cursor={page['nextCursor']}").get_json()["data"]
    assert sorted(j["id"] for j in page["jobs"] + rest["jobs"]) == sorted(everything)
    stats = client.get("/api/stats").get_json()["data"]
    assert stats["counts"]["succeeded"] == 5 and stats["total"] == 5

    metrics = client.get("/metrics")
    assert metrics.status_code == 200
    text = metrics.get_data(as_text=True)
    assert 'pgqw_jobs{queue="default",status="succeeded"} 5.0' in text
    assert 'pgqw_worker_events_total{event="swept"} 1.0' in text
    assert 'pgqw_worker_events_total{event="handed_back"} 1.0' in text

    # The owner's view agrees, and no process met a refused privilege.
    assert one(conn, "select count(*) as n from job_results where content_type = 'application/pdf'")["n"] == 5
    assert rows(conn, "select distinct worker_id from job_attempts order by 1") == [
        {"worker_id": w} for w in ("roles-fail", "roles-killed", "roles-ok", "roles-slow")]
    for proc in workers.started:
        log = proc.text()
        assert "42501" not in log and "permission denied" not in log, proc.worker_id
    # Who is connected, as the server sees it: the healthy worker and the API, each as its role.
    logins = {(r["usename"], r["application_name"].split(" ")[0]) for r in rows(
        conn, "select usename, application_name from pg_stat_activity"
              " where datname = current_database() and pid <> pg_backend_pid() and usename is not null")}
    assert logins == {("pgqw_worker", "pgqw-worker"), ("pgqw_api", "pgqw-api")}


def test_roles_worker_logged_in_as_the_api_role_stops_at_its_first_call(
    db_url: str, tmp_path: Path, conn: psycopg.Connection
) -> None:
    """The other way round: a worker given the API's login is refused (42501) at its first call of a
    worker function, says so in one line and exits, and the job it could see stays pending: the
    grants, not the code, decide who may work the queue."""
    job_id = one(conn, "select (e.job).id from enqueue_job('listing_flyer', %s::jsonb, 'roles-wrong') e",
                 [Jsonb(dict(LISTING))])["id"]
    proc = WorkerProcess("roles-wrong", make_conninfo(db_url, user="pgqw_api"), tmp_path / "roles-wrong.log",
                         {"STUCK_JOB_TIMEOUT_MS": "2000"}, [])
    try:
        assert proc.wait(30) != 0
        assert "42501" in proc.text() and "permission denied for function" in proc.text()
    finally:
        proc.close()
        print(proc.text())
    row = one(conn, "select status, attempts from jobs where id = %s", [job_id])
    assert (row["status"], row["attempts"]) == ("pending", 0)
