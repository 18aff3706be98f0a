"""One JSON error class and one error handler for the whole app.

Every error leaves as ``{"error": {"code", "message", "details"?}}`` with the right status:
  ApiError                         → its own status
  psycopg errors, by exc.sqlstate  → DB_ERRORS below (the project's codes end in their HTTP status)
  pgqw.errors.PgqwError            → as the psycopg error it was made from
  other psycopg.OperationalError   → 503 (lost or cut connection, PoolTimeout, connect timeout)
  every 503                        → code "unavailable", header Retry-After: 1
  werkzeug HTTPExceptions          → their status (404 unknown route, 405, 413, 415, …)
  anything else                    → 500, message hidden, exception logged
No input produces an HTML page or a stack trace.
"""
from __future__ import annotations

from typing import Any

import psycopg
from flask import Flask, Response, current_app, jsonify, request
from werkzeug.exceptions import HTTPException

from pgqw.errors import CODES, PgqwError

from .models import ErrorBody, ErrorEnvelope


class ApiError(Exception):
    """An error the API reports on purpose: an HTTP status, a stable code, a message, optional details."""

    def __init__(self, status: int, code: str, message: str, details: Any = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.headers = headers or {}


# SQLSTATE → (HTTP status, error code). The project's codes (raised by db/functions/*.sql) come from
# their one declaration, pgqw.errors.CODES; below them, PostgreSQL's own codes the API answers for.
DB_ERRORS: dict[str, tuple[int, str]] = {
    **{c.sqlstate: (c.status, c.api_code) for c in CODES.values() if c.status is not None and c.api_code},
    "23505": (409, "conflict"),
    "23514": (400, "constraint_violated"),  # check_violation: a table's own rule refused the row
    "40001": (503, "unavailable"),  # serialization_failure
    "40P01": (503, "unavailable"),  # deadlock_detected
    "57P01": (503, "unavailable"),  # admin_shutdown
    "57P02": (503, "unavailable"),  # crash_shutdown
    "57P03": (503, "unavailable"),  # cannot_connect_now
    "53300": (503, "unavailable"),  # too_many_connections
    "57014": (503, "unavailable"),  # query_canceled: statement_timeout (API_STATEMENT_TIMEOUT_MS)
    "57P05": (503, "unavailable"),  # idle_session_timeout
    "25P03": (503, "unavailable"),  # idle_in_transaction_session_timeout
    "55P03": (503, "unavailable"),  # lock_not_available: lock_timeout
}
# Whole classes: 08 connection exception.
DB_ERROR_CLASSES: dict[str, tuple[int, str]] = {
    "08": (503, "unavailable"),
}
UNAVAILABLE_MESSAGE = "the database is unavailable right now; try again in a moment"


def classify(sqlstate: str | None) -> tuple[int, str] | None:
    """The (status, code) a SQLSTATE maps to, or None when it is unexpected (→ 500)."""
    if not sqlstate:
        return None
    return DB_ERRORS.get(sqlstate) or DB_ERROR_CLASSES.get(sqlstate[:2])


def envelope(status: int, code: str, message: str, details: Any = None) -> Response:
    body = ErrorBody(code=code, message=message) if details is None else \
        ErrorBody(code=code, message=message, details=details)
    response = jsonify(ErrorEnvelope(error=body).dump())
    response.status_code = status
    return response


def _database_error(exc: psycopg.Error) -> Response:
    mapped = classify(exc.sqlstate)
    if mapped is None and isinstance(exc, psycopg.OperationalError):
        # Lost connection, pool timeout (PoolTimeout), pool closed, a connection cut because the
        # server did not answer in time (app.ApiPool): no SQLSTATE or a class we did not list, but
        # the request may well succeed later.
        mapped = (503, "unavailable")
    if mapped is None:
        return _unexpected(exc)
    status, code = mapped
    if status == 503:
        current_app.logger.warning("database unavailable on %s %s: %s", request.method, request.path, exc)
        response = envelope(status, code, UNAVAILABLE_MESSAGE)
        response.headers["Retry-After"] = "1"
        return response
    # The project's messages are written for people and name nothing secret; 23505 is not ours.
    message = exc.diag.message_primary if exc.sqlstate and exc.sqlstate[0] == "Q" else None
    details = {"sqlstate": exc.sqlstate}
    if exc.sqlstate == "23514" and exc.diag.constraint_name:
        # Constraint names are part of the schema's documentation (db/migrations), not a secret.
        details["constraint"] = exc.diag.constraint_name
        message = f"the request breaks the table rule {exc.diag.constraint_name}"
    if exc.sqlstate and exc.sqlstate[0] == "Q" and exc.diag.message_detail:
        details["detail"] = exc.diag.message_detail
    if exc.diag.message_hint:
        details["hint"] = exc.diag.message_hint
    return envelope(status, code, message or "the request conflicts with the current state", details)


def _http_error(exc: HTTPException) -> Response:
    status = exc.code or 500
    code = {
        400: "bad_request", 404: "not_found", 405: "method_not_allowed", 413: "payload_too_large",
        415: "unsupported_media_type",
    }.get(status, (exc.name or "error").lower().replace(" ", "_"))
    message = exc.description or exc.name or "error"
    if status == 413:
        limit = current_app.config.get("MAX_CONTENT_LENGTH")
        message = f"the request body is larger than the limit of {limit} bytes"
    response = envelope(status, code, message)
    for name in ("Allow", "Retry-After"):
        value = exc.get_response().headers.get(name)
        if value:
            response.headers[name] = value
    return response


def _unexpected(exc: BaseException) -> Response:
    current_app.logger.error(
        "unexpected error on %s %s", request.method, request.path, exc_info=(type(exc), exc, exc.__traceback__)
    )
    return envelope(500, "internal_error", "an unexpected error happened; it has been logged")


def handle_error(exc: Exception) -> Response | HTTPException:
    """The one error handler. Registered on the app for Exception, so it sees everything."""
    if isinstance(exc, ApiError):
        response = envelope(exc.status, exc.code, exc.message, exc.details)
        response.headers.update(exc.headers)
        return response
    if isinstance(exc, HTTPException):
        if exc.code is not None and exc.code < 400:
            return exc  # RequestRedirect (308) and friends are not errors
        return _http_error(exc)
    if isinstance(exc, PgqwError) and isinstance(exc.__cause__, psycopg.Error):
        return _database_error(exc.__cause__)  # pgqw.client's error for a database refusal
    if isinstance(exc, psycopg.Error):
        return _database_error(exc)
    return _unexpected(exc)


def init_app(app: Flask) -> None:
    app.register_error_handler(Exception, handle_error)
