"""Checks a real response against app/openapi.py: its status is documented for that route and method,
its content type is documented for that status, and its JSON validates against the schema there."""
from __future__ import annotations

import re
from typing import Any

from flask import Flask
from jsonschema import Draft202012Validator, FormatChecker
from werkzeug.exceptions import HTTPException
from werkzeug.routing import RequestRedirect

from pgqw import demo, tasks
from pgqw.app import extensions
from pgqw.app.openapi import document
from pgqw.demo import web as demo_web

del demo  # imported for its task types: the test databases register them (tests/conftest.py)
TASK_TYPES = [(t.name, t.payload_schema, t.description) for t in sorted(tasks.registry, key=lambda t: t.name)]
# The document as the API serves it on a test database, with the demo's task module loaded (the default).
OPENAPI = document(auth_required=False, task_types=TASK_TYPES, extra_paths=demo_web.OPENAPI_PATHS)


def document_of(app: Flask) -> dict[str, Any]:
    """The document as this app serves it: with the paths its task modules added."""
    return document(auth_required=False, task_types=TASK_TYPES, extra_paths=extensions.of(app).openapi_paths)

_FORMATS = FormatChecker()


@_FORMATS.checks("date-time", raises=ValueError)
def _utc_with_z(value: object) -> bool:
    # What the API promises: ISO 8601, UTC, milliseconds, Z.
    return not isinstance(value, str) or bool(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", value))


def openapi_path(rule: str) -> str:
    """/api/jobs/<job_id>/flyer → /api/jobs/{id}/flyer"""
    return re.sub(r"<(?:[^:>]+:)?[^>]+>", "{id}", rule)


def validate(instance: Any, schema: dict[str, Any], document: dict[str, Any] | None = None) -> None:
    """Validates against a schema from the document (default OPENAPI); its $refs resolve within it."""
    components = (document or OPENAPI)["components"]
    Draft202012Validator({**schema, "components": components}, format_checker=_FORMATS).validate(instance)


def check_response(app: Flask, method: str, path: str, status: int, mimetype: str, body: Any,
                   document: dict[str, Any] | None = None) -> None:
    """Fails when the response is not what the document (default: the app's, document_of) says of this
    route."""
    document = document or document_of(app)
    adapter = app.url_map.bind("localhost")
    try:
        rule, _ = adapter.match(path, method=method, return_rule=True)
    except RequestRedirect:
        return
    except HTTPException:
        rule = None  # unknown route or method: the common error envelope
    if rule is None or not rule.rule.startswith("/api/"):
        if status >= 400:
            assert mimetype == "application/json", (method, path, status, mimetype)
            validate(body, {"$ref": "#/components/schemas/ErrorEnvelope"}, document)
        return
    item = document["paths"][openapi_path(rule.rule)]
    operation = item["get" if method == "HEAD" else method.lower()]
    responses = operation["responses"]
    assert str(status) in responses, f"{method} {path} answered {status}, not documented in {sorted(responses)}"
    content = responses[str(status)]["content"]
    assert mimetype in content or "*/*" in content, \
        f"{method} {path} {status} answered {mimetype}, documented {list(content)}"
    if mimetype == "application/json" and mimetype in content and method != "HEAD":
        validate(body, content[mimetype]["schema"], document)
