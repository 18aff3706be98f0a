"""Fixtures of the API tests: an app on this test's own database and a client whose every response
is checked against the OpenAPI document (status documented, content type documented, schema valid)."""
from __future__ import annotations

from typing import Any, Iterator

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient

from pgqw.app import close_pool, create_app
from tests.api.openapi_check import check_response
from tests.helpers import database_copy, snapshot


class CheckedClient(FlaskClient):
    """A test client that fails the test when a response is not what app/openapi.py documents."""

    def open(self, *args: Any, **kwargs: Any):  # type: ignore[no-untyped-def, override]
        response = super().open(*args, **kwargs)
        if response.status_code >= 500 and response.mimetype != "application/json":
            raise AssertionError(f"a {response.status_code} that is not JSON: {response.get_data(as_text=True)[:500]}")
        body = response.get_json(silent=True) if response.mimetype == "application/json" else None
        check_response(self.application, response.request.method, response.request.path,
                       response.status_code, response.mimetype, body)
        return response


@pytest.fixture
def app(db_url: str) -> Iterator[Flask]:
    app = create_app({"TESTING": True, "DATABASE_URL": db_url})
    app.test_client_class = CheckedClient
    yield app
    close_pool(app)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


# Requests that must be refused, or only read, need no database of their own: they share one per
# module. They assert "nothing was written" as a before/after difference, so they stay independent.

@pytest.fixture(scope="module")
def shared_db_url(pg_server: str, template_db: str) -> Iterator[str]:
    with database_copy(pg_server, template_db, "pgqw_m_") as url:
        yield url


@pytest.fixture(scope="module")
def shared_app(shared_db_url: str) -> Iterator[Flask]:
    app = create_app({"TESTING": True, "DATABASE_URL": shared_db_url})
    app.test_client_class = CheckedClient
    yield app
    close_pool(app)


@pytest.fixture
def shared_client(shared_app: Flask) -> FlaskClient:
    return shared_app.test_client()


@pytest.fixture
def unchanged(shared_db_url: str) -> Iterator[None]:
    """Fails the test if the shared database's tables changed during it."""
    with psycopg.connect(shared_db_url, autocommit=True) as c:
        before = snapshot(c)
        yield
        assert snapshot(c) == before, "a refused request wrote to the database"
