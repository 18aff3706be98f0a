"""pgqw migrate: once each, in order, safely twice and twice at once, and a failure leaves nothing;
the roles it makes (unless told not to) and the grants it applies to whichever roles exist."""
from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgqw.migrate import (
    SQL_DIR,
    MigrationError,
    function_files,
    grants_file,
    migrate,
    migration_files,
    roles_file,
    settings_file,
)
from tests.helpers import SCHEMA, rows


def on_queue(dsn: str) -> str:
    """dsn, its session's search_path starting with the queue's schema (as a DBA would set it): the tests'
    own SQL names the queue's objects plainly. migrate itself is given the plain dsn."""
    return make_conninfo(dsn, options=f"-c search_path={SCHEMA},public")


def _schema(dsn: str) -> list:
    with psycopg.connect(on_queue(dsn)) as c:
        return [
            rows(c, "select table_name, column_name, data_type, column_default from information_schema.columns"
                    " where table_schema = current_schema() order by 1, 2"),
            rows(c, "select conname, pg_get_constraintdef(oid) as def from pg_constraint"
                    " where connamespace = current_schema()::regnamespace order by 1"),
            rows(c, "select indexname, indexdef from pg_indexes where schemaname = current_schema() order by 1"),
            rows(c, "select p.proname, pg_get_functiondef(p.oid) as def from pg_proc p"
                    " where p.pronamespace = current_schema()::regnamespace order by 1"),
            rows(c, "select version, name, checksum from migrations order by version"),
            # Who may do what (db/security/grants.sql).
            rows(c, "select p.proname, array(select a::text from unnest(p.proacl) a order by 1) as acl"
                    " from pg_proc p where p.pronamespace = current_schema()::regnamespace order by 1"),
            rows(c, "select c.relname, array(select a::text from unnest(c.relacl) a order by 1) as acl"
                    " from pg_class c where c.relnamespace = current_schema()::regnamespace and c.relkind in ('r', 'v')"
                    " order by 1"),
            # Column grants (a DBA's columns of task_types).
            rows(c, "select a.attrelid::regclass::text as rel, a.attname, a.attacl::text[] as acl"
                    " from pg_attribute a join pg_class c on c.oid = a.attrelid"
                    " where c.relnamespace = current_schema()::regnamespace and a.attacl is not null order by 1, 2"),
        ]


def test_migrate_twice_changes_nothing(empty_db_url: str) -> None:
    first = migrate(empty_db_url)
    assert first.applied == [p.name for _, p in migration_files()]
    before = _schema(empty_db_url)
    second = migrate(empty_db_url)
    assert second.applied == []
    assert second.skipped == first.applied
    assert _schema(empty_db_url) == before


def test_migrate_installs_every_function(empty_db_url: str) -> None:
    migrate(empty_db_url)
    with psycopg.connect(on_queue(empty_db_url)) as c:
        names = {r["proname"] for r in rows(c, "select proname from pg_proc where pronamespace = current_schema()::regnamespace")}
    for path in function_files():
        assert path.stem in names, path.name


def test_migrate_two_at_once_are_safe(empty_db_url: str) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            migrate(empty_db_url)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with psycopg.connect(on_queue(empty_db_url)) as c:
        assert len(rows(c, "select * from migrations")) == len(migration_files())


def _copy_sql(tmp_path: Path) -> Path:
    target = tmp_path / "db"
    shutil.copytree(SQL_DIR, target)
    return target


@pytest.mark.parametrize("emptied", ["migrations", "functions"])
def test_migrate_with_no_sql_found_refuses_and_makes_nothing(empty_db_url: str, tmp_path: Path, emptied: str) -> None:
    """A package or folder without its SQL must not report success over a half-made schema."""
    sql_dir = _copy_sql(tmp_path)
    for path in (sql_dir / emptied).glob("*.sql"):
        path.unlink()
    with pytest.raises(MigrationError, match=f"no .* found in .*{emptied}"):
        migrate(empty_db_url, sql_dir=sql_dir)
    with psycopg.connect(empty_db_url) as conn:
        assert conn.execute("select count(*) from pg_tables where schemaname in ('public', %s)",
                            [SCHEMA]).fetchone() == (0,)


