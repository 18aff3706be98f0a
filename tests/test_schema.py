"""The queue lives in its own schema, inside a database that already holds an application: migrate
touches none of the application's objects and adds nothing to public; the package names every object
with the schema, so it works on any connection whatever its search_path; the schema's name is a
setting; and the README's psql session runs as pasted."""
from __future__ import annotations

import io
import re
import shutil
import subprocess
import threading
import tokenize
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.json import Jsonb

from pgqw import client, db
from pgqw import schema as pgqw_schema
from pgqw.app import close_pool, create_app
from pgqw.migrate import MigrationError, function_files, migrate
from pgqw.tasks import Registry
from pgqw.worker.runner import Worker
from tests.helpers import LISTING, SCHEMA, rows
from tests.lab import ROOT
from tests.test_cli import _pgqw
from tests.worker.parts import settings

# What an application of its own keeps in public, named as the queue's objects are.
APPLICATION = """
create table public.jobs (id serial primary key, title text not null, company text);
create table public.workers (id serial primary key, name text);
create table public.queues (name text primary key, seats integer);
create table public.schedules (id serial primary key, shift text);
create table public.task_types (code text primary key);
create table public.schema_migrations (version varchar not null primary key);
create function public.enqueue_job(p text) returns text language sql as $$ select 'the application''s: ' || p $$;
insert into public.jobs (title, company) values ('Plumber', 'Ade & Sons'), ('Driver', 'Okada Ltd');
insert into public.workers (name) values ('Bola');
insert into public.queues values ('front desk', 3);
insert into public.schedules (shift) values ('night');
insert into public.task_types values ('cleaning');
insert into public.schema_migrations values ('20240101120000'), ('20240202093000');
"""


def _public(dsn: str) -> list:
    """Every object in public with its definition, and every row of the application's tables."""
    with psycopg.connect(dsn) as c:
        objects = rows(c, "select c.relname, c.relkind, pg_get_userbyid(c.relowner) as owner from pg_class c"
                          " where c.relnamespace = 'public'::regnamespace order by 1")
        functions = rows(c, "select p.proname, pg_get_functiondef(p.oid) as def from pg_proc p"
                            " where p.pronamespace = 'public'::regnamespace order by 1")
        types = rows(c, "select t.typname from pg_type t where t.typnamespace = 'public'::regnamespace order by 1")
        data = [rows(c, f"select * from public.{t} order by 1")
                for t in ("jobs", "workers", "queues", "schedules", "task_types", "schema_migrations")]
    return [objects, functions, types, data]


def test_migrate_into_an_application_database_leaves_its_objects_alone_and_adds_nothing_to_public(
    empty_db_url: str
) -> None:
    with psycopg.connect(empty_db_url, autocommit=True) as c:
        c.execute(APPLICATION)
    before = _public(empty_db_url)
    done = _pgqw("migrate", env={"DATABASE_URL": empty_db_url})
    assert done.returncode == 0, done.stderr
    assert "registered task types: listing_flyer, noop (from pgqw.demo)" in done.stdout
    assert _public(empty_db_url) == before
    with psycopg.connect(empty_db_url, autocommit=True) as c:
        made = {r["relname"] for r in rows(c, "select relname from pg_class where relnamespace = %s::regnamespace"
                                              " and relkind in ('r', 'v')", [SCHEMA])}
        assert {"jobs", "job_attempts", "job_results", "queues", "workers", "schedules", "task_types",
                "queue_settings", "migrations"} <= made
        # Both enqueue_jobs: each resolves where its caller names it.
        job = rows(c, f"select (e.job).* from {SCHEMA}.enqueue_job('listing_flyer', %s, 'k1') e", [Jsonb(LISTING)])[0]
        assert rows(c, "select public.enqueue_job('x') as v") == [{"v": "the application's: x"}]
        assert db.get_job(c, job_id=job["id"]).status == "pending"
    again = _pgqw("migrate", env={"DATABASE_URL": empty_db_url})
    assert again.returncode == 0, again.stderr
    assert "migrations up to date" in again.stdout
    assert _public(empty_db_url) == before


