"""`pgqw api`: serve the app with waitress (production), or Flask's dev server with --dev.

Prints one line with the URL once listening, e.g. `pgqw api: serving on http://127.0.0.1:3000/`.
With --port 0 the system picks a free port and that line says which (tests read it).

--processes N (API_PROCESSES): N server processes accept from one listening socket, each with its own
app, connection pool and API_THREADS threads. One Python process answers on one core at most (the
interpreter lock); more processes use more cores. The first process binds the socket, then forks the
others before any pool or thread exists; a signal to it stops them all, and if one ends on its own the
rest are stopped too and the command fails (a process manager starts it again).

Another WSGI server serves the factory, pgqw.app:create_app. Its listen address is unknown to the
app, so check_exposure cannot run there; without tokens the app refuses every peer that is not this
machine itself instead (app/auth.py, 403 forbidden_peer).
"""
from __future__ import annotations

import argparse
import http
import ipaddress
import json
import logging
import os
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
    addresses = {str(info[4][0]).split("%")[0] for info in infos}
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
    def stop(signum: int, frame: object) -> None:
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
    processes = args.processes if args.processes is not None else settings.api_processes
    if args.dev:
        app = create_app({"DATABASE_URL": url})
        _stop_on_sigterm()
        print(f"pgqw api: serving on {_url(host, port)} (Flask development server)", flush=True)
        # Debug mode reloads templates; the debugger stays off (errors are the JSON envelope anyway).
        app.run(host=host, port=port, debug=True, use_debugger=False, use_reloader=False)
        return 0

    sock = _listen(host, port)
    shown = f"{_url(host, sock.getsockname()[1])} (waitress, "
    if processes <= 1:
        print(f"pgqw api: serving on {shown}{settings.api_threads} threads)", flush=True)
        return _serve(sock, url, settings)
    children = []
    for _ in range(processes):
        pid = os.fork()
        if pid == 0:  # a server process: its own app, pool and threads, made after the fork
            code = 1
            try:
                code = _serve(sock, url, settings)
            except KeyboardInterrupt:  # stopped while it was starting
                code = 0
            except BaseException as exc:  # said in one line: os._exit below leaves no traceback
                print(f"pgqw api: server process {os.getpid()}: {type(exc).__name__}: {exc}", file=sys.stderr,
                      flush=True)
            finally:
                os._exit(code)
        children.append(pid)
    sock.close()
    print(f"pgqw api: serving on {shown}{processes} processes of {settings.api_threads} threads)", flush=True)
    return _supervise(children)


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket (UsageError, the cli's one line, when it cannot be had)."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, address = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as waitress does
        try:
            sock.bind(address)
        except OSError:
            sock.close()
            raise
    except (socket.gaierror, UnicodeError, OSError) as exc:
        # A name that does not resolve, an address not on this machine, a port in use or not allowed.
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"cannot listen on {host}:{port}: {reason}") from None
    sock.listen(1024)
    return sock


def _serve(sock: socket.socket, url: str, settings: config.Settings) -> int:
    """One server process on the listening socket, until SIGTERM or Ctrl+C."""
    import waitress

    from . import create_app

    app = create_app({"DATABASE_URL": url})
    _stop_on_sigterm()
    channels: dict = {}
    server = waitress.create_server(
        app,
        map=channels,
        sockets=[sock],
        threads=settings.api_threads,
        ident="pgqw",
        # The app answers 413 above MAX_BODY_BYTES; waitress stops far bigger bodies itself
        # (JsonErrorTask) instead of buffering up to its default of 1 GiB.
        max_request_body_size=max(16 * settings.max_body_bytes, 1 << 20),
        clear_untrusted_proxy_headers=True,
    )
    answer_framing_errors_in_json(channels)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        sys.stdout.flush()
    return 0


def _supervise(children: list[int]) -> int:
    """Waits for the server processes. SIGTERM or Ctrl+C stops them all (exit 0); one that ends on its
    own stops the others (exit 1)."""
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        for pid in children:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    left = set(children)
    code = 0
    while left:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        left.discard(pid)
        if not stopping:
            print(f"pgqw api: server process {pid} ended (status {status}); stopping the others", file=sys.stderr,
                  flush=True)
            code = 1
            stop(signal.SIGTERM, None)
    return code
