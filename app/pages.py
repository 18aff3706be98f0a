"""The web page at / and its static files (app/static: CSS and a little JavaScript, no build step).

The page is one Jinja template: the example listing and the currency list come from pgqw.listing,
everything else is fetched from the JSON API by app/static/app.js. The template names the app's root
(request.script_root and /) in data-base, from which app.js makes every URL it fetches or links to, so
the page works wherever the app is mounted. The demo's form is in it only when the demo is loaded.
"""
from __future__ import annotations

from flask import Blueprint, Response, current_app, render_template

from pgqw.listing import CURRENCIES, EXAMPLE_LISTING

from . import demo_enabled

bp = Blueprint("pages", __name__, static_folder="static", static_url_path="/static",
               template_folder="templates")

# The page loads only its own files and talks only to its own API.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")


@bp.get("/")
def index() -> Response:
    currencies = [{"code": c.code, "symbol": c.symbol, "exponent": c.exponent}
                  for c in sorted(CURRENCIES.values(), key=lambda c: c.code)]
    response = Response(render_template("index.html", listing=EXAMPLE_LISTING, currencies=currencies,
                                        demo=demo_enabled(current_app)))
    response.headers["Content-Security-Policy"] = CSP
    response.headers["Cache-Control"] = "no-cache"
    return response
