"""The web app: the JSON API under /api and the page at /.

    app = create_app()                                        # settings from the environment (pgqw.config)
    app = create_app({"DATABASE_URL": dsn, "TESTING": True})  # tests; app.serve passes the URL it checked

Flask config keys beside Flask's own: DATABASE_URL (default: pgqw.embedded.database_url(settings)),
POOL_MAX_SIZE (default API_THREADS), POOL_TIMEOUT (seconds a request waits for a connection, then 503),
API_TOKENS and API_READ_TOKENS (app/auth.py; tuples or comma-separated strings; kept only as digests).
MAX_CONTENT_LENGTH comes from MAX_BODY_BYTES.

One psycopg ConnectionPool per app, opened here and closed at exit (or by close_pool()); a request
borrows a connection with `with pool.connection() as conn:`, which commits on success and rolls back
on an exception.
"""
from __future__ import annotations

import atexit
import importlib
import importlib.util
from typing import Any

from flask import Flask, request
from psycopg_pool import ConnectionPool

from pgqw import config

POOL_KEY = "pgqw.pool"


def create_app(test_config: dict[str, Any] | None = None) -> Flask:
    settings = config.load()
    app = Flask(__name__, static_folder=None)  # static files come from the pages blueprint
    app.config.from_mapping(
        MAX_CONTENT_LENGTH=settings.max_body_bytes,
        POOL_MAX_SIZE=settings.api_threads,
        POOL_TIMEOUT=10.0,  # seconds a request waits for a connection before a 503
        MAX_ATTEMPTS=settings.max_attempts,  # None: queue_settings.max_attempts decides
        API_TOKENS=settings.api_tokens,
        API_READ_TOKENS=settings.api_read_tokens,
    )
    if test_config:
        app.config.from_mapping(test_config)
    for key in ("API_TOKENS", "API_READ_TOKENS"):  # tests may pass a comma-separated string
        if isinstance(app.config[key], str):
            app.config[key] = config.tokens(key, app.config[key])
    app.url_map.merge_slashes = False  # /api/jobs//attempts is a 404, not a redirect page
    app.json.sort_keys = False  # type: ignore[attr-defined]  # keep the documented field order
    if not app.config.get("DATABASE_URL"):
        from pgqw.embedded import database_url

        app.config["DATABASE_URL"] = database_url(settings)

    pool = ConnectionPool(
        app.config["DATABASE_URL"],
        open=False,
        min_size=1,
        max_size=max(1, int(app.config["POOL_MAX_SIZE"])),
        timeout=float(app.config["POOL_TIMEOUT"]),
        kwargs={"application_name": "pgqw-api"},
        name="pgqw-api",
    )
    pool.open(wait=False)
    atexit.register(pool.close)
    app.extensions[POOL_KEY] = pool

    from . import api, auth, errors, pages

    errors.init_app(app)
    auth.install(app, tuple(app.config.pop("API_TOKENS")), tuple(app.config.pop("API_READ_TOKENS")))

    @app.before_request
    def _authenticate() -> None:
        # Every path under /api, known or not, so an unknown token cannot even map the routes.
        if request.path == "/api" or request.path.startswith("/api/"):
            auth.check_request()

    app.register_blueprint(api.bp)
    app.register_blueprint(pages.bp)
    # Room for more blueprints: app/metrics.py, when it exists, exports `bp` and is registered here.
    if importlib.util.find_spec(f"{__name__}.metrics") is not None:
        app.register_blueprint(importlib.import_module(f"{__name__}.metrics").bp)

    @app.after_request
    def _security_headers(response):  # type: ignore[no-untyped-def]
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response

    return app


def close_pool(app: Flask) -> None:
    """Closes the app's connection pool now (tests; atexit does it otherwise)."""
    app.extensions[POOL_KEY].close()
