"""A short restart of the PostgreSQL server under a busy worker, on a server of the test's own
(tests/lab/cluster.py): every job it was running keeps its lease and runs once.

The worker holds 3 s leases on jobs of 6-8 s and heartbeats every second. Half a second after a
heartbeat the server is stopped (fast: every connection is cut) and started again, refusing
connections for about 1.4 s; the test sweeps meanwhile, as another worker would, on a connection of
its own. The worker must renew its leases within about a second of the server's return, whatever the
pool's own reconnect delay: a job swept meanwhile would run a second time. The pool alone is tested
the same way. Without a server the test owns (no PostgreSQL binaries) the tests are skipped, except
in CI, where they fail.
"""
from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Iterator

import psycopg
import pytest

from pgqw import db, tasks
from pgqw.migrate import migrate
from pgqw.worker.connection.database import POOL_RECONNECT_S, Database
from tests.helpers import cannot_run, enqueue, rows
from tests.lab import new_database
from tests.lab.cluster import OwnedCluster
from tests.worker.conftest import WorkerProcess, wait_for
from tests.worker.parts import log, settings

LEASE_MS = 3000
JOBS = 8
RESTART_DOWN_S = 1.25     # refusing connections for about 1.4 s (stop, down, start)


@pytest.fixture(scope="module")
def cluster() -> Iterator[OwnedCluster]:
    """A server of this module's own."""
    try:
        made = OwnedCluster()
        made.start()
    except Exception as exc:  # noqa: BLE001 - no binaries, or no way to run them here
        cannot_run(f"a PostgreSQL server of the test's own cannot be made: {exc!r}")
    try:
        yield made
    finally:
        made.cleanup()


@pytest.fixture
def server(cluster: OwnedCluster, request: pytest.FixtureRequest) -> Iterator[OwnedCluster]:
    """The module's server, running, with a fresh migrated database "q" and the demo's task types;
    running again afterwards."""
    try:
        with psycopg.connect(cluster.url(), autocommit=True) as admin:
            admin.execute("drop database if exists q with (force)")
            new_database(admin, "q")
        migrate(cluster.url("q"))
        with psycopg.connect(cluster.url("q"), autocommit=True) as conn:
            from pgqw import demo  # noqa: F401 - its @task definitions
            db.register_task_types(conn, types=[t.registration() for t in tasks.registry])
        yield cluster
    finally:
        if not cluster.running():
            cluster.start()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed and cluster.logfile.exists():
            print(f"----- server log -----\n{cluster.logfile.read_text(errors='replace')[-3000:]}")


def _held(conn: psycopg.Connection) -> int:
    return rows(conn, "select count(*) as n from jobs where status = 'processing'")[0]["n"]


def _statuses(conn: psycopg.Connection) -> dict[str, int]:
    return {r["status"]: r["n"] for r in rows(conn, "select status, count(*) as n from jobs group by status")}


def _renewed(conn: psycopg.Connection) -> tuple[datetime, float] | None:
    """When the running jobs' leases were last renewed (all at once: one heartbeat call), and how long
    ago, by the server's clock; None before the first heartbeat of every one."""
    found = rows(conn, "select count(*) filter (where lease_expires_at <= started_at + %(lease)s) as unbeaten,"
                       " min(lease_expires_at) - %(lease)s as at,"
                       " extract(epoch from now() - (min(lease_expires_at) - %(lease)s))::float8 as ago"
                       " from jobs where status = 'processing'", {"lease": timedelta(milliseconds=LEASE_MS)})[0]
    return None if found["unbeaten"] or found["at"] is None else (found["at"], found["ago"])


def test_worker_keeps_every_lease_through_a_short_server_restart(server: OwnedCluster, tmp_path: Path) -> None:
    url = server.url("q")
    worker = WorkerProcess("restarted", url, tmp_path / "worker.log", env={
        "STUCK_JOB_TIMEOUT_MS": str(LEASE_MS),      # heartbeat every 1 s
        "SIM_MIN_LATENCY_MS": "6000", "SIM_MAX_LATENCY_MS": "8000",
        "SWEEP_INTERVAL_MS": "200",                 # its own sweep would take back a lease that ran out
    }, args=["--concurrency", str(JOBS)])
    swept: list[db.Swept] = []
    try:
        worker.started()
        with psycopg.connect(url, autocommit=True) as conn:
            ids = [enqueue(conn).id for _ in range(JOBS)]
            wait_for(f"{JOBS} jobs running", lambda: _held(conn) == JOBS)
            # The restart comes half a second after a heartbeat: every lease then has 2.5 s left, of
            # which the server refuses connections for about 1.4 s.
            before, _ = wait_for("half a second after a heartbeat of every job",
                                 lambda: (r := _renewed(conn)) is not None and 0.5 <= r[1] < 0.7 and r,
                                 timeout=5, every=0.01)
        server.restart(down_s=RESTART_DOWN_S, mode="fast")
        with psycopg.connect(url, autocommit=True) as conn:
            # Another worker's sweep, on a connection of its own (made after the restart): it takes
            # any lease that runs out, as soon as it does. And when the leases were renewed again.
            after: list[datetime] = []

            def finished() -> bool:
                swept.extend(db.sweep_stuck(conn))
                if not after and (r := _renewed(conn)) is not None and r[0] > before:
                    after.append(r[0])
                return bool(swept) or _statuses(conn).get("succeeded", 0) == JOBS  # swept: it ran twice

            wait_for(lambda: f"all {JOBS} jobs finished (now {_statuses(conn)})", finished, timeout=20, every=0.02)
            if after:
                print(f"leases renewed {(after[0] - before).total_seconds():.2f}s apart across the restart "
                      f"(a lease is {LEASE_MS / 1000:g}s)")
            attempts = rows(conn, "select job_id, attempt, outcome, error from job_attempts order by job_id, attempt")
        assert worker.lines("db error"), "the restart did not reach the worker"
        assert swept == [], f"{len(swept)} job(s) swept while they ran: {swept}"
        assert [(a["attempt"], a["outcome"]) for a in attempts] == [(1, "succeeded")] * JOBS, attempts
        assert {a["job_id"] for a in attempts} == set(ids)
        assert not worker.lines("lost") and not worker.lines("swept") and not worker.lines("ignored late result")
    finally:
        worker.close()
        print(f"----- log of worker restarted -----\n{worker.text()}")


def test_database_pool_reconnects_within_a_fraction_of_a_second_of_a_restart(server: OwnedCluster) -> None:
    """The worker's pool, alone: a call made while the server is down gets a connection as soon as the
    server accepts again, not at the pool's own next try (1 s, then 2 s, 4 s… after the last)."""
    worker_log, out = log()
    database = Database(server.url("q"), settings(listen=False), worker_log, threading.Event())
    database.open()
    try:
        def one(conn: psycopg.Connection) -> int:
            return conn.execute("select 1").fetchone()[0]

        assert database.call("probe", one) == 1
        server.stop("fast")
        answered: list[tuple[int, float]] = []
        probe = threading.Thread(target=lambda: answered.append((database.call("probe", one), time.monotonic())))
        probe.start()
        wait_for("the probe finding its connection broken", lambda: out.lines("db error"))
        time.sleep(RESTART_DOWN_S)  # the outage itself
        server.start()
        up = time.monotonic()
        probe.join(timeout=10)
        assert answered and answered[0][0] == 1
        late = answered[0][1] - up
        print(f"answered {late:.2f}s after the server accepted connections again")
        assert late < POOL_RECONNECT_S + 0.3
    finally:
        database.exiting.set()
        database.close()
