"""Timeouts where a peer can stall, on a PostgreSQL server of the test's own (tests/lab/cluster.py):

- frozen: the postmaster and every backend SIGSTOPped (a paused VM; the kernel still acknowledges
  every byte, so neither TCP keepalives nor tcp_user_timeout fire, and the server cancels nothing).
  A real `pgqw api` answers 503 with Retry-After within seconds, because a borrowed connection
  that does not answer within API_STATEMENT_TIMEOUT_MS + 1 s is cut, and a request that cannot get a
  connection within API_POOL_TIMEOUT_MS gives up; after SIGCONT it answers 200 again. Before, every
  request waited the whole freeze and no thread was free.
- stopped: with the server down, a request answers 503 in well under the old 10 s pool timeout.
- a worker session left idle inside a transaction while holding a job's row lock (a worker paused
  between its work and its commit) is ended by the server within idle_in_transaction_session_timeout,
  set for the pgqw_worker role by `pgqw migrate` (db/security/settings.sql) or by the worker's own
  connection options (a deployment with a role of its own); sweep_stuck, which skips locked rows,
  then recovers the job.

The server is always thawed (SIGCONT) and stopped at the end, the API process stopped.
"""
from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import psycopg
import pytest

from pgqw import db, launch, tasks
from pgqw.config import Settings
from pgqw.migrate import migrate
from pgqw.worker.connection.database import connect_kwargs as worker_connect_kwargs
from tests.lab import new_database
from tests.lab.cluster import OwnedCluster