def test_migrate_failing_file_leaves_database_as_it_was(empty_db_url: str, tmp_path: Path) -> None:
    sql_dir = _copy_sql(tmp_path)
    migrate(empty_db_url, sql_dir=sql_dir)
    before = _schema(empty_db_url)
    (sql_dir / "migrations" / "9998_ok_part.sql").write_text("create table should_not_stay (id int);\n")
    (sql_dir / "migrations" / "9999_broken.sql").write_text(
        "create table also_not (id int);\n\nalter table jobs add column x nosuchtype;\n"
    )
    with pytest.raises(MigrationError) as exc:
        migrate(empty_db_url, sql_dir=sql_dir)
    assert "9999_broken.sql" in str(exc.value)
    assert "line 3" in str(exc.value)
    with psycopg.connect(on_queue(empty_db_url)) as c:
        tables = {r["tablename"] for r in rows(c, "select tablename from pg_tables where schemaname = current_schema()")}
        assert "also_not" not in tables
        # The good file before it was applied in its own transaction and recorded.
        assert "should_not_stay" in tables
        assert rows(c, "select version from migrations where version = 9999") == []
    assert _schema(empty_db_url)[1] == before[1]


def test_migrate_refuses_an_edited_applied_migration(empty_db_url: str, tmp_path: Path) -> None:
    sql_dir = _copy_sql(tmp_path)
    migrate(empty_db_url, sql_dir=sql_dir)
    first = sorted((sql_dir / "migrations").glob("*.sql"))[0]
    first.write_text(first.read_text() + "\n-- edited\n")
    with pytest.raises(MigrationError, match="changed after it was applied"):
        migrate(empty_db_url, sql_dir=sql_dir)


def test_migrate_broken_function_reports_file_and_keeps_old_functions(empty_db_url: str, tmp_path: Path) -> None:
    sql_dir = _copy_sql(tmp_path)
    migrate(empty_db_url, sql_dir=sql_dir)
    before = _schema(empty_db_url)
    (sql_dir / "functions" / "claim_job.sql").write_text(
        "create or replace function claim_job(p_worker_id text) returns int\n"
        "language plpgsql as $$ begin retrun 1; end $$;\n"
    )
    with pytest.raises(MigrationError, match=r"functions/claim_job.sql: line \d"):
        migrate(empty_db_url, sql_dir=sql_dir)
    assert _schema(empty_db_url) == before