def _sql_texts(path: Path) -> list[str]:
    """The SQL a module sends: its string literals that are not docstrings or comments."""
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type == tokenize.STRING and not re.match(r'^[rbuRBU]*"""[^\n]', tok.string):
            found.append(tok.string)
    return found


def test_every_statement_the_package_sends_names_the_queues_objects_with_the_schema() -> None:
    """A plain name would find an application's own `jobs` (or nothing) on the caller's search_path."""
    functions = sorted((p.stem for p in function_files()), key=len, reverse=True)
    tables = ("jobs", "job_attempts", "job_results", "queues", "workers", "schedules", "task_types",
              "task_type_settings", "queue_settings", "job_cancel_requests", "job_waiters", "migrations")
    plain_call = re.compile(r"(?<![\w.])(" + "|".join(functions) + r")\(")
    plain_table = re.compile(r"\b(?:from|join|into|update|table)\s+(" + "|".join(tables) + r")\b")
    package = ROOT / "pgqw"
    offenders = []
    for path in sorted(package.rglob("*.py")) + sorted((ROOT / "app").rglob("*.py")) + sorted(
            (ROOT / "worker").rglob("*.py")):
        if path.name == "migrate.py":
            continue  # runs the files with the schema first on its session's search_path
        for text in _sql_texts(path):
            if not re.search(r"\b(select|insert|update|delete)\b", text):
                continue
            for m in list(plain_call.finditer(text)) + list(plain_table.finditer(text)):
                offenders.append(f"{path.relative_to(ROOT)}: {m.group(0)!r} in {text[:80]}")
    assert offenders == []


@pytest.fixture
def bare_url(db_url: str, pg_server: str) -> str:
    """The test's copy with no search_path of its own: the server's default ("$user", public), where
    no queue is."""
    dbname = conninfo_to_dict(db_url)["dbname"]
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(sql.SQL("alter database {} reset search_path").format(sql.Identifier(dbname)))
    with psycopg.connect(db_url) as c:
        assert c.execute("select current_schema()").fetchone() == ("public",)
    return db_url


def test_the_client_worker_and_api_work_on_connections_whose_search_path_has_no_queue(bare_url: str) -> None:
    tasks = Registry()
    tasks.task("echo", model=dict)(lambda payload, ctx: {"echoed": payload})
    with psycopg.connect(bare_url, autocommit=True) as conn:
        from pgqw.tasks import register

        register(conn, tasks)
        job = client.enqueue(conn, "echo", {"n": 1}, idempotency_key="bare-1")
        db.set_queue_limit(conn, queue="default", max_running=5)
        out = io.StringIO()
        worker = Worker(settings(lease_ms=5000, poll_interval_ms=50), bare_url, tasks=tasks, out=out)
        result: list[int] = []
        thread = threading.Thread(target=lambda: result.append(worker.run()), daemon=True)
        thread.start()
        try:
            assert client.wait(conn, job.id, timeout=20).status == "succeeded", out.getvalue()
        finally:
            worker.stop("test over")
            thread.join(15)
        assert result == [0], out.getvalue()
        assert client.result(conn, job.id) == {"echoed": {"n": 1}}
        assert [a.outcome for a in client.attempts(conn, job.id)] == ["succeeded"]
        assert db.report_timeline(conn, job_id=job.id)[0].outcome == "succeeded"
        assert {q.name for q in db.list_queues(conn)} == {"default"}
        assert any(s.metric == "jobs" for s in db.queue_stats(conn))

    app = create_app({"TESTING": True, "DATABASE_URL": bare_url})
    try:
        http = app.test_client()
        made = http.post("/api/jobs", json={"type": "listing_flyer", "payload": LISTING},
                         headers={"Idempotency-Key": "bare-api"})
        assert made.status_code == 202, made.get_json()
        for path in ("/api/jobs", "/api/stats", "/api/queues", "/api/workers", "/api/task-types", "/api/schedules",
                     f"/api/jobs/{job.id}", f"/api/jobs/{job.id}/attempts", f"/api/jobs/{job.id}/result",
                     "/api/throughput", "/metrics", "/api/openapi.json"):
            assert http.get(path).status_code == 200, path
        assert http.post("/api/queues/default/pause").status_code == 200
    finally:
        close_pool(app)


