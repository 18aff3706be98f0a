"""Keeps each test's outcome on its item so fixtures can print process logs when a test fails."""
from __future__ import annotations

from typing import Iterator

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    setattr(item, f"rep_{call.when}", outcome.get_result())
