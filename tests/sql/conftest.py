"""The stored-function tests enqueue jobs of made-up task types ('t', 'other', ...) that no task module
defines: each test's database has them registered (no code defaults, so they take queue_settings', as an
unregistered type would where a DBA accepts those), as `pgqw tasks register` would."""
from __future__ import annotations

import psycopg
import pytest
from psycopg.types.json import Jsonb

TEST_TYPES = ("t", "other", "other_type", "email", "report")


@pytest.fixture(autouse=True)
def _test_types(request: pytest.FixtureRequest) -> None:
    if "db_url" not in request.fixturenames:
        return  # a test without a database of its own (module databases register their own)
    with psycopg.connect(request.getfixturevalue("db_url"), autocommit=True) as conn:
        conn.execute("select register_task_types(%s::jsonb)",
                     [Jsonb([{"name": n, "payload_schema": {}} for n in TEST_TYPES])])
