"""An install of the release that kept everything in public (its SQL and its migrate runner taken from the
repository's history) is moved into the queue's schema by today's migrate: every row of every table the
same, every job in the state it was in, the ledger carried over, nothing of the queue left in public; and
the move is refused, changing nothing, while a worker holds a lease."""
from __future__ import annotations

import importlib.util
import io
import shutil
import subprocess
import sys
import tarfile
import time
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

from pgqw.migrate import MigrationError, migrate
from tests.helpers import LISTING, SCHEMA, rows
from tests.lab import ROOT

# The last release whose install lives in public (its ledger: public.schema_migrations).
PUBLIC_RELEASE = "d375345"
TABLES = {  # each table, with the order its rows are compared in
    "queue_settings": "id", "jobs": "id", "job_attempts": "job_id, attempt", "job_results": "job_id",
    "task_types": "name", "workers": "id", "queues": "name", "job_cancel_requests": "job_id",
    "schedules": "name", "job_waiters": "job_id, backend_pid",
}


@pytest.fixture(scope="module")
def old_release(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModuleType, Path]:
    """That release's migrate module and its db/ folder, from git."""
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.fail("the upgrade test reads the earlier release from the repository's git history")
    folder = tmp_path_factory.mktemp("public-release")
    archive = subprocess.run([git, "-C", str(ROOT), "archive", PUBLIC_RELEASE, "db", "pgqw/migrate.py"],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    spec = importlib.util.spec_from_file_location("pgqw_public_release_migrate", folder / "pgqw" / "migrate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module, folder / "db"


def _install_and_fill(dsn: str, old_release: tuple[ModuleType, Path], *, live_lease: bool) -> dict[str, Any]:
    """The earlier release installed in public, and a job in every state, through its own functions."""
    module, sql_dir = old_release
    module.migrate(dsn, sql_dir=sql_dir)
    ids: dict[str, Any] = {}
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute("select to_regclass('public.jobs') is not null").fetchone() == (True,)
        c.execute("select register_task_types(%s)", [Jsonb([
            {"name": "listing_flyer", "payload_schema": {"type": "object"}, "queue": "flyers", "max_attempts": 4},
            {"name": "noop", "payload_schema": {}}])])
        c.execute("update task_types set max_attempts = 7, lease_ms = 90000 where name = 'noop'")  # a DBA's
        c.execute("update queue_settings set backoff_base_ms = 500, max_payload_bytes = 100000")
        c.execute("select register_worker('w-old', array['listing_flyer', 'noop'], null, 4, 'host-a', 42, 600000)")
        c.execute("select * from set_schedule('nightly', 'noop', '0 3 * * *', '{\"report\": true}')")
        c.execute("select * from register_schedules(array['listing_flyer'], %s)", [Jsonb([
            {"name": "hourly-flyer", "task_type": "listing_flyer", "cron": "@hourly", "payload": LISTING}])])
        c.execute("select * from pause_queue('flyers')")
        c.execute("select * from set_queue_limit('noop-q', 3)")
        c.execute("select * from set_queue_rate('rated-q', 2.5)")
        c.execute("select * from resume_queue('flyers')")

        def enqueue(key: str, type_: str = "noop", **more: Any) -> Any:
            args = ", ".join(f"p_{k} => %s" for k in more)
            return rows(c, f"select id from enqueue_job(%s, %s, %s, p_queue => 'noop-q'{', ' + args if args else ''})",
                        [type_, Jsonb({"k": key}), key, *more.values()])[0]["id"]

        def claim(lease_ms: int = 600_000) -> Any:
            return rows(c, "select id, lease_token from claim_job('w-old', array['noop-q'], %s)", [lease_ms])[0]

        ids["succeeded"] = enqueue("succeeded")
        got = claim()
        c.execute("select * from mark_succeeded(%s, %s, 'application/json', '{\"done\": 1}')",
                  [got["id"], got["lease_token"]])
        ids["failed"] = enqueue("failed", max_attempts=3)
        got = claim()
        c.execute("select * from mark_failed(%s, %s, 'boom')", [got["id"], got["lease_token"]])
        ids["dead"] = enqueue("dead", max_attempts=1)
        got = claim()
        c.execute("select * from mark_failed(%s, %s, 'gone', false)", [got["id"], got["lease_token"]])
        ids["swept"] = enqueue("swept")
        got = claim(lease_ms=1)  # its worker died: the lease ran out
        c.execute("select * from cancel_job(%s)", [got["id"]])  # and somebody asked it to stop
        ids["cancelled"] = enqueue("cancelled")
        c.execute("select * from cancel_job(%s)", [ids["cancelled"]])
        ids["later"] = enqueue("later", run_at=None)
        c.execute("update jobs set run_at = now() + interval '1 day' where id = %s", [ids["later"]])
        ids["pending"] = enqueue("pending")
        ids["flyer"] = rows(c, "select id from enqueue_job('listing_flyer', %s, 'a-flyer')", [Jsonb(LISTING)])[0]["id"]
        c.execute("select watch_job(%s)", [ids["flyer"]])
        if live_lease:
            ids["running"] = enqueue("running")
            claim()
        deadline = time.monotonic() + 10  # the 1 ms lease is over (the server's clock)
        while not c.execute("select lease_expires_at < clock_timestamp() from jobs where id = %s",
                            [ids["swept"]]).fetchone()[0]:
            assert time.monotonic() < deadline
    return ids


def _tables(dsn: str, schema: str) -> dict[str, list[dict[str, Any]]]:
    with psycopg.connect(dsn) as c:
        found = {t: rows(c, f"select * from {schema}.{t} order by {order}") for t, order in TABLES.items()}
        found["ledger"] = rows(c, "select version, name, checksum, applied_at from "
                                  + ("public.schema_migrations" if schema == "public" else f"{schema}.migrations")
                                  + " order by version")
    return found


def _in_public(dsn: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn) as c:
        return rows(c, "select 'relation' as kind, relname as name from pg_class"
                       " where relnamespace = 'public'::regnamespace"
                       " union all select 'function', proname from pg_proc where pronamespace = 'public'::regnamespace"
                       " union all select 'type', typname from pg_type where typnamespace = 'public'::regnamespace"
                       " order by 1, 2")


def test_migrate_moves_an_install_in_public_into_the_schema_with_every_row(
    empty_db_url: str, old_release: tuple[ModuleType, Path]
) -> None:
    ids = _install_and_fill(empty_db_url, old_release, live_lease=False)
    before = _tables(empty_db_url, "public")
    assert {r["status"] for r in before["jobs"]} == {"pending", "processing", "succeeded", "failed", "dead",
                                                    "cancelled"}
    assert all(before[t] for t in TABLES), [t for t in TABLES if not before[t]]

    notes: list[str] = []
    result = migrate(empty_db_url, log=notes.append)
    assert any(n.startswith(f"moved     the queue from public into {SCHEMA}") for n in notes), notes
    # The release's 14 stay applied; every one after it is new.
    shipped = sorted(p.name for p in (Path(__file__).resolve().parents[1] / "db" / "migrations").glob("*.sql"))
    assert shipped[14] == "0015_unregistered_types_and_known_queues.sql"
    assert result.applied == shipped[14:]
    after = _tables(empty_db_url, SCHEMA)
    for row in after["queue_settings"]:  # the new columns, at their defaults
        assert row.pop("accept_unregistered_types") is False
        assert (row.pop("prune_succeeded_after"), row.pop("prune_finished_after")) == (
            timedelta(days=7), timedelta(days=30))
    for table, columns in (("jobs", ("timeout_ms", "deadline_at")), ("job_attempts", ("deadline_at",)),
                           ("task_types", ("code_timeout_ms", "timeout_ms"))):  # 0019's: no timeout
        for row in after[table]:
            assert [row.pop(c) for c in columns] == [None] * len(columns)
    for row in after["queue_settings"]:  # 0020's
        assert row.pop("max_snoozes") == 100
    for row in after["task_types"]:
        assert row.pop("max_snoozes") is None
    for table, columns in (("jobs", ("expires_at",)),
                           ("task_types", ("code_expire_after_ms", "expire_after_ms", "code_retain_succeeded",
                                           "retain_succeeded", "code_retain_failed", "retain_failed",
                                           "code_max_snoozes"))):  # 0021's: no expiry, the queue's retention
        for row in after[table]:
            assert [row.pop(c) for c in columns] == [None] * len(columns)
    for row in after["jobs"]:  # 0022's
        assert row.pop("progress") is None
    for table, columns in (("jobs", ("workflow_id", "batch_id", "serial_key", "serial_seq", "concurrency_key")),
                           ("queues", ("key_max_running",))):  # 0023's: no workflow, batch, key or key limit
        for row in after[table]:
            assert [row.pop(c) for c in columns] == [None] * len(columns)
    assert after["ledger"][:len(before["ledger"])] == before["ledger"]
    assert {k: v for k, v in after.items() if k != "ledger"} == {k: v for k, v in before.items() if k != "ledger"}
    assert _in_public(empty_db_url) == []

    # The moved queue carries on: the swept job comes back, its cancel request is honoured by the sweep,
    # and the pending jobs are claimed and finished through the schema's functions.
    with psycopg.connect(make_conninfo(empty_db_url, user="pgqw_worker"), autocommit=True) as worker:
        assert worker.execute("show search_path").fetchone() == (f"{SCHEMA}, public",)
        swept = rows(worker, "select job_id from sweep_stuck()")
        assert [r["job_id"] for r in swept] == [ids["swept"]]
        got = rows(worker, "select (r.job).id, lease_token from claim_job('w-new', array['noop-q']) r")
        assert [g["id"] for g in got] in ([ids["pending"]], [ids["swept"]], [ids["failed"]])
        assert rows(worker, "select (r.job).status from mark_succeeded(%s, %s) r", [got[0]["id"], got[0]["lease_token"]]) \
            == [{"status": "succeeded"}]
    assert migrate(empty_db_url).applied == []  # and a second migrate finds nothing to move or apply


def test_migrate_refuses_to_move_while_a_worker_holds_a_lease_and_changes_nothing(
    empty_db_url: str, old_release: tuple[ModuleType, Path]
) -> None:
    _install_and_fill(empty_db_url, old_release, live_lease=True)
    before = _tables(empty_db_url, "public"), _in_public(empty_db_url)
    with pytest.raises(MigrationError) as exc:
        migrate(empty_db_url)
    assert "while workers hold leases: 1 job(s) are processing" in str(exc.value)
    assert "stop the workers" in str(exc.value) and "nothing was changed" in str(exc.value)
    assert (_tables(empty_db_url, "public"), _in_public(empty_db_url)) == before
    with psycopg.connect(empty_db_url) as c:
        assert c.execute("select to_regnamespace(%s)", [SCHEMA]).fetchone() == (None,)