def test_migrate_sql_files_install_with_psql_alone(empty_db_url: str) -> None:
    """A DBA can install the queue with psql: every migration in order, then every function file."""
    psql = shutil.which("psql")
    if psql is None:
        pytest.skip("psql is not installed on this machine (the Python runner is tested above)")
    files = [p for _, p in migration_files()] + function_files() + [roles_file(), grants_file()]
    args = [psql, "-v", "ON_ERROR_STOP=1", "-q", "-d", empty_db_url]
    for f in files:
        args += ["-f", str(f)]
    # The queue's own schema first on the session's search_path: every file makes its objects there, and
    # each function pins that search_path (set search_path from current). Function files may call
    # functions later in the alphabet: load them without body checks first.
    env_args = ["-c", f"create schema {SCHEMA}", "-c", f"set search_path = {SCHEMA}, pg_temp",
                "-c", "set check_function_bodies = off"]
    done = subprocess.run(args[:6] + env_args + args[6:], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    with psycopg.connect(on_queue(empty_db_url), autocommit=True) as c:
        c.execute("select register_task_types('[{\"name\": \"t\", \"payload_schema\": {}}]')")
        job = rows(c, "select (e.job).* from enqueue_job('t', '{}', 'k') e")[0]
        assert rows(c, "select (r.job).id from claim_job('w1') r")[0]["id"] == job["id"]
        # grants.sql worked without the migrations ledger (which only pgqw migrate makes).
        assert rows(c, "select has_function_privilege('pgqw_worker', %s, 'execute') as ok", [CLAIM])[0]["ok"]
        assert not rows(c, "select has_table_privilege('pgqw_worker', 'jobs', 'update') as ok")[0]["ok"]


def test_cli_migrate_reports_a_bad_database_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pgqw.cli", "migrate"],
        capture_output=True, text=True,
        env={"DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "cannot reach the database" in done.stderr


# ---- roles and grants ----
# pgqw_api, pgqw_worker and pgqw_admin are server-wide and other databases' grants depend on them, so
# they can neither be dropped nor be missing here. Tests of a missing role, or of making one, use a
# copy of db/ whose security files name roles of their own, made and dropped by the test.

def _privilege(dsn: str, query: str, params: list) -> bool:
    with psycopg.connect(on_queue(dsn)) as c:
        return bool(rows(c, query, params)[0]["ok"])


def _can_execute(dsn: str, role: str, signature: str) -> bool:
    return _privilege(dsn, "select has_function_privilege(%s, %s, 'execute') as ok", [role, signature])


def _can(dsn: str, role: str, table: str, privilege: str) -> bool:
    return _privilege(dsn, "select has_table_privilege(%s, %s, %s) as ok", [role, table, privilege])


def _role_exists(dsn: str, role: str) -> bool:
    with psycopg.connect(dsn) as c:
        return bool(rows(c, "select count(*) as n from pg_roles where rolname = %s", [role])[0]["n"])


ENQUEUE = ("enqueue_job(text,jsonb,text,text,integer,timestamptz,integer,interval,integer,timestamptz,integer,uuid[],"
           "boolean,text,text,uuid)")
CLAIM = "claim_job(text,text[],integer,text[])"


class Roles:
    """Three roles with names of their own, in a copy of db/ whose security files use them."""

    def __init__(self, pg_server: str, tmp_path: Path) -> None:
        tag = uuid.uuid4().hex[:8]
        self.pg_server = pg_server
        self.api, self.worker, self.admin = (f"pgqwt_{tag}_{k}" for k in ("api", "worker", "admin"))
        self.sql_dir = _copy_sql(tmp_path)
        for path in (roles_file(self.sql_dir), grants_file(self.sql_dir), settings_file(self.sql_dir)):
            text = path.read_text()
            for standard, own in (("pgqw_api", self.api), ("pgqw_worker", self.worker), ("pgqw_admin", self.admin)):
                assert f"'{standard}'" in text, (path.name, standard)
                text = text.replace(f"'{standard}'", f"'{own}'")
            path.write_text(text)
        self.databases: list[str] = []

    def all(self) -> tuple[str, str, str]:
        return self.api, self.worker, self.admin

    def drop(self) -> None:
        with psycopg.connect(self.pg_server, autocommit=True) as admin:
            for name in self.databases:
                admin.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
            existing = [r for r in self.all() if _role_exists(self.pg_server, r)]
            for dsn in self._dsns_with_grants(admin) if existing else []:
                with psycopg.connect(dsn, autocommit=True) as c:
                    c.execute(sql.SQL("drop owned by {}").format(
                        sql.SQL(", ").join(sql.Identifier(r) for r in existing)))
            for role in self.all():
                admin.execute(sql.SQL("drop role if exists {}").format(sql.Identifier(role)))

    def _dsns_with_grants(self, admin: psycopg.Connection) -> list[str]:
        # The databases the test did not make itself (empty_db_url) still hold grants to these roles.
        found = rows(admin, "select distinct d.datname from pg_shdepend s join pg_database d on d.oid = s.dbid"
                            " where s.refobjid in (select oid from pg_roles where rolname = any(%s))",
                     [list(self.all())])
        return [make_conninfo(self.pg_server, dbname=r["datname"]) for r in found]

    def new_database(self, owner: str | None = None) -> str:
        name = f"pgqw_e_{uuid.uuid4().hex[:12]}"
        self.databases.append(name)
        with psycopg.connect(self.pg_server, autocommit=True) as admin:
            query = "create database {} owner {}" if owner else "create database {}"
            admin.execute(sql.SQL(query).format(*(sql.Identifier(n) for n in ([name, owner] if owner else [name]))))
        return make_conninfo(self.pg_server, dbname=name)


@pytest.fixture
def own_roles(pg_server: str, tmp_path: Path):
    roles = Roles(pg_server, tmp_path)
    yield roles
    roles.drop()


def test_migrate_makes_the_roles_and_grants_them_their_work(empty_db_url: str) -> None:
    result = migrate(empty_db_url)
    for role in ("pgqw_api", "pgqw_worker", "pgqw_admin"):
        assert _role_exists(empty_db_url, role)
    assert _can_execute(empty_db_url, "pgqw_api", ENQUEUE) and not _can_execute(empty_db_url, "pgqw_api", CLAIM)
    assert _can_execute(empty_db_url, "pgqw_worker", CLAIM) and not _can_execute(empty_db_url, "pgqw_worker", ENQUEUE)
    assert _can(empty_db_url, "pgqw_api", "jobs", "select") and not _can(empty_db_url, "pgqw_api", "jobs", "insert")
    assert result.functions  # and the functions were applied in the same run


def test_migrate_without_roles_on_a_fresh_database_grants_only_to_roles_that_exist(
    pg_server: str, own_roles: Roles
) -> None:
    dsn = own_roles.new_database()
    result = migrate(dsn, sql_dir=own_roles.sql_dir, create_roles=False)
    assert result.applied and result.functions
    assert not any(_role_exists(dsn, r) for r in own_roles.all())  # none made, and none was needed
    # One "does not exist: skipped" per role for the grants, and per role with settings.
    assert sorted(n.split(":")[1].strip() for n in result.notices) == [
        "its grants are skipped"] * 3 + ["its settings are skipped"] * 2, result.notices
    with psycopg.connect(on_queue(dsn)) as c:
        open_to_public = rows(c, "select p.proname from pg_proc p where p.pronamespace = current_schema()::regnamespace"
                                 " and (p.proacl is null or exists (select 1 from aclexplode(p.proacl) a"
                                 " where a.grantee = 0))")
    assert open_to_public == []

    # A DBA makes one of the roles by hand; the next migrate (still without making roles) grants to it.
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(sql.SQL("create role {} login").format(sql.Identifier(own_roles.worker)))
    migrate(dsn, sql_dir=own_roles.sql_dir, create_roles=False)
    assert _can_execute(dsn, own_roles.worker, CLAIM)
    # Workers read no table: every answer they need comes from the functions.
    assert not _can(dsn, own_roles.worker, "queue_settings", "select")
    assert not _can(dsn, own_roles.worker, "jobs", "select")
    assert not _can(dsn, own_roles.worker, "jobs", "update")
    assert not _role_exists(dsn, own_roles.api) and not _role_exists(dsn, own_roles.admin)
    with psycopg.connect(on_queue(dsn), autocommit=True) as owner:
        owner.execute("select register_task_types('[{\"name\": \"t\", \"payload_schema\": {}}]')")
        job = rows(owner, "select (e.job).* from enqueue_job('t', '{}', 'by-hand') e")[0]
    with psycopg.connect(make_conninfo(dsn, user=own_roles.worker), autocommit=True) as worker:
        assert rows(worker, "select (r.job).id from claim_job('w1') r")[0]["id"] == job["id"]

    # With create_roles the others are made, and granted in the same run.
    result = migrate(dsn, sql_dir=own_roles.sql_dir)
    assert result.notices == [f"created role {own_roles.api}", f"created role {own_roles.admin}"]
    assert _can_execute(dsn, own_roles.api, ENQUEUE)
    assert _can(dsn, own_roles.admin, "queue_settings", "update")


def test_migrate_tolerates_a_role_made_meanwhile_by_another_session(pg_server: str, own_roles: Roles) -> None:
    """Two migrates of different databases of one server, both making the same role: here the other
    one is held mid-transaction, so this migrate's CREATE ROLE waits for it and then finds the role
    made (unique_violation), which must not fail the migrate."""
    dsn = own_roles.new_database()
    app_name = f"pgqw-migrate-{uuid.uuid4().hex[:8]}"
    errors: list[BaseException] = []

    def run() -> None:
        try:
            migrate(make_conninfo(dsn, application_name=app_name), sql_dir=own_roles.sql_dir)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    with psycopg.connect(pg_server) as other:  # a transaction, not autocommit
        other.execute(sql.SQL("create role {} login").format(sql.Identifier(own_roles.worker)))
        thread = threading.Thread(target=run)
        thread.start()
        deadline = time.monotonic() + 60
        with psycopg.connect(pg_server, autocommit=True) as watch:
            while not rows(watch, "select 1 from pg_stat_activity where application_name = %s"
                                  " and wait_event_type = 'Lock'", [app_name]):
                assert thread.is_alive() and time.monotonic() < deadline, \
                    f"migrate never waited for the other session's role: {errors}"
                time.sleep(0.05)
        other.commit()
    thread.join(60)
    assert not thread.is_alive()
    assert errors == []
    assert all(_role_exists(dsn, r) for r in own_roles.all())
    assert _can_execute(dsn, own_roles.worker, CLAIM)


def test_migrate_two_databases_at_once_make_the_roles_once(own_roles: Roles) -> None:
    dsns = [own_roles.new_database() for _ in range(3)]
    errors: list[BaseException] = []

    def run(dsn: str) -> None:
        try:
            migrate(dsn, sql_dir=own_roles.sql_dir)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(d,)) for d in dsns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for dsn in dsns:
        assert _can_execute(dsn, own_roles.api, ENQUEUE)


def test_migrate_by_an_owner_without_createrole_needs_no_roles(pg_server: str, own_roles: Roles) -> None:
    """A managed database: the queue's owner may not create roles. Making them fails with a message
    that says what to do; without making them, migrate works, and the functions, owned by that
    ordinary role, do the work of a role a DBA made by hand."""
    owner = f"{own_roles.api}_owner"
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(sql.SQL("create role {} login").format(sql.Identifier(owner)))
    try:
        dsn = make_conninfo(own_roles.new_database(owner=owner), user=owner)
        with pytest.raises(MigrationError, match="--no-roles") as exc:
            migrate(dsn, sql_dir=own_roles.sql_dir)
        assert "security/roles.sql" in str(exc.value)
        assert not _role_exists(dsn, own_roles.api)

        migrate(dsn, sql_dir=own_roles.sql_dir, create_roles=False)
        with psycopg.connect(pg_server, autocommit=True) as admin:
            admin.execute(sql.SQL("create role {} login").format(sql.Identifier(own_roles.api)))
        migrate(dsn, sql_dir=own_roles.sql_dir, create_roles=False)
        with psycopg.connect(on_queue(dsn), autocommit=True) as owner_conn:
            owner_conn.execute("select register_task_types('[{\"name\": \"t\", \"payload_schema\": {}}]')")
        # The owner may not alter roles: the role's search_path is the DBA's to set (migrate said how).
        result = migrate(dsn, sql_dir=own_roles.sql_dir, create_roles=False)
        assert f"may not alter role {own_roles.api}: have a DBA run: alter role {own_roles.api} in database" \
            in " ".join(result.notices)
        with psycopg.connect(on_queue(make_conninfo(dsn, user=own_roles.api)), autocommit=True) as api:
            job = rows(api, "select (e.job).* from enqueue_job('t', '{}', 'managed') e")[0]
            assert rows(api, "select status from jobs where id = %s", [job["id"]])[0]["status"] == "pending"
            with pytest.raises(psycopg.Error) as refused:
                api.execute("update jobs set status = 'dead'")
            assert refused.value.sqlstate == "42501"
        with psycopg.connect(dsn) as c:
            assert rows(c, "select p.proowner::regrole::text as o from pg_proc p where p.proname = 'enqueue_job'"
                           " and p.pronamespace = %s::regnamespace", [SCHEMA])[0]["o"] == owner
    finally:
        own_roles.drop()
        with psycopg.connect(pg_server, autocommit=True) as admin:
            admin.execute(sql.SQL("drop role if exists {}").format(sql.Identifier(owner)))


def test_migrate_broken_grants_keep_the_old_functions(empty_db_url: str, tmp_path: Path) -> None:
    sql_dir = _copy_sql(tmp_path)
    migrate(empty_db_url, sql_dir=sql_dir)
    before = _schema(empty_db_url)
    claim = sql_dir / "functions" / "claim_job.sql"
    claim.write_text(claim.read_text().replace("-- plpgsql, not sql:", "-- (changed) plpgsql, not sql:"))
    grants = grants_file(sql_dir)
    good = grants.read_text()
    grants.write_text(good + "\ngrant select on table no_such_table to pgqw_admin;\n")
    with pytest.raises(MigrationError, match="security/grants.sql"):
        migrate(empty_db_url, sql_dir=sql_dir)
    assert _schema(empty_db_url) == before
    grants.write_text(good)
    migrate(empty_db_url, sql_dir=sql_dir)  # the changed function goes in with grants that work
    assert "(changed)" in str(_schema(empty_db_url)[3])


def test_migrate_0004_keeps_as_results_only_the_flyers_of_succeeded_jobs(empty_db_url: str, tmp_path: Path) -> None:
    """An upgrade from the flyers table: save_flyer stored a flyer before the job's success, so a worker
    that stopped in between left flyers of unfinished jobs. Only succeeded jobs' flyers become results
    (a result exists exactly when its job succeeded), and an unfinished job's next success, with its
    new flyer, is not refused by job_results_pkey. (Its attempt of before lease tokens ends with the
    sweep; the next claim's token finishes it.)"""
    old = _copy_sql(tmp_path / "before-0004")
    for version, path in migration_files(old):
        if version >= 4:
            path.unlink()
    for path in function_files(old):  # today's functions need 0004's tables: none of them, one stand-in
        path.unlink()
    (old / "functions" / "stand_in.sql").write_text(
        "create or replace function pgqw_test_stand_in() returns integer language sql as $$ select 1 $$;\n")
    grants_file(old).write_text("select 1;\n")
    migrate(empty_db_url, sql_dir=old, create_roles=False)
    with psycopg.connect(on_queue(empty_db_url), autocommit=True) as c:
        ids = {}
        for key, status, extra in (
            ("done", "succeeded", ", finished_at = now()"),
            ("running", "processing", ", locked_by = 'w-old', lease_expires_at = now() + interval '1 hour'"),
            ("dead", "dead", ", finished_at = now(), last_error = 'boom'"),
        ):
            ids[key] = rows(c, "insert into jobs (type, max_attempts, idempotency_key, attempts, started_at)"
                               " values ('listing_flyer', %s, %s, 1, now()) returning id",
                            [2 if key == "running" else 1, key])[0]["id"]
            c.execute(f"update jobs set status = %s{extra} where id = %s", [status, ids[key]])
            c.execute("insert into job_attempts (job_id, attempt, worker_id, started_at)"
                      " values (%s, 1, 'w-old', now())", [ids[key]])
            c.execute("insert into flyers (job_id, pdf) values (%s, %s)", [ids[key], f"%PDF-{key}".encode()])

    migrate(empty_db_url)
    with psycopg.connect(on_queue(empty_db_url), autocommit=True) as c:
        assert rows(c, "select job_id, content_type, data from job_results") == [
            {"job_id": ids["done"], "content_type": "application/pdf", "data": b"%PDF-done"}]
        assert rows(c, "select to_regclass('flyers') as v") == [{"v": None}]  # the demo's view left in 0018
        swept = rows(c, "select job_id, status from sweep_stuck_at(now() + interval '2 hours')")
        assert swept == [{"job_id": ids["running"], "status": "pending"}]
        token = rows(c, "select lease_token from claim_job('w-new')")[0]["lease_token"]
        finished = rows(c, "select (r.job).status, already_recorded from mark_succeeded(%s, %s, 'application/pdf',"
                           " null, '%%PDF-again') r", [ids["running"], token])
        assert finished == [{"status": "succeeded", "already_recorded": False}]
        assert rows(c, "select data from job_results where job_id = %s", [ids["running"]]) == [{"data": b"%PDF-again"}]


def role_settings(dsn: str, role: str) -> dict[str, str]:
    with psycopg.connect(dsn) as c:
        found = rows(c, "select unnest(s.setconfig) as item from pg_db_role_setting s"
                        " join pg_roles r on r.oid = s.setrole where r.rolname = %s and s.setdatabase = 0", [role])
    return dict(r["item"].split("=", 1) for r in found)


def test_migrate_sets_the_roles_session_timeouts_and_sets_them_again_every_run(
    pg_server: str, own_roles: Roles
) -> None:
    dsn = own_roles.new_database()
    migrate(dsn, sql_dir=own_roles.sql_dir)
    assert role_settings(dsn, own_roles.worker) == {"idle_in_transaction_session_timeout": "5s"}
    assert role_settings(dsn, own_roles.api) == {"statement_timeout": "5s",
                                                 "idle_in_transaction_session_timeout": "5s"}
    assert role_settings(dsn, own_roles.admin) == {}
    # A DBA's change is put back by the next migrate; a setting of their own is left alone.
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(sql.SQL("alter role {} set idle_in_transaction_session_timeout = '1h'").format(
            sql.Identifier(own_roles.worker)))
        admin.execute(sql.SQL("alter role {} set lock_timeout = '2s'").format(sql.Identifier(own_roles.worker)))
    result = migrate(dsn, sql_dir=own_roles.sql_dir)
    assert result.notices == []
    assert role_settings(dsn, own_roles.worker) == {"idle_in_transaction_session_timeout": "5s",
                                                    "lock_timeout": "2s"}
    # A session of the role gets them at login.
    with psycopg.connect(make_conninfo(dsn, user=own_roles.worker)) as c:
        assert rows(c, "show idle_in_transaction_session_timeout")[0]["idle_in_transaction_session_timeout"] == "5s"


# The functions as 0004 left them, with the signatures 0005 drops: claim_jobs and claim_job as they
# were (a claim that records no lease token), the others stand-ins with their old arguments.
BEFORE_0005_FUNCTIONS = """
create or replace function claim_jobs(p_worker_id text, p_limit integer, p_queues text[] default null,
                                      p_lease_ms integer default null, p_now timestamptz default now(),
                                      p_task_types text[] default null)
returns setof jobs language plpgsql security definer set search_path from current as $$
begin
    return query
    with claimed as (
        update jobs j
           set status = 'processing', attempts = j.attempts + 1, started_at = p_now, locked_by = p_worker_id,
               lease_expires_at = p_now + make_interval(
                   secs => coalesce(p_lease_ms, (select s.lease_ms from queue_settings s)) / 1000.0)
         where j.id = any (array(
                   select r.id from jobs r
                    where r.status in ('pending', 'failed') and r.run_at <= p_now and r.attempts < r.max_attempts
                      and (p_queues is null or r.queue = any (p_queues))
                      and (p_task_types is null or r.type = any (p_task_types))
                    order by r.priority desc, r.run_at, r.id limit p_limit for update skip locked))
        returning j.*
    ), recorded as (
        insert into job_attempts (job_id, attempt, worker_id, started_at)
        select c.id, c.attempts, c.locked_by, c.started_at from claimed c
    )
    select c.* from claimed c order by c.priority desc, c.run_at, c.id;
end;
$$;
create or replace function claim_job(p_worker_id text, p_queues text[] default null, p_lease_ms integer default null,
                                     p_now timestamptz default now(), p_task_types text[] default null)
returns setof jobs language plpgsql security definer set search_path from current as $$
begin
    return query select * from claim_jobs(p_worker_id, 1, p_queues, p_lease_ms, p_now, p_task_types);
end;
$$;
create or replace function heartbeat(p_worker_id text, p_job_ids uuid[], p_lease_ms integer default null)
returns void language plpgsql as $$ begin end; $$;
create or replace function mark_succeeded(p_job_id uuid, p_worker_id text, p_attempt integer, p_result_type text,
                                          p_result_value jsonb, p_result_data bytea)
returns void language plpgsql as $$ begin end; $$;
create or replace function mark_jobs_succeeded(p_worker_id text, p_job_ids uuid[], p_attempts integer[],
                                               p_results jsonb)
returns void language plpgsql as $$ begin end; $$;
create or replace function mark_failed(p_job_id uuid, p_worker_id text, p_attempt integer, p_error text,
                                       p_retryable boolean, p_base_ms integer, p_max_jitter_ms integer,
                                       p_max_delay_ms integer)
returns void language plpgsql as $$ begin end; $$;
create or replace function release_job(p_job_id uuid, p_worker_id text, p_attempt integer, p_reason text)
returns void language plpgsql as $$ begin end; $$;
create or replace function raise_job_not_held(p_job_id uuid, p_worker_id text, p_attempt integer)
returns void language plpgsql as $$ begin end; $$;
create or replace function sweep_stuck(p_now timestamptz default now())
returns void language plpgsql as $$ begin end; $$;
"""
# What 0005 drops, by signature: none of them may be left beside its new form.
OLD_SIGNATURES = (
    "claim_job(text,text[],integer,timestamptz,text[])", "claim_jobs(text,integer,text[],integer,timestamptz,text[])",
    "heartbeat(text,uuid[],integer)", "mark_succeeded(uuid,text,integer,text,jsonb,bytea)",
    "mark_jobs_succeeded(text,uuid[],integer[],jsonb)",
    "mark_failed(uuid,text,integer,text,boolean,integer,integer,integer)", "release_job(uuid,text,integer,text)",
    "raise_job_not_held(uuid,text,integer)", "sweep_stuck(timestamptz)",
)


def test_migrate_0005_an_attempt_claimed_before_lease_tokens_is_recovered_by_the_sweep(
    empty_db_url: str, tmp_path: Path
) -> None:
    """A job claimed with 0004's claim_job, then the database migrated to the end: its attempt has no
    token hash, so no token can finish, fail, hand back or extend it; the sweep recovers the job when
    its lease runs out (the attempt ends without a hash, which the constraint allows), and the next
    claim's token works. The old signatures are gone."""
    old = _copy_sql(tmp_path / "before-0005")
    for version, path in migration_files(old):
        if version >= 5:
            path.unlink()
    for path in function_files(old):
        path.unlink()
    (old / "functions" / "before_0005.sql").write_text(BEFORE_0005_FUNCTIONS)
    grants_file(old).write_text("select 1;\n")
    migrate(empty_db_url, sql_dir=old, create_roles=False)
    with psycopg.connect(on_queue(empty_db_url), autocommit=True) as c:
        job_id = rows(c, "insert into jobs (type, max_attempts, idempotency_key) values ('listing_flyer', 3, 'old')"
                         " returning id")[0]["id"]
        claimed = rows(c, "select id, attempts, locked_by from claim_job('w-old', null, 60000)")
        assert claimed == [{"id": job_id, "attempts": 1, "locked_by": "w-old"}]

    migrate(empty_db_url)
    with psycopg.connect(on_queue(empty_db_url), autocommit=True) as c:
        for signature in OLD_SIGNATURES:
            assert rows(c, "select to_regprocedure(%s) as f", [signature]) == [{"f": None}], signature
        validated = "select convalidated from pg_constraint where conname = 'job_attempts_lease_token_hash_sha256'"
        assert rows(c, validated) == [{"convalidated": False}]
        assert rows(c, "select attempt, outcome, lease_token_hash from job_attempts") == [
            {"attempt": 1, "outcome": None, "lease_token_hash": None}]

        def state() -> list:
            return [rows(c, "select * from jobs"), rows(c, "select * from job_attempts order by attempt"),
                    rows(c, "select job_id from job_results")]

        before = state()
        for call in ("select * from mark_succeeded(%s, %s, 'application/json', '1')",
                     "select * from mark_failed(%s, %s, 'boom', false)",
                     "select * from release_job(%s, %s)"):
            for token in (uuid.uuid4(), uuid.UUID(int=0)):
                with pytest.raises(psycopg.Error) as exc:
                    c.execute(call, [job_id, token])
                assert exc.value.sqlstate == "QL409", call
        assert rows(c, "select * from heartbeat(array[%s]::uuid[], array[%s]::uuid[])", [job_id, uuid.uuid4()]) == []
        assert state() == before

        # Nothing to sweep while its lease runs; then the sweep recovers it.
        assert rows(c, "select * from sweep_stuck()") == []
        swept = rows(c, "select job_id, attempt, worker_id, status from sweep_stuck_at(now() + interval '2 minutes')")
        assert swept == [{"job_id": job_id, "attempt": 1, "worker_id": "w-old", "status": "pending"}]
        assert rows(c, "select attempt, outcome, abandon_reason, lease_token_hash from job_attempts") == [
            {"attempt": 1, "outcome": "abandoned", "abandon_reason": "lease_expired", "lease_token_hash": None}]

        again = rows(c, "select (r.job).id, (r.job).attempts, lease_token from claim_job('w-new') r")
        assert [(r["id"], r["attempts"]) for r in again] == [(job_id, 2)]
        token = again[0]["lease_token"]
        assert rows(c, "select lease_token_hash = sha256(uuid_send(%s)) as ok from job_attempts where attempt = 2",
                    [token]) == [{"ok": True}]
        done = rows(c, "select (r.job).status, already_recorded from mark_succeeded(%s, %s, 'application/json', '{\"ok\": 1}') r",
                    [job_id, token])
        assert done == [{"status": "succeeded", "already_recorded": False}]
        assert rows(c, "select job_id, value from job_results") == [{"job_id": job_id, "value": {"ok": 1}}]


def test_migrate_a_new_column_of_jobs_reaches_every_answer_with_no_new_signature(empty_db_url: str) -> None:
    """The job functions return the jobs row whole (0018), so a column added to jobs is in their answers
    once migrate re-applies the function files: no DROP FUNCTION, no return type to change."""
    migrate(empty_db_url)
    with psycopg.connect(on_queue(empty_db_url), autocommit=True) as c:
        c.execute("alter table jobs add column note text not null default 'added'")
    assert migrate(empty_db_url).applied == []
    with psycopg.connect(on_queue(empty_db_url), autocommit=True) as c:
        c.execute("select register_task_types('[{\"name\": \"t\", \"payload_schema\": {}}]')")
        made = rows(c, "select (e.job).id, (e.job).note, e.created from enqueue_job('t', '{}', 'k1') e")
        assert [(r["note"], r["created"]) for r in made] == [("added", True)]
        batch = rows(c, "select (e.job).note from enqueue_jobs('[{\"type\": \"t\", \"payload\": {},"
                        " \"idempotency_key\": \"k2\"}]') e")
        assert batch == [{"note": "added"}]
        claimed = rows(c, "select (c.job).id, (c.job).note, c.lease_token from claim_jobs('w1', 2) c")
        assert [r["note"] for r in claimed] == ["added", "added"]
        first, second = claimed
        done = rows(c, "select (m.job).note, m.already_recorded from mark_succeeded(%s, %s) m",
                    [first["id"], first["lease_token"]])
        assert done == [{"note": "added", "already_recorded": False}]
        asked = rows(c, "select (k.job).note, (k.job).status from cancel_job(%s) k", [second["id"]])
        assert asked == [{"note": "added", "status": "processing"}]
        ended = rows(c, "select (m.job).note, (m.job).status from mark_cancelled(%s, %s) m",
                     [second["id"], second["lease_token"]])
        assert ended == [{"note": "added", "status": "cancelled"}]
