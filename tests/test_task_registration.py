"""Task types registered at deploy time, and one answer for a type nobody registered.

`pgqw migrate --tasks` and `pgqw tasks register` write what a worker's start writes, so jobs are accepted
before any worker runs; a plain migrate registers the demo's. A type nobody registered is refused the same
way by enqueue_job, enqueue_jobs, pgqw.client and the API (QT422, 422), unless a DBA lets such types in
(queue_settings.accept_unregistered_types), in which case all of them accept it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest
from psycopg.types.json import Jsonb

from pgqw import client, db
from pgqw.app import close_pool, create_app
from pgqw.errors import UnknownTaskType
from tests.helpers import rows, snapshot
from tests.test_cli import _pgqw

SHOP = textwrap.dedent('''
    from pydantic import BaseModel
    from pgqw.tasks import Retry, Schedule, task

    class Receipt(BaseModel):
        order: int

    @task("send_receipt", queue="emails", priority=2, max_attempts=6, retry=Retry(base_ms=250),
          schedule=Schedule("0 4 * * *", payload={"order": 0}))
    def send_receipt(payload: Receipt, ctx) -> dict:
        return {"sent": payload.order}
''')


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    """A user's task module, in a folder of its own (the CLI puts the current folder on the path)."""
    (tmp_path / "shop_tasks.py").write_text(SHOP)
    return tmp_path


