"""The web page at / and its static files (app/static: CSS and a little JavaScript, no build step).

The page is one Jinja template; everything it shows is fetched from the JSON API by app/static/app.js.
The template names the app's root (request.script_root and /) in data-base, from which app.js makes
every URL it fetches or links to, so the page works wherever the app is mounted. The tabs a task module
added (app/extensions.py) are included as views of their own, with their scripts after app.js.
"""
from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, current_app, render_template

from . import extensions
from .models import STATUSES

bp = Blueprint("pages", __name__, static_folder="static", static_url_path="/static",
               template_folder="templates")

# The page loads only its own files and talks only to its own API.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")


@bp.get("/")
def index() -> Response:
    tabs = extensions.of(current_app).console_tabs
    context: dict[str, Any] = {}
    for tab in tabs:
        context.update(tab.context())
    response = Response(render_template("index.html", tabs=tabs, statuses=STATUSES, **context))
    response.headers["Content-Security-Policy"] = CSP
    response.headers["Cache-Control"] = "no-cache"
    return response
