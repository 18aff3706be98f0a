"""pgqw migrate: once each, in order, safely twice and twice at once, and a failure leaves nothing."""
from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest

from pgqw.migrate import SQL_DIR, MigrationError, function_files, migrate, migration_files
from tests.helpers import rows


def _schema(dsn: str) -> list:
    with psycopg.connect(dsn) as c:
        return [
            rows(c, "select table_name, column_name, data_type, column_default from information_schema.columns"
                    " where table_schema = 'public' order by 1, 2"),
            rows(c, "select conname, pg_get_constraintdef(oid) as def from pg_constraint"
                    " where connamespace = 'public'::regnamespace order by 1"),
            rows(c, "select indexname, indexdef from pg_indexes where schemaname = 'public' order by 1"),
            rows(c, "select p.proname, pg_get_functiondef(p.oid) as def from pg_proc p"
                    " where p.pronamespace = 'public'::regnamespace order by 1"),
            rows(c, "select version, name, checksum from schema_migrations order by version"),
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
    with psycopg.connect(empty_db_url) as c:
        names = {r["proname"] for r in rows(c, "select proname from pg_proc where pronamespace = 'public'::regnamespace")}
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
    with psycopg.connect(empty_db_url) as c:
        assert len(rows(c, "select * from schema_migrations")) == len(migration_files())


def _copy_sql(tmp_path: Path) -> Path:
    target = tmp_path / "db"
    shutil.copytree(SQL_DIR, target)
    return target


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
    with psycopg.connect(empty_db_url) as c:
        tables = {r["tablename"] for r in rows(c, "select tablename from pg_tables where schemaname = 'public'")}
        assert "also_not" not in tables
        # The good file before it was applied in its own transaction and recorded.
        assert "should_not_stay" in tables
        assert rows(c, "select version from schema_migrations where version = 9999") == []
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
    files = [p for _, p in migration_files()] + function_files()
    args = [psql, "-v", "ON_ERROR_STOP=1", "-q", "-d", empty_db_url]
    for f in files:
        args += ["-f", str(f)]
    # Function files may call functions later in the alphabet: load them without body checks first.
    env_args = ["-c", "set check_function_bodies = off"]
    done = subprocess.run(args[:6] + env_args + args[6:], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    with psycopg.connect(empty_db_url, autocommit=True) as c:
        job = rows(c, "select * from enqueue_job('t', '{}', 'k')")[0]
        assert rows(c, "select id from claim_job('w1')")[0]["id"] == job["id"]


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
