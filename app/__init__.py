"""The web app: the JSON API under /api and the page at /.

    app = create_app()                                        # settings from the environment (pgqw.config)
    app = create_app({"DATABASE_URL": dsn, "TESTING": True})  # tests; app.serve passes the URL it checked

Flask config keys beside Flask's own: DATABASE_URL (default: pgqw.embedded.database_url(settings)),
POOL_MAX_SIZE (default API_THREADS), POOL_TIMEOUT (seconds a request waits for a connection, then 503;
default API_POOL_TIMEOUT_MS), STATEMENT_TIMEOUT_MS (default API_STATEMENT_TIMEOUT_MS: the server cancels
a statement after it, and a borrowed connection that has not answered 1 s later is cut; 0: neither),
API_TOKENS and API_READ_TOKENS (app/auth.py; tuples or comma-separated strings; kept only as digests),
TASK_MODULES (default: the settings' task_modules, PGQW_TASKS; a tuple or a comma-separated string): each module
that can be imported here is, and its init_app(app), if it has one, may add routes, OpenAPI paths and a
console tab (app/extensions.py). The API reads the task types themselves from the database.
MAX_CONTENT_LENGTH comes from MAX_BODY_BYTES.

The app answers at any mount point: mounted under a prefix (werkzeug's DispatcherMiddleware, a proxy
that sets SCRIPT_NAME), its page fetches and links below that prefix (request.script_root).

One psycopg ConnectionPool per app, opened here and closed at exit (or by close_pool()); a request
borrows a connection with `with pool.connection() as conn:`, which commits on success and rolls back
on an exception. Its connections carry the shared keywords of pgqw/connect.py (connect timeout, TCP
keepalives and user timeout, the session's statement and idle-in-transaction timeouts), and a borrow
is watched (connect.Watchdog), so a frozen server costs a request seconds and a 503, not a thread.
"""
from __future__ import annotations

import atexit
import importlib
import importlib.util
from contextlib import contextmanager
from typing import Any, Iterator

import psycopg
from flask import Flask, Response, request
from psycopg_pool import ConnectionPool

from pgqw import config, connect

POOL_KEY = "pgqw.pool"
DEADLINE_GRACE_S = 1.0  # past the statement timeout, so a live server's own cancel (57014) comes first
WATCHDOG = connect.Watchdog("pgqw-api-watchdog")  # one thread for every pool of the process


class ApiPool(ConnectionPool):
    """A pool whose connection() cuts the connection when the borrow outlives `deadline_s` (commit
    included): the request then fails with an OperationalError, a 503."""

    def __init__(self, *args: Any, deadline_s: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deadline_s = deadline_s

    @contextmanager
    def connection(self, timeout: float | None = None, *, autocommit: bool = False,
                   deadline_s: float | None = None) -> Iterator[psycopg.Connection]:
        """autocommit: for a request that makes one call, each its own transaction, which then costs one
        round trip instead of three (BEGIN, the call, COMMIT); or several calls, each committed on its own.
        deadline_s: a longer deadline than the pool's for this borrow (a bulk action's many bounded calls,
        each still under the statement timeout); never shorter, and none when the pool has none."""
        deadline = self.deadline_s if self.deadline_s is None or deadline_s is None else max(deadline_s,
                                                                                            self.deadline_s)
        conn = self.getconn(timeout=timeout)
        try:
            with WATCHDOG.guard(conn, deadline):
                conn.autocommit = autocommit
                with conn:  # commit on success, rollback on an exception
                    yield conn
        finally:
            self.putconn(conn)  # a broken (cut) connection is discarded and replaced


def create_app(test_config: dict[str, Any] | None = None) -> Flask:
    settings = config.load()
    app = Flask(__name__, static_folder=None)  # static files come from the pages blueprint
    app.config.from_mapping(
        MAX_CONTENT_LENGTH=settings.max_body_bytes,
        POOL_MAX_SIZE=settings.api_threads,
        POOL_TIMEOUT=settings.api_pool_timeout_ms / 1000,  # seconds a request waits for a connection before a 503
        STATEMENT_TIMEOUT_MS=settings.api_statement_timeout_ms,
        MAX_ATTEMPTS=settings.max_attempts,  # None: queue_settings.max_attempts decides
        API_TOKENS=settings.api_tokens,
        API_READ_TOKENS=settings.api_read_tokens,
        TASK_MODULES=settings.task_modules,
    )
    if test_config:
        app.config.from_mapping(test_config)
    for key in ("API_TOKENS", "API_READ_TOKENS"):  # tests may pass a comma-separated string
        if isinstance(app.config[key], str):
            app.config[key] = config.tokens(key, app.config[key])
    modules = app.config["TASK_MODULES"] or ()
    if isinstance(modules, str):
        modules = modules.split(",")
    app.config["TASK_MODULES"] = tuple(m.strip() for m in modules if m.strip())
    app.url_map.merge_slashes = False  # /api/jobs//attempts is a 404, not a redirect page
    app.json.sort_keys = False  # type: ignore[attr-defined]  # keep the documented field order
    if not app.config.get("DATABASE_URL"):
        from pgqw.embedded import database_url

        app.config["DATABASE_URL"] = database_url(settings)

    statement_ms = int(app.config["STATEMENT_TIMEOUT_MS"] or 0)
    pool = ApiPool(
        app.config["DATABASE_URL"],
        open=False,
        min_size=1,
        max_size=max(1, int(app.config["POOL_MAX_SIZE"])),
        timeout=float(app.config["POOL_TIMEOUT"]),
        kwargs=api_connect_kwargs(app.config["DATABASE_URL"], settings, statement_ms),
        # A failed reconnect is given up after this; the next request starts a fresh one at once
        # instead of waiting out the pool's ever-growing backoff (minutes by default).
        reconnect_timeout=5.0,
        name="pgqw-api",
        deadline_s=statement_ms / 1000 + DEADLINE_GRACE_S if statement_ms else None,
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
    init_task_modules(app)
    # Room for more blueprints: app/metrics.py, when it exists, exports `bp` and is registered here.
    if importlib.util.find_spec(f"{__name__}.metrics") is not None:
        app.register_blueprint(importlib.import_module(f"{__name__}.metrics").bp)

    @app.after_request
    def _security_headers(response: Response) -> Response:
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response

    return app


def api_connect_kwargs(conninfo: str, settings: config.Settings, statement_timeout_ms: int | None = None
                       ) -> dict[str, Any]:
    """The API's connection keywords: the shared ones, and its session's timeouts."""
    ms = settings.api_statement_timeout_ms if statement_timeout_ms is None else statement_timeout_ms
    return connect.connect_kwargs(conninfo, settings, application_name="pgqw-api", session={
        "statement_timeout": ms or None, "idle_in_transaction_session_timeout": ms or None})


def init_task_modules(app: Flask) -> None:
    """Imports each module of TASK_MODULES and calls its init_app(app) when it has one. A module this
    process cannot find is left out (the workers may have code the API does not)."""
    for name in app.config["TASK_MODULES"]:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # its parent package is not installed here
            found = False
        if not found:
            app.logger.info("task module %s is not installed here: the API adds nothing of it", name)
            continue
        init = getattr(importlib.import_module(name), "init_app", None)
        if callable(init):
            init(app)


def close_pool(app: Flask) -> None:
    """Closes the app's connection pool now (tests; atexit does it otherwise)."""
    app.extensions[POOL_KEY].close()
