"""schemathesis against the OpenAPI document the API serves (/api/openapi.json), in process (WSGI),
on a real database: every operation gets generated requests, valid and invalid, and every answer must
be documented: no 5xx, a documented status, content type and headers, a body matching the schema.

Bounded so the suite stays quick: PGQW_FUZZ_EXAMPLES examples per operation (default 25). A longer
run: `./run test tests/api/test_schemathesis.py --fuzz-examples 1000` (the option sets the variable).
The app runs with bearer tokens configured, as a hardened deployment would, and schemathesis sends a
write token; tests/api/test_auth.py covers the requests without one.
"""
from __future__ import annotations

import os
from typing import Iterator

import pytest
import schemathesis
from flask import Flask
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from pgqw.app import close_pool, create_app
from tests.api.openapi_check import OPENAPI  # the document as served on a test database

EXAMPLES = int(os.environ.get("PGQW_FUZZ_EXAMPLES") or 25)
TOKEN = "schemathesis-token-0123456789abcdef"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def fuzzed_app(shared_db_url: str) -> Iterator[Flask]:
    app = create_app({"TESTING": False, "DATABASE_URL": shared_db_url, "API_TOKENS": TOKEN})
    yield app
    close_pool(app)


@pytest.fixture(scope="module")
def api_schema(fuzzed_app: Flask):  # type: ignore[no-untyped-def]
    # The document as served (with its security requirement), loaded through the app itself.
    return schemathesis.openapi.from_wsgi("/api/openapi.json", fuzzed_app,
                                          headers={"Authorization": f"Bearer {TOKEN}"})


# One test per documented operation and generation mode. (schemathesis' own pytest loader,
# from_fixture, does not run under pytest 9, so the strategies are driven with hypothesis directly.)
OPERATIONS = sorted((path, method.upper()) for path, item in OPENAPI["paths"].items() for method in item)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
@pytest.mark.parametrize("path,method", OPERATIONS)
def test_schemathesis_every_answer_is_documented_and_none_is_5xx(api_schema, path: str, method: str,  # type: ignore[no-untyped-def]
                                                                  mode: GenerationMode) -> None:
    operation = api_schema[path][method]
    seen: list[int] = []

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def run(case) -> None:  # type: ignore[no-untyped-def]
        response = case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"}, checks=CHECKS)
        seen.append(response.status_code)

    run()
    assert seen, "no request was generated"
    assert all(status < 500 for status in seen)