@pytest.mark.parametrize("name", ["public", "pg_queue", "Jobs", "1q", "a-b", "x" * 64, "information_schema"])
def test_a_schema_name_the_queue_cannot_live_in_is_one_line(name: str) -> None:
    done = _pgqw("migrate", env={"PGQW_SCHEMA": name, "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("pgqw migrate: PGQW_SCHEMA must")
    with pytest.raises(MigrationError, match="the schema must"):
        migrate("postgresql://nobody@127.0.0.1:1/none", schema=name)


def test_two_queues_in_two_schemas_of_one_database_are_apart(empty_db_url: str) -> None:
    other = "pgqw_other" if SCHEMA != "pgqw_other" else "pgqw_second"
    migrate(empty_db_url)
    migrate(empty_db_url, schema=other)
    with psycopg.connect(empty_db_url, autocommit=True) as c:
        c.execute(f"select {other}.register_task_types('[{{\"name\": \"t\", \"payload_schema\": {{}}}}]')")
        mine = rows(c, f"select (e.job).id from {other}.enqueue_job('t', '{{}}', 'k') e")[0]["id"]
        assert rows(c, f"select count(*) as n from {SCHEMA}.jobs") == [{"n": 0}]
        claimed = rows(c, f"select (c.job).id from {other}.claim_job('w1') c")
        assert [r["id"] for r in claimed] == [mine]
        # Each schema's functions pin their own schema.
        config = rows(c, "select n.nspname, p.proconfig[1] as path from pg_proc p"
                         " join pg_namespace n on n.oid = p.pronamespace where p.proname = 'claim_jobs_at'")
        assert {r["nspname"]: r["path"] for r in config} == {
            SCHEMA: f"search_path={SCHEMA}, pg_temp", other: f"search_path={other}, pg_temp"}


def _readme_psql_block() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## From psql"):]
    return section[section.index("```sql\n") + len("```sql\n"):section.index("```\n", section.index("```sql"))]


def test_the_readmes_psql_session_runs_as_pasted_and_the_job_succeeds(bare_url: str) -> None:
    psql = shutil.which("psql")
    if psql is None:
        pytest.fail("psql is not installed on this machine (the README's session is run with it)")
    block = _readme_psql_block()
    if SCHEMA != pgqw_schema.DEFAULT:  # a run under another schema name: the README's, renamed
        block = block.replace("search_path = pgqw,", f"search_path = {SCHEMA},")
    # psql as the DBA, on a database with no search_path of its own: the block sets its own.
    done = subprocess.run([psql, "-X", "-v", "ON_ERROR_STOP=1", "-d", bare_url], input=block, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr  # no "\gset: extra argument" or any other complaint
    with psycopg.connect(bare_url) as c:
        [job] = rows(c, f"select status, attempts, type from {SCHEMA}.jobs where idempotency_key = 'my-first-job'")
    assert job == {"status": "succeeded", "attempts": 1, "type": "listing_flyer"}
    assert "succeeded" in done.stdout


def test_a_role_migrate_made_calls_the_functions_by_their_plain_names(empty_db_url: str) -> None:
    """`select * from claim_job('w1')` as written: migrate gave each role, in this database, a search_path
    that starts with the schema."""
    migrate(empty_db_url)
    for role in ("pgqw_worker", "pgqw_api", "pgqw_admin"):
        with psycopg.connect(make_conninfo(empty_db_url, user=role), autocommit=True) as c:
            assert c.execute("show search_path").fetchone() == (f"{SCHEMA}, public",), role
            if role != "pgqw_api":
                assert c.execute("select * from claim_job('w1')").fetchall() == []
            else:
                assert c.execute("select count(*) from jobs").fetchone() == (0,)
