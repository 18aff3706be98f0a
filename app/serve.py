"""`pgqw api`: serve the app with waitress (production), or Flask's dev server with --dev.

Prints one line with the URL once listening, e.g. `pgqw api: serving on http://127.0.0.1:3000/`.
With --port 0 the system picks a free port and that line says which (tests read it).
"""
from __future__ import annotations

import argparse
import ipaddress
import logging
import signal
import socket
import sys

import psycopg

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


def _stop_on_sigterm() -> None:
    """SIGTERM ends the process like Ctrl+C does: finally blocks and atexit (the pool's close) run."""
    def stop(signum, frame):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)


def cmd_api(args: argparse.Namespace) -> int:
    from pgqw.embedded import database_url

    from . import create_app

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = config.load()
    port = args.port if args.port is not None else settings.port
    host = args.host
    check_exposure(host, settings)
    url = database_url(settings)
    # One direct connection first: an unreachable database fails the start at once, as the cli's
    # one-line message, rather than as the pool's retries in the background.
    with psycopg.connect(url, connect_timeout=10):
        pass
    app = create_app({"DATABASE_URL": url})
    _stop_on_sigterm()

    if args.dev:
        print(f"pgqw api: serving on {_url(host, port)} (Flask development server)", flush=True)
        # Debug mode reloads templates; the debugger stays off (errors are the JSON envelope anyway).
        app.run(host=host, port=port, debug=True, use_debugger=False, use_reloader=False)
        return 0

    import waitress

    try:
        server = waitress.create_server(
            app,
            host=host,
            port=port,
            threads=settings.api_threads,
            ident="pgqw",
            # The app answers 413 in JSON above MAX_BODY_BYTES; waitress stops far bigger bodies itself
            # (in plain text) instead of buffering up to its default of 1 GiB.
            max_request_body_size=max(16 * settings.max_body_bytes, 1 << 20),
            clear_untrusted_proxy_headers=True,
        )
    except (ValueError, OSError) as exc:
        # A name that does not resolve, an address not on this machine, a port in use or not allowed.
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"cannot listen on {host}:{port}: {reason}") from None
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
