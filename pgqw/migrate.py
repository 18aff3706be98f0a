"""Applies db/migrations in order, each once, then re-applies every db/functions file, all inside the
queue's own schema (pgqw.schema: `pgqw`, or PGQW_SCHEMA), so nothing is added to `public` and an
application's own `jobs` or `schema_migrations` is never touched.

- The session's search_path is the schema (then pg_temp) while it runs: every file names its objects
  plainly and they are made there; each function pins that same search_path (`set search_path from
  current`), so a function finds the queue's tables and nothing a caller put elsewhere.
- A migration is `db/migrations/NNNN_description.sql`: plain SQL, applied in its own transaction
  together with its row in the schema's ledger (`<schema>.migrations`), so a failed file leaves nothing.
- An applied migration must never change: its checksum is recorded and a changed file is refused.
- Function files are `CREATE OR REPLACE` and are all applied again, in one transaction, every run.
- A session advisory lock makes two runners at once safe: the second waits, then finds nothing to do.
- An install of an earlier release, which kept everything in `public` with its ledger in
  public.schema_migrations, is moved into the schema first (db/upgrade/from_public.sql): in the same
  transaction as the migrations and functions that follow, so the upgrade happens whole or not at all.
  It is refused while a worker holds a lease (QM409).
- Roles (db/security/roles.sql): pgqw_api, pgqw_worker and pgqw_admin are made when missing, unless
  create_roles is False (a managed database that forbids CREATE ROLE). Roles are server-wide, so two
  migrates of different databases may make them at once: a role made meanwhile is not an error.
- Grants (db/security/grants.sql) are applied every run, in the functions' transaction, to whichever of
  the three roles exist: PUBLIC gets nothing, each role exactly its list.
- Role settings (db/security/settings.sql: ALTER ROLE … SET, the workers' idle-in-transaction timeout,
  the API's statement timeout, and in this database a search_path that starts with the schema) are
  applied every run, after the grants, to whichever roles exist; a role that does not exist, or that the
  migrating role may not alter, is a notice, not a failure.
"""
from __future__ import annotations

import contextlib
import hashlib
import re
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Callable

import psycopg

from pgqw import schema as pgqw_schema

# The repository's db/ folder, installed as the package pgqw.sql (the wheel carries it).
SQL_DIR = Path(str(files("pgqw.sql")))
LOCK_KEY = 7_101_984_151  # any constant bigint; names this project's migrate lock
SETTINGS_TRIES = 5        # settings.sql against concurrent ALTER ROLEs from migrates of other databases
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


class MigrationError(RuntimeError):
    """A migration could not be applied; the message names the file and line."""


@dataclass
class MigrateResult:
    applied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    # What the security files said: "created role pgqw_api", "role pgqw_admin does not exist: ...".
    notices: list[str] = field(default_factory=list)