def _pgqw_in(folder: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """pgqw run in the user's project folder (whose modules --tasks imports)."""
    return subprocess.run([sys.executable, "-m", "pgqw.cli", *args], capture_output=True, text=True, cwd=folder,
                          env={**os.environ, **env}, timeout=60)


@pytest.mark.parametrize("command", [("migrate", "--tasks", "shop_tasks"),
                                     ("tasks", "register", "--tasks", "shop_tasks")])
def test_registering_at_deploy_time_writes_what_a_workers_start_writes(
    db_url: str, conn: psycopg.Connection, shop: Path, command: tuple[str, ...]
) -> None:
    conn.execute("update task_types set max_attempts = 9 where name = 'listing_flyer'")  # a DBA's: it stays
    done = _pgqw_in(shop, *command, env={"DATABASE_URL": db_url})
    assert done.returncode == 0, done.stderr
    assert "registered task types: send_receipt (from shop_tasks)" in done.stdout
    assert "registered schedule send_receipt: send_receipt at '0 4 * * *'" in done.stdout
    [row] = rows(conn, "select code_queue, code_priority, code_max_attempts, code_backoff_base_ms, payload_schema"
                       " from task_types where name = 'send_receipt'")
    assert (row["code_queue"], row["code_priority"], row["code_max_attempts"], row["code_backoff_base_ms"]) == \
        ("emails", 2, 6, 250)
    assert row["payload_schema"]["required"] == ["order"]
    [schedule] = db.list_schedules(conn)
    assert (schedule.name, schedule.task_type, schedule.source) == ("send_receipt", "send_receipt", "code")
    assert db.get_task_type(conn, name="listing_flyer").max_attempts == 9
    # Accepted now, before any worker has run, with the code's defaults.
    job = db.enqueue_job(conn, type="send_receipt", payload={"order": 7}, idempotency_key="r-7")
    assert (job.queue, job.priority, job.max_attempts) == ("emails", 2, 6)
    listed = _pgqw_in(shop, "tasks", "list", env={"DATABASE_URL": db_url})
    assert listed.returncode == 0 and "send_receipt" in listed.stdout and "listing_flyer" in listed.stdout


def test_a_task_module_that_cannot_be_loaded_is_one_line(db_url: str, shop: Path) -> None:
    (shop / "broken_tasks.py").write_text("raise RuntimeError('no config')\n")
    for args in (("tasks", "register", "--tasks", "broken_tasks"), ("migrate", "--tasks", "no_such_module")):
        done = _pgqw_in(shop, *args, env={"DATABASE_URL": db_url})
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        [line] = done.stderr.splitlines()
        assert line.startswith(f"pgqw {args[0]}: ")


def test_a_plain_migrate_registers_the_demos_types(empty_db_url: str) -> None:
    done = _pgqw("migrate", env={"DATABASE_URL": empty_db_url})
    assert done.returncode == 0, done.stderr
    with psycopg.connect(empty_db_url) as c:
        assert [t.name for t in db.get_task_types(c)] == ["listing_flyer", "noop"]


# ---- one answer for a type nobody registered ----

def _refused(call) -> psycopg.Error:
    """The psycopg error of a refusal (the client raises UnknownTaskType, with it as __cause__)."""
    with pytest.raises((psycopg.Error, UnknownTaskType)) as exc:
        call()
    if isinstance(exc.value, UnknownTaskType):
        assert isinstance(exc.value.__cause__, psycopg.Error)
        return exc.value.__cause__
    return exc.value


def test_an_unregistered_type_is_refused_alike_by_sql_the_client_and_the_api(db_url: str,
                                                                           conn: psycopg.Connection) -> None:
    before = snapshot(conn)
    refusals = [
        _refused(lambda: conn.execute("select * from enqueue_job('send_reciept', '{}', 'typo')")),
        _refused(lambda: conn.execute("select * from enqueue_jobs(%s)", [Jsonb([
            {"type": "listing_flyer", "payload": {}, "idempotency_key": "fine"},
            {"type": "send_reciept", "payload": {}, "idempotency_key": "typo"}])])),
        _refused(lambda: client.enqueue(conn, "send_reciept", {"order": 1})),
        _refused(lambda: client.enqueue_many(conn, [client.Enqueue("send_reciept", {})])),
    ]
    assert [e.sqlstate for e in refusals] == ["QT422"] * 4
    for e in refusals:
        assert "task type 'send_reciept' is not registered: register it with `pgqw tasks register" in \
            e.diag.message_primary
        assert e.diag.message_detail == "registered: listing_flyer, noop"
        assert "accept_unregistered_types" in e.diag.message_hint
    assert refusals[1].diag.message_primary.startswith("job 2: ")
    app = create_app({"TESTING": True, "DATABASE_URL": db_url})
    try:
        r = app.test_client().post("/api/jobs", json={"type": "send_reciept", "payload": {"order": 1}},
                                   headers={"Idempotency-Key": "typo"})
    finally:
        close_pool(app)
    assert r.status_code == 422
    error = r.get_json()["error"]
    assert (error["code"], error["details"]["sqlstate"]) == ("unknown_task_type", "QT422")
    assert error["message"] == refusals[0].diag.message_primary
    assert snapshot(conn) == before


def test_a_dba_can_let_unregistered_types_in_and_then_all_three_accept_them(db_url: str,
                                                                         conn: psycopg.Connection) -> None:
    """For a team whose producers deploy before anything registers the types: the jobs wait, pending, for
    a worker that runs them (which registers the type at its start)."""
    conn.execute("update queue_settings set accept_unregistered_types = true")
    made = [
        rows(conn, "select (e.job).id, (e.job).status, (e.job).queue from enqueue_job('generate_invoice', '{}', 'k-sql') e")[0],
        client.enqueue(conn, "generate_invoice", {"n": 2}, idempotency_key="k-client"),
    ]
    app = create_app({"TESTING": True, "DATABASE_URL": db_url})
    try:
        r = app.test_client().post("/api/jobs", data=json.dumps({"type": "generate_invoice", "payload": {"n": 3}}),
                                   content_type="application/json", headers={"Idempotency-Key": "k-api"})
    finally:
        close_pool(app)
    assert r.status_code == 202, r.get_json()
    assert made[0]["status"] == "pending" and made[1].status == "pending"
    assert rows(conn, "select count(*) as n from jobs where type = 'generate_invoice' and status = 'pending'"
                      " and queue = 'default'") == [{"n": 3}]
    waiting = {(s.queue, s.label): s.value for s in db.queue_stats(conn) if s.metric == "waiting_without_worker"}
    assert waiting == {("default", "generate_invoice"): 3.0}
