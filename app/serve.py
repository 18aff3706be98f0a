"""`pgqw api`: serve the app with waitress (production), or Flask's dev server with --dev.

Prints one line with the URL once listening, e.g. `pgqw api: serving on http://127.0.0.1:3000/`.
With --port 0 the system picks a free port and that line says which (tests read it).
"""
from __future__ import annotations

import argparse
import http
import ipaddress
import json
import logging
import signal
import socket
import sys

import psycopg
from waitress.channel import HTTPChannel
from waitress.server import BaseWSGIServer
from waitress.task import ErrorTask
from waitress.utilities import InternalServerError, RequestEntityTooLarge, RequestHeaderFieldsTooLarge

from pgqw import config
from pgqw.errors import UsageError


def _url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def is_loopback(host: str) -> bool:
    """True when every address host names is a loopback one (127.0.0.0/8, ::1). A name is resolved;
    one that does not resolve, and the wildcard addresses (0.0.0.0, ::, ''), are not loopback."""
    if not host.strip():
        return False
    try:
        infos = socket.getaddrinfo(host, None)
    except (socket.gaierror, UnicodeError):
        return False
    addresses = {info[4][0].split("%")[0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)


def check_exposure(host: str, settings: config.Settings) -> None:
    """Refuses to serve an open API beyond this machine: raises UsageError (the cli's one-line message)."""
    if not is_loopback(host) and not (settings.api_tokens or settings.api_read_tokens):
        raise UsageError(
            f"refusing to listen on {host or 'every address'} without authentication: set API_TOKENS "
            "(comma-separated bearer tokens, 16+ characters each), or listen on 127.0.0.1"
        )


def framing_error(error: object) -> tuple[int, str, str]:
    """(status, code, message) of a request waitress could not read as HTTP: always a 4xx, except
    waitress' own 500 (the app failed before answering), which is not about the request."""
    detail = str(getattr(error, "body", "") or "")[:200]
    if isinstance(error, RequestEntityTooLarge):
        return 413, "payload_too_large", f"the request body is larger than this server reads ({detail})"
    if isinstance(error, RequestHeaderFieldsTooLarge):
        return 431, "headers_too_large", f"the request line and headers are too large ({detail})"
    if isinstance(error, InternalServerError):
        return 500, "internal_error", "an unexpected error happened; it has been logged"
    # BadRequest (a malformed request line, header, Content-Length or chunk) and ServerNotImplemented
    # (a Transfer-Encoding other than chunked): the request is at fault, so a 400, not waitress' 501.
    return 400, "invalid_framing", f"the request is not well-formed HTTP/1.1: {detail or 'bad framing'}"


class JsonErrorTask(ErrorTask):
    """waitress' answer to a request it could not read, in the API's JSON error envelope (app/errors.py)."""

    def execute(self) -> None:
        status, code, message = framing_error(self.request.error)
        body = json.dumps({"error": {"code": code, "message": message}}).encode()
        self.status = f"{status} {http.HTTPStatus(status).phrase}"
        self.response_headers.extend([("Content-Type", "application/json"), ("X-Content-Type-Options", "nosniff")])
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)


class JsonErrorChannel(HTTPChannel):
    error_task_class = JsonErrorTask


def answer_framing_errors_in_json(channels: dict) -> None:
    """Makes every server waitress.create_server put in `channels` (its map) answer with JsonErrorTask."""
    for dispatcher in channels.values():
        if isinstance(dispatcher, BaseWSGIServer):
            dispatcher.channel_class = JsonErrorChannel


def _stop_on_sigterm() -> None:
    """SIGTERM ends the process like Ctrl+C does: finally blocks and atexit (the pool's close) run."""
    def stop(signum, frame):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)


def cmd_api(args: argparse.Namespace) -> int:
    from pgqw.embedded import database_url

    from . import api_connect_kwargs, create_app

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = config.load()
    port = args.port if args.port is not None else settings.port
    host = args.host
    check_exposure(host, settings)
    url = database_url(settings)
    # One direct connection first: an unreachable database fails the start at once, as the cli's
    # one-line message, rather than as the pool's retries in the background.
    with psycopg.connect(url, **api_connect_kwargs(url, settings)):
        pass
    app = create_app({"DATABASE_URL": url})
    _stop_on_sigterm()

    if args.dev:
        print(f"pgqw api: serving on {_url(host, port)} (Flask development server)", flush=True)
        # Debug mode reloads templates; the debugger stays off (errors are the JSON envelope anyway).
        app.run(host=host, port=port, debug=True, use_debugger=False, use_reloader=False)
        return 0

    import waitress

    channels: dict = {}
    try:
        server = waitress.create_server(
            app,
            map=channels,
            host=host,
            port=port,
            threads=settings.api_threads,
            ident="pgqw",
            # The app answers 413 above MAX_BODY_BYTES; waitress stops far bigger bodies itself
            # (JsonErrorTask) instead of buffering up to its default of 1 GiB.
            max_request_body_size=max(16 * settings.max_body_bytes, 1 << 20),
            clear_untrusted_proxy_headers=True,
        )
    except (ValueError, OSError) as exc:
        # A name that does not resolve, an address not on this machine, a port in use or not allowed.
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"cannot listen on {host}:{port}: {reason}") from None
    answer_framing_errors_in_json(channels)
    print(f"pgqw api: serving on {_url(host, server.effective_port)} "
          f"(waitress, {settings.api_threads} threads)", flush=True)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        sys.stdout.flush()
    return 0
