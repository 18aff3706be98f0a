"""Keeps each test's outcome on its item so fixtures can print process logs when a test fails; the
pgbouncer fixture."""
from __future__ import annotations

import os
from typing import Iterator

import pytest

from tests.pgbouncer import PgBouncer, why_unavailable


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    setattr(item, f"rep_{call.when}", outcome.get_result())


@pytest.fixture
def pgbouncer(pg_server: str, request: pytest.FixtureRequest) -> Iterator[PgBouncer]:
    """A real PgBouncer in transaction mode in front of the test server (tests/pgbouncer.py), stopped
    at the end. Without the binary: skipped with the reason, except in CI (CI set), where it fails."""
    reason = why_unavailable()
    if reason is not None:
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail(f"CI is set but PgBouncer is missing: {reason}")
        pytest.skip(reason)
    bouncer = PgBouncer(pg_server)
    try:
        bouncer.start()
        yield bouncer
    finally:
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(f"----- pgbouncer log -----\n{bouncer.log()}")
        bouncer.stop()
