"""The one error handler: every failure is the JSON envelope with the right status, never HTML, and
an unexpected error is a 500 whose message is hidden (and logged)."""
from __future__ import annotations

import logging
import socket
import uuid

import psycopg
import psycopg.errors as pgerrors
import pytest
from flask import Flask
from flask.testing import FlaskClient
from psycopg_pool import PoolTimeout

from pgqw.app import close_pool, create_app
from pgqw.app.errors import ApiError, classify, handle_error
from tests.api import states
from tests.api.conftest import CheckedClient


def error_of(r, status: int) -> dict:  # type: ignore[no-untyped-def]
    assert r.status_code == status, r.get_data(as_text=True)
    assert r.mimetype == "application/json"
    body = r.get_json()
    assert set(body) == {"error"}
    return body["error"]


@pytest.mark.parametrize(
    "method, path, status",
    [
        ("GET", "/api/nope", 404),
        ("GET", "/nope", 404),
        ("GET", "/static/nope.js", 404),
        ("GET", "/api/jobs/", 404),
        ("GET", "/api/jobs//attempts", 404),
        ("GET", "/api/jobs/a/b/c", 404),
        ("GET", "/api/" + "x" * 10000, 404),
        ("DELETE", "/api/jobs", 405),
        ("PUT", f"/api/jobs/{uuid.uuid4()}", 405),
        ("PATCH", f"/api/jobs/{uuid.uuid4()}/retry", 405),
        ("POST", "/api/stats", 405),
        ("POST", "/", 405),
    ],
)
def test_unknown_routes_and_methods_answer_with_the_json_envelope(
    shared_client: FlaskClient, unchanged: None, method: str, path: str, status: int
) -> None:
    error = error_of(shared_client.open(path, method=method), status)
    assert error["code"] == {404: "not_found", 405: "method_not_allowed"}[status]


def test_405_lists_the_allowed_methods(shared_client: FlaskClient, unchanged: None) -> None:
    r = shared_client.delete("/api/jobs")
    assert set(r.headers["Allow"].replace(" ", "").split(",")) >= {"GET", "POST"}


def unreachable_dsn() -> str:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"host=127.0.0.1 port={port} dbname=nothing user=nobody connect_timeout=1"


def test_database_unreachable_returns_503_with_retry_after() -> None:
    app = create_app({"TESTING": True, "DATABASE_URL": unreachable_dsn(), "POOL_TIMEOUT": 0.3})
    app.test_client_class = CheckedClient
    try:
        client = app.test_client()
        for path in ("/api/stats", f"/api/jobs/{uuid.uuid4()}", "/api/jobs?status=dead"):
            r = client.get(path)
            assert error_of(r, 503)["code"] == "unavailable"
            assert r.headers["Retry-After"] == "1"
        r = client.post("/api/jobs", json={"type": "listing_flyer", "payload": states.LISTING},
                        headers={"Idempotency-Key": "k"})
        assert error_of(r, 503)["code"] == "unavailable"
    finally:
        close_pool(app)


def test_statement_timeout_is_503_with_retry_after(db_url: str, conn: psycopg.Connection) -> None:
    """A statement the server cancels after STATEMENT_TIMEOUT_MS (here it waits for a row lock the
    test holds) answers 503, not 500, and the connection is fine for the next request."""
    job = states.dead(conn)
    app = create_app({"TESTING": True, "DATABASE_URL": db_url, "STATEMENT_TIMEOUT_MS": 300})
    app.test_client_class = CheckedClient
    try:
        client = app.test_client()
        with psycopg.connect(db_url) as holder:  # a transaction holding the job's row
            holder.execute("select 1 from jobs where id = %s for update", [job.id])
            r = client.post(f"/api/jobs/{job.id}/retry")
            assert error_of(r, 503)["code"] == "unavailable"
            assert r.headers["Retry-After"] == "1"
        assert client.post(f"/api/jobs/{job.id}/retry").status_code == 202
    finally:
        close_pool(app)


