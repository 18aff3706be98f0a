"""The demo's part of the web app, added by pgqw.demo.init_app (which the API's create_app calls for
each task module it loads) through the extension points of pgqw.app.extensions:

- GET /api/jobs/{id}/flyer: a listing_flyer job's PDF, inline, once the job has succeeded (its result
  is also at /api/jobs/{id}/result, as every job's is); documented in /api/openapi.json;
- the console's "Demo: make a flyer" tab: templates/pgqw_demo_make.html, a form whose fields are made
  from the Listing payload model's JSON Schema (required ones first, then the optional ones), and
  static/demo.js, which posts it and follows the job.
"""
from __future__ import annotations

import re
from typing import Any

from flask import Blueprint, Flask, Response

from pgqw.app import extensions, openapi
from pgqw.app.api.common import parse_job_id, pool
from pgqw.app.errors import ApiError
from pgqw.db import get_job, get_result

from .listing import CURRENCIES, EXAMPLE_LISTING, Listing

TYPE = "listing_flyer"
FLYER_PATH = "/api/jobs/{id}/flyer"  # as the OpenAPI document names it

api_bp = Blueprint("demo", __name__, url_prefix="/api")
# The tab's template and script; not under /api, so a page without a token loads them.
page_bp = Blueprint("demo_page", __name__, template_folder="templates", static_folder="static",
                    static_url_path="/demo/static")

# A field's label where splitting its name would not say it well; the rest: "agentPhone" → "Agent phone".
LABELS = {"priceMinor": "Price", "listingType": "For sale or rent", "floorAreaUnit": "Floor area unit",
          "listingUrl": "Listing URL", "photoUrl": "Photo URL"}
HINTS = {"priceMinor": "in minor units: kobo, cents"}
LONG_TEXT = 300  # a string field that may be longer than this is a textarea


@api_bp.get("/jobs/<job_id>/flyer")
def get_flyer(job_id: str) -> Response:
    """The demo's PDF (the result of a listing_flyer job) once the job has succeeded; 404 before."""
    jid = parse_job_id(job_id)
    with pool().connection() as conn:
        job = get_job(conn, job_id=jid)
        if job is None:
            raise ApiError(404, "job_not_found", f"job {jid} does not exist")
        result = get_result(conn, job_id=jid) if job.status == "succeeded" else None
    if result is None or result.data is None or result.content_type != "application/pdf":
        raise ApiError(404, "flyer_not_ready",
                       f"job {jid} is {job.status}; its flyer is served once the job has succeeded",
                       {"status": job.status})
    response = Response(bytes(result.data), mimetype="application/pdf")
    response.headers["Content-Disposition"] = f'inline; filename="flyer-{jid}.pdf"'
    response.headers["Cache-Control"] = "private, max-age=3600"
    return response


OPENAPI_PATHS: dict[str, Any] = {
    FLYER_PATH: {
        "get": {
            "operationId": "getFlyer",
            "summary": "The job's PDF, once the job has succeeded (the demo's listing_flyer)",
            "parameters": [openapi.JOB_ID],
            "responses": {
                "200": {
                    "description": "the flyer",
                    "headers": {"Content-Disposition": {
                        "schema": {"type": "string"}, "description": 'inline; filename="flyer-<id>.pdf"'}},
                    "content": {"application/pdf": {"schema": {"type": "string", "format": "binary"}}},
                },
                "404": openapi.error("no such job, or it has not succeeded yet (code flyer_not_ready)"),
                "503": openapi.UNAVAILABLE,
            },
        },
    },
}


def _label(name: str) -> str:
    if name in LABELS:
        return LABELS[name]
    words = re.sub(r"(?<!^)(?=[A-Z])", " ", name).lower()
    return words[:1].upper() + words[1:]


def form_fields() -> list[dict[str, Any]]:
    """The form's fields, from the payload model's JSON Schema: each property's kind (select for an
    enum, integer, number, text or textarea), whether it is required, and its example value."""
    schema = Listing.model_json_schema()
    required = list(schema.get("required", []))
    names = required + [n for n in schema["properties"] if n not in required]
    fields = []
    for name in names:
        prop = schema["properties"][name]
        value = EXAMPLE_LISTING.get(name, prop.get("default", ""))
        field: dict[str, Any] = {"name": name, "label": _label(name), "hint": HINTS.get(name),
                                 "required": name in required, "value": value, "options": []}
        if "enum" in prop:
            field["kind"] = "select"
            for option in prop["enum"]:
                currency = CURRENCIES.get(option) if name == "currency" else None
                field["options"].append({
                    "value": option, "label": f"{option} {currency.symbol}" if currency else option,
                    "data": {"symbol": currency.symbol, "exponent": currency.exponent} if currency else {}})
        elif prop.get("type") in ("integer", "number"):
            field["kind"] = prop["type"]
        else:
            field["kind"] = "textarea" if prop.get("maxLength", 0) > LONG_TEXT else "text"
        fields.append(field)
    return fields


def _context() -> dict[str, Any]:
    return {"demo_fields": form_fields()}


def init_app(app: Any) -> None:
    """Adds the flyer route, its OpenAPI path and the console tab to the Flask app."""
    assert isinstance(app, Flask)
    app.register_blueprint(api_bp)
    app.register_blueprint(page_bp)
    extensions.add_openapi_paths(app, OPENAPI_PATHS)
    extensions.add_console_tab(app, extensions.ConsoleTab(
        name="make", title="Demo: make a flyer", template="pgqw_demo_make.html",
        scripts=(("demo_page.static", "demo.js"),), context=_context))
