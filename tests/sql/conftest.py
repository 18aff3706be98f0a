"""The stored-function tests enqueue jobs of made-up task types ('t', 'other', ...) that no task module
defines: their databases are copies of a template of their own, the session's template with those types
registered (no code defaults, so they take queue_settings', as an unregistered type would where a DBA
accepts those), as `pgqw tasks register` would have registered them."""
from __future__ import annotations

import uuid
from typing import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

from tests.conftest import _Copies
from tests.helpers import make_copy

TEST_TYPES = ("t", "other", "other_type", "email", "report")


@pytest.fixture(scope="session")
def sql_template_db(pg_server: str, template_db: str) -> Iterator[str]:
    name = f"pgqw_tpl_sql_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server, autocommit=True) as admin:
        make_copy(admin, template_db, name)
    with psycopg.connect(make_conninfo(pg_server, dbname=name), autocommit=True) as conn:
        conn.execute("select register_task_types(%s::jsonb)",
                     [Jsonb([{"name": n, "payload_schema": {}} for n in TEST_TYPES])])
    yield name
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def _copies(pg_server: str, sql_template_db: str) -> Iterator[_Copies]:
    """The copies the tests here take (db_url): of sql_template_db."""
    copies = _Copies(pg_server, sql_template_db)
    yield copies
    copies.close()