def _checksum(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _where(exc: psycopg.Error, sql: str) -> str:
    pos = exc.diag.statement_position
    if pos and pos.isdigit():
        return f"line {sql[: int(pos) - 1].count(chr(10)) + 1}"
    return "line ?"


def migration_files(sql_dir: Path = SQL_DIR) -> list[tuple[int, Path]]:
    found: dict[int, Path] = {}
    for path in sorted((sql_dir / "migrations").glob("*.sql")):
        m = _NAME.match(path.name)
        if not m:
            raise MigrationError(f"{path.name}: migration names must look like 0001_description.sql")
        version = int(m.group(1))
        if version in found:
            raise MigrationError(f"{path.name}: version {version} is also used by {found[version].name}")
        found[version] = path
    return sorted(found.items())


def function_files(sql_dir: Path = SQL_DIR) -> list[Path]:
    return sorted((sql_dir / "functions").glob("*.sql"))


def roles_file(sql_dir: Path = SQL_DIR) -> Path:
    return sql_dir / "security" / "roles.sql"


def grants_file(sql_dir: Path = SQL_DIR) -> Path:
    return sql_dir / "security" / "grants.sql"


def settings_file(sql_dir: Path = SQL_DIR) -> Path:
    return sql_dir / "security" / "settings.sql"


def upgrade_file(sql_dir: Path = SQL_DIR) -> Path:
    return sql_dir / "upgrade" / "from_public.sql"


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise MigrationError(f"{path.parent.name}/{path.name}: missing") from None


def _earlier_release_in_public(conn: psycopg.Connection, schema: str) -> bool:
    """True when this database holds an install of an earlier release (everything in public, with its
    ledger in public.schema_migrations) and none in the schema yet. A schema_migrations of another tool
    (Rails, dbmate, golang-migrate: a version column alone) is not ours and is never read further."""
    row = conn.execute(
        "select to_regclass(format('%%I.migrations', %(schema)s::text)) is null"
        "   and (select count(*) from information_schema.columns"
        "         where table_schema = 'public' and table_name = 'schema_migrations'"
        "           and column_name in ('version', 'name', 'checksum')) = 3"
        "   and to_regclass('public.jobs') is not null",
        {"schema": schema}).fetchone()
    if not (row and row[0]):
        return False
    row = conn.execute("select exists (select 1 from public.schema_migrations where name = '0001_core.sql')").fetchone()
    return bool(row and row[0])


def migrate(
    dsn: str,
    *,
    sql_dir: Path = SQL_DIR,
    log: Callable[[str], None] = lambda _m: None,
    create_roles: bool = True,
    schema: str | None = None,
    role_settings: bool = True,
) -> MigrateResult:
    """Brings the database at dsn up to date. Raises MigrationError (file and line) on failure.

    schema: the schema to install into (default: pgqw.schema.name(), PGQW_SCHEMA or `pgqw`).
    create_roles=False skips CREATE ROLE (db/security/roles.sql) for a database whose server forbids
    it; the grants are applied all the same, to whichever of the roles a DBA made. role_settings=False
    leaves the roles' session settings and search_path alone (pgqw.testing's throw-away schemas: the
    roles keep pointing at the real one).
    """
    try:
        schema = pgqw_schema.check(schema, source="the schema") if schema is not None else pgqw_schema.name()
    except pgqw_schema.SchemaNameError as exc:
        raise MigrationError(str(exc)) from None
    result = MigrateResult()
    listening: list[bool] = []
    # Refuse before touching the database: a run with no migrations or no functions would
    # otherwise leave a ledger and nothing else.
    migrations = migration_files(sql_dir)
    if not migrations:
        raise MigrationError(f"no migrations found in {sql_dir / 'migrations'}: nothing was applied")
    if not function_files(sql_dir):
        raise MigrationError(f"no function files found in {sql_dir / 'functions'}: nothing was applied")

    def on_notice(diag: psycopg.errors.Diagnostic) -> None:
        if listening and diag.message_primary:
            result.notices.append(diag.message_primary)
            log(f"roles     {diag.message_primary}")

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.add_notice_handler(on_notice)
        conn.execute("select pg_advisory_lock(%s)", [LOCK_KEY])
        try:
            upgrading = _earlier_release_in_public(conn, schema)
            # An upgrade from public is one transaction, from the new schema to the last grant.
            with conn.transaction() if upgrading else contextlib.nullcontext():
                try:
                    conn.execute(f"create schema if not exists {schema}")
                except psycopg.Error as exc:
                    raise MigrationError(f"cannot make the schema {schema}: "
                                         f"{exc.diag.message_primary or exc}") from exc
                # Every object the files make lands in the schema; the functions pin this search_path.
                conn.execute(f"set search_path = {schema}, pg_temp")
                if upgrading:
                    _move_from_public(conn, sql_dir, schema, log)
                _apply_migrations(conn, migrations, result, log)
                if create_roles:
                    _make_roles(conn, sql_dir, listening)
                _apply_functions(conn, sql_dir, result, listening, log)
            if role_settings:
                _apply_settings(conn, sql_dir, listening)
        finally:
            if not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                conn.execute("select pg_advisory_unlock(%s)", [LOCK_KEY])
    return result


def _move_from_public(conn: psycopg.Connection, sql_dir: Path, schema: str, log: Callable[[str], None]) -> None:
    path = upgrade_file(sql_dir)
    sql = _read(path)
    try:
        with conn.transaction():
            conn.execute(sql.encode())
    except psycopg.Error as exc:
        if exc.sqlstate == "QM409":
            raise MigrationError(f"{exc.diag.message_primary}; {exc.diag.message_hint} (nothing was changed)") from exc
        raise MigrationError(f"upgrade/{path.name}: {exc.diag.message_primary or exc} (nothing was changed)") from exc
    log(f"moved     the queue from public into {schema} (an earlier release's install)")


def _apply_migrations(conn: psycopg.Connection, migrations: list[tuple[int, Path]], result: MigrateResult,
                      log: Callable[[str], None]) -> None:
    conn.execute(
        "create table if not exists migrations ("
        " version integer primary key,"
        " name text not null,"
        " checksum text not null,"
        " applied_at timestamptz not null default now())"
    )
    applied = {v: (n, c) for v, n, c in conn.execute("select version, name, checksum from migrations")}
    for version, path in migrations:
        sql = path.read_text()
        checksum = _checksum(sql)
        if version in applied:
            name, recorded = applied[version]
            if recorded != checksum:
                raise MigrationError(
                    f"{path.name}: changed after it was applied (as {name}); applied migrations "
                    "must never be edited: add a new migration instead"
                )
            result.skipped.append(path.name)
            continue
        try:
            with conn.transaction():
                conn.execute(
                    "insert into migrations (version, name, checksum) values (%s, %s, %s)",
                    [version, path.name, checksum],
                )
                conn.execute(sql.encode())
        except psycopg.Error as exc:
            raise MigrationError(
                f"{path.name}: {_where(exc, sql)}: {exc.diag.message_primary or exc} "
                "(nothing from this file was applied)"
            ) from exc
        log(f"applied   {path.name}")
        result.applied.append(path.name)


def _make_roles(conn: psycopg.Connection, sql_dir: Path, listening: list[bool]) -> None:
    path = roles_file(sql_dir)
    sql = _read(path)
    listening.append(True)
    try:
        conn.execute(sql.encode())
    except psycopg.errors.InsufficientPrivilege as exc:
        raise MigrationError(
            f"security/{path.name}: {exc.diag.message_primary or exc}: run migrate as a role with "
            "CREATEROLE, or skip making roles (pgqw migrate --no-roles, PGQW_CREATE_ROLES=0) and "
            "have a DBA make pgqw_api, pgqw_worker and pgqw_admin"
        ) from exc
    except psycopg.Error as exc:
        raise MigrationError(f"security/{path.name}: {exc.diag.message_primary or exc}") from exc
    finally:
        listening.clear()


def _apply_functions(conn: psycopg.Connection, sql_dir: Path, result: MigrateResult, listening: list[bool],
                     log: Callable[[str], None]) -> None:
    files = function_files(sql_dir)
    grants = grants_file(sql_dir)
    grants_sql = _read(grants)
    with conn.transaction():
        # First pass without body checks so functions may call ones later in the alphabet,
        # then a checked pass so a broken body is reported with its file and line.
        for check in ("off", "on"):
            conn.execute(f"set local check_function_bodies = {check}")
            for path in files:
                sql = path.read_text()
                try:
                    conn.execute(sql.encode())
                except psycopg.Error as exc:
                    raise MigrationError(
                        f"functions/{path.name}: {_where(exc, sql)}: "
                        f"{exc.diag.message_primary or exc} (no function file was applied)"
                    ) from exc
        # The grants, in the same transaction: a new function is never left open to PUBLIC.
        listening.append(True)
        try:
            conn.execute(grants_sql.encode())
        except psycopg.Error as exc:
            raise MigrationError(
                f"security/{grants.name}: {exc.diag.message_primary or exc} "
                "(no function file was applied)"
            ) from exc
        finally:
            listening.clear()
    result.functions = [p.name for p in files]
    log(f"functions {len(files)} re-applied")


def _apply_settings(conn: psycopg.Connection, sql_dir: Path, listening: list[bool]) -> None:
    """The roles' session settings: after the grants, in a transaction of their own (they touch only the
    roles, so a failure here leaves the functions and grants applied)."""
    path = settings_file(sql_dir)
    sql = _read(path)
    for attempt in range(1, SETTINGS_TRIES + 1):
        listening.append(True)
        try:
            with conn.transaction():
                conn.execute(sql.encode())
            break
        except psycopg.Error as exc:
            # A migrate of another database of this server altered the same role meanwhile
            # (23505, or XX000 "tuple concurrently updated"): the next try finds it done.
            if exc.sqlstate in ("23505", "XX000") and attempt < SETTINGS_TRIES:
                continue
            raise MigrationError(f"security/{path.name}: {exc.diag.message_primary or exc}") from exc
        finally:
            listening.clear()