def test_database_error_nobody_expected_is_500_with_the_message_hidden(
    client: FlaskClient, conn: psycopg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    job = states.succeeded(conn)
    conn.execute("drop table job_results cascade")  # and the flyers view made from it
    for path in (f"/api/jobs/{job.id}/flyer", f"/api/jobs/{job.id}/result"):
        caplog.clear()
        with caplog.at_level(logging.ERROR):
            r = client.get(path)
        error = error_of(r, 500)
        assert error["code"] == "internal_error"
        assert "job_results" not in r.get_data(as_text=True) and "42P01" not in r.get_data(as_text=True)
        assert "job_results" in caplog.text  # the real cause is in the log


def test_python_exception_is_500_with_the_message_hidden(app: Flask, caplog: pytest.LogCaptureFixture) -> None:
    def boom():  # type: ignore[no-untyped-def]
        raise RuntimeError("secret detail")

    app.view_functions["api.jobs.stats"] = boom
    with caplog.at_level(logging.ERROR):
        r = app.test_client().get("/api/stats")
    error = error_of(r, 500)
    assert "secret" not in r.get_data(as_text=True)
    assert error["message"] == "an unexpected error happened; it has been logged"
    assert "secret detail" in caplog.text


@pytest.mark.parametrize(
    "exc, status, code",
    [
        (pgerrors.SerializationFailure(), 503, "unavailable"),
        (pgerrors.DeadlockDetected(), 503, "unavailable"),
        (pgerrors.AdminShutdown(), 503, "unavailable"),
        (pgerrors.CannotConnectNow(), 503, "unavailable"),
        (pgerrors.TooManyConnections(), 503, "unavailable"),
        (pgerrors.ConnectionFailure(), 503, "unavailable"),
        (pgerrors.ConnectionException(), 503, "unavailable"),
        (PoolTimeout("couldn't get a connection after 10.00 sec"), 503, "unavailable"),
        (pgerrors.QueryCanceled(), 503, "unavailable"),  # statement_timeout
        (pgerrors.IdleInTransactionSessionTimeout(), 503, "unavailable"),
        (pgerrors.LockNotAvailable(), 503, "unavailable"),  # lock_timeout
        (psycopg.OperationalError("consuming input failed: server closed the connection"), 503, "unavailable"),
        (pgerrors.UniqueViolation(), 409, "conflict"),
        (pgerrors.UndefinedTable(), 500, "internal_error"),
        (pgerrors.SyntaxError(), 500, "internal_error"),
        (psycopg.ProgrammingError("bad"), 500, "internal_error"),
        (ApiError(418, "teapot", "short and stout"), 418, "teapot"),
        (KeyError("x"), 500, "internal_error"),
    ],
)
def test_handle_error_maps_each_kind(shared_app: Flask, exc: Exception, status: int, code: str) -> None:
    with shared_app.test_request_context("/api/stats"):
        response = handle_error(exc)
        assert response.status_code == status
        assert response.get_json()["error"]["code"] == code
        if status == 503:
            assert response.headers["Retry-After"] == "1"


@pytest.mark.parametrize(
    "sqlstate, expected",
    [
        ("QV400", (400, "invalid_argument")),
        ("QV413", (413, "payload_too_large")),
        ("QN404", (404, "job_not_found")),
        ("QI409", (409, "idempotency_key_reused")),
        ("QS409", (409, "job_not_in_state")),
        ("QL409", (409, "lease_lost")),
        ("23505", (409, "conflict")),
        ("40001", (503, "unavailable")),
        ("40P01", (503, "unavailable")),
        ("08000", (503, "unavailable")),
        ("08006", (503, "unavailable")),
        ("57P01", (503, "unavailable")),
        ("57014", (503, "unavailable")),
        ("57P05", (503, "unavailable")),
        ("25P03", (503, "unavailable")),
        ("55P03", (503, "unavailable")),
        ("42P01", None),
        ("XX000", None),
        (None, None),
    ],
)
def test_classify_maps_sqlstate_to_http(sqlstate: str | None, expected: tuple[int, str] | None) -> None:
    assert classify(sqlstate) == expected


def test_no_error_is_ever_html(shared_client: FlaskClient, unchanged: None) -> None:
    for method, path in [("GET", "/api/jobs/%ZZ"), ("GET", "/%2e%2e/%2e%2e/etc/passwd"), ("TRACE", "/api/jobs"),
                         ("GET", "/api/jobs?limit=%00"), ("OPTIONS", "/api/nope")]:
        r = shared_client.open(path, method=method)
        assert "<html" not in r.get_data(as_text=True).lower(), (method, path)
        if r.status_code >= 400:
            assert r.mimetype == "application/json"
