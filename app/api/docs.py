"""GET /api/openapi.json: the document, with the request body of the registered task types."""
from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify

from .. import auth, extensions
from ..openapi import document
from .task_types import task_types, usable

bp = Blueprint("docs", __name__)


@bp.get("/openapi.json")
def openapi() -> Response:
    # A type whose schema the API cannot use accepts no job (invalid_payload_schema): not documented.
    doc = document(auth_required=auth.enabled(current_app),
                   task_types=[(t.name, t.payload_schema, t.description) for t in task_types().all() if usable(t)],
                   extra_paths=extensions.of(current_app).openapi_paths)
    return jsonify(doc)