STATEMENT_MS = 2000      # the API's API_STATEMENT_TIMEOUT_MS here: a cut after 3 s
POOL_MS = 1000           # API_POOL_TIMEOUT_MS
ANSWER_WITHIN_S = 8.0    # a 503 while frozen: 3 s at most for a borrowed connection, plus waits for a thread
OLD_POOL_TIMEOUT_S = 10.0
API_ENV = {"API_STATEMENT_TIMEOUT_MS": str(STATEMENT_MS), "API_POOL_TIMEOUT_MS": str(POOL_MS),
           "DB_CONNECT_TIMEOUT_S": "2", "API_THREADS": "4"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[OwnedCluster]:
    c = OwnedCluster()
    try:
        c.start()
        yield c
    finally:
        c.cleanup()


@pytest.fixture
def server(cluster: OwnedCluster, request: pytest.FixtureRequest) -> Iterator[OwnedCluster]:
    """The module's server, running, with a freshly migrated database "q"; running again afterwards."""
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
        thaw(cluster)
        if not cluster.running():
            cluster.start()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed and cluster.logfile.exists():
            print(f"----- server log -----\n{cluster.logfile.read_text(errors='replace')[-3000:]}")


# ----------------------------------------------------------------------------- freezing

_frozen: dict[int, list[int]] = {}  # postmaster pid → the processes stopped with it


def _postmaster(cluster: OwnedCluster) -> int:
    return int((cluster.data / "postmaster.pid").read_text().splitlines()[0])


def _state(pid: int) -> str:
    """The process's state letter (T: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def freeze(cluster: OwnedCluster) -> None:
    """SIGSTOP the postmaster first (it forks no more), then every backend and auxiliary process."""
    postmaster = _postmaster(cluster)
    os.kill(postmaster, signal.SIGSTOP)
    stopped = [postmaster]
    _frozen[postmaster] = stopped
    for pid in _children(postmaster):
        try:
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        except ProcessLookupError:
            pass


def thaw(cluster: OwnedCluster) -> None:
    for postmaster in list(_frozen):
        for pid in reversed(_frozen.pop(postmaster)):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


@contextmanager
def frozen(cluster: OwnedCluster) -> Iterator[None]:
    freeze(cluster)
    try:
        yield
    finally:
        thaw(cluster)


# ----------------------------------------------------------------------------- HTTP

def get(url: str, timeout: float = 60.0) -> tuple[int, dict[str, str], Any, float]:
    """(status, headers, JSON body, seconds taken)."""
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, dict(r.headers), json.loads(r.read()), time.monotonic() - t0
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read()), time.monotonic() - t0


def assert_unavailable(answer: tuple[int, dict[str, str], Any, float], within: float) -> None:
    status, headers, body, took = answer
    assert status == 503, (status, body)
    assert body["error"]["code"] == "unavailable", body
    assert headers.get("Retry-After") == "1", headers
    assert took < within, f"the 503 took {took:.1f}s"


@pytest.fixture
def api(server: OwnedCluster, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[launch.Child]:
    child = launch.start_api(env=API_ENV, database_url=server.url("q"), log=tmp_path / "api.log")
    try:
        child.wait_ready(30)
        yield child
    finally:
        child.stop(timeout=15)
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(f"----- api (exit {child.returncode}) -----\n{child.tail(60)}")


# ----------------------------------------------------------------------------- the tests

def test_timeouts_connect_kwargs_carry_every_limit_and_let_the_url_win() -> None:
    from pgqw.app import api_connect_kwargs

    kwargs = api_connect_kwargs("host=db dbname=q connect_timeout=1 options='-c statement_timeout=9'",
                                Settings(api_statement_timeout_ms=2500))
    assert "connect_timeout" not in kwargs and kwargs["tcp_user_timeout"] == 5000 and kwargs["keepalives"] == 1
    # Ours first, the URL's last: PostgreSQL keeps the last -c of a name.
    assert kwargs["options"] == ("-c statement_timeout=2500 -c idle_in_transaction_session_timeout=2500 "
                                 "-c statement_timeout=9")
    bouncer = api_connect_kwargs("host=db dbname=q", Settings(pgbouncer=True))
    assert "options" not in bouncer and bouncer["prepare_threshold"] is None
    worker = worker_connect_kwargs("dbname=q", "w1", "pool", listen=True, settings=Settings())
    assert worker["options"] == "-c idle_in_transaction_session_timeout=5000" and worker["autocommit"]
    assert "prepare_threshold" not in worker


@pytest.mark.timeout(120)
def test_timeouts_api_answers_503_within_seconds_while_the_server_is_frozen_then_recovers(
    server: OwnedCluster, api: launch.Child
) -> None:
    stats = f"{api.url}/api/stats"
    # Warm: more connections in the pool than one, so some requests borrow a live-looking one.
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert {a[0] for a in pool.map(lambda _n: get(stats), range(8))} == {200}

    with frozen(server):
        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=6) as pool:  # more requests than the API has threads
            answers = list(pool.map(lambda _n: get(stats), range(6)))
        print(f"frozen: 503 answers took {sorted(round(a[3], 1) for a in answers)} s")
        for answer in answers:
            assert_unavailable(answer, ANSWER_WITHIN_S)
        # Still frozen: the answers came from the API giving up, not from the server coming back.
        assert all(_state(pid) == "T" for pid in _frozen[_postmaster(server)])
        assert time.monotonic() - t0 < ANSWER_WITHIN_S + 2
        # A request after the first wave: the pool is still trying to connect; 503 all the same.
        assert_unavailable(get(stats), ANSWER_WITHIN_S)
        assert "Traceback" not in api.output()

    launch.wait_for(lambda: get(stats)[0] == 200, timeout=30, what="the API to answer 200 after SIGCONT")
    assert api.alive()


@pytest.mark.timeout(120)
def test_timeouts_api_answers_503_quickly_while_the_server_is_stopped(
    server: OwnedCluster, api: launch.Child
) -> None:
    stats = f"{api.url}/api/stats"
    assert get(stats)[0] == 200
    server.stop("fast")
    try:
        for _ in range(3):  # a stale pooled connection, then an empty pool that cannot connect
            assert_unavailable(get(stats), within=OLD_POOL_TIMEOUT_S / 3)
    finally:
        server.start()
    launch.wait_for(lambda: get(stats)[0] == 200, timeout=30, what="the API to answer 200 after a restart")
    assert "Traceback" not in api.output()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["role", "options"])
def test_timeouts_worker_idle_in_transaction_is_ended_so_sweep_recovers_the_job(
    server: OwnedCluster, how: str
) -> None:
    """role: a plain connection as pgqw_worker gets the role's 5 s from `pgqw migrate`.
    options: a connection with the worker's own connect options, as a role without that setting
    (the superuser here), gets WORKER_IDLE_IN_TRANSACTION_TIMEOUT_MS (2 s)."""
    url = server.url("q")
    if how == "role":
        idle_url, kwargs, limit_s = server.url("q", user="pgqw_worker"), {}, 5.0
    else:
        settings = Settings(worker_idle_in_transaction_timeout_ms=2000)
        idle_url, limit_s = url, 2.0
        kwargs = worker_connect_kwargs(url, "w-idle", "pool", listen=True, settings=settings)
        kwargs["autocommit"] = False

    with psycopg.connect(url, autocommit=True) as owner:
        job = db.enqueue_job(owner, type="noop", payload={}, idempotency_key=f"idle-{how}")
        claimed = db.claim_job(owner, worker_id="w-idle", lease_ms=1000)
        assert claimed is not None and claimed.id == job.id

        idle = psycopg.connect(idle_url, **kwargs)
        try:
            # The worker's session begins, locks the job's row with a call, and stops (no commit).
            assert db.heartbeat(idle, leases=[(job.id, claimed.lease_token)], lease_ms=1000)
            started = time.monotonic()
            assert idle.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS

            # Its committed lease runs out, but the row is locked: the sweep skips it.
            def lease_expired() -> bool:
                row = owner.execute("select lease_expires_at < now() from jobs where id = %s", [job.id]).fetchone()
                return bool(row and row[0])

            launch.wait_for(lease_expired, timeout=10, what="the lease to expire")
            if time.monotonic() - started < limit_s - 0.5:
                assert db.sweep_stuck(owner) == []  # locked: skipped

            # The server ends the idle session; the lock goes with it and the sweep takes the job back.
            swept = launch.wait_for(lambda: db.sweep_stuck(owner), timeout=limit_s + 10,
                                    what="the sweep to recover the job once the idle session was ended")
            took = time.monotonic() - started
            assert [s.job_id for s in swept] == [job.id]
            assert limit_s - 0.5 <= took < limit_s + 5, f"recovered after {took:.1f}s"
            assert db.get_job(owner, job_id=job.id).status == "pending"  # type: ignore[union-attr]

            with pytest.raises(psycopg.Error):  # the server ended it (25P03), and closed it
                idle.execute("select 1")
        finally:
            idle.close()
