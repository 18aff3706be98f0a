"""The connection keywords every pgqw process uses (the API's pool and the worker's), in one place,
and the watchdog that gives up on a server that stopped answering.

    kwargs = connect_kwargs(url, settings, application_name="pgqw-api",
                            session={"statement_timeout": 5000})
    psycopg.connect(url, **kwargs)

What a peer can stall, and what ends the wait:
  * a connect to a host that drops packets, or a server that accepts but never answers the startup:
    connect_timeout (DB_CONNECT_TIMEOUT_S);
  * data sent into a partition (no RST): tcp_user_timeout (TCP_USER_TIMEOUT_MS) drops the connection
    once sent data stays unacknowledged that long; keepalives notice an idle dead peer (~25 s);
  * a slow statement on a live server: statement_timeout, given as a session setting (the server
    cancels it: SQLSTATE 57014);
  * a server that is alive on the network but does not run (frozen: SIGSTOP, a paused VM): the
    kernel acknowledges every byte, so none of the above fires, and the server cannot cancel anything.
    Only the client can give up: Watchdog cuts the connection of a borrower that waited too long.

A value in the URL wins over these defaults. Behind PgBouncer in transaction mode (PGQW_PGBOUNCER=1)
there are no server-side prepared statements and no `options` startup parameter (PgBouncer refuses
it): the session settings then come from the login role (db/security/settings.sql, applied by
`pgqw migrate`) or from PgBouncer's own settings.
"""
from __future__ import annotations

import math
import os
import socket
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

import psycopg
from psycopg.conninfo import conninfo_to_dict

from pgqw.config import Settings

# Notice a silently dead idle peer within about 10 + 3 × 5 = 25 s (ignored on Unix sockets).
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3}


def session_options(session: Mapping[str, int | str | None]) -> str:
    """The libpq `options` value that sets these server settings for the session (None: left out).
    An integer is in milliseconds, as PostgreSQL reads a bare number for the timeouts."""
    return " ".join(f"-c {name}={value}" for name, value in session.items() if value is not None)


def connect_kwargs(conninfo: str, settings: Settings, *, application_name: str,
                   session: Mapping[str, int | str | None] | None = None,
                   pgbouncer: bool | None = None) -> dict[str, Any]:
    """psycopg.connect / ConnectionPool(kwargs=…) arguments for one of pgqw's connections.

    session: server settings for the connection (statement_timeout, idle_in_transaction_session_timeout…),
    sent as the `options` startup parameter; pgbouncer (default: settings.pgbouncer) drops them and
    turns off server-side prepared statements. Any keyword already in conninfo is left to it; an
    `options` in conninfo comes after ours, so its settings win."""
    pgbouncer = settings.pgbouncer if pgbouncer is None else pgbouncer
    given = conninfo_to_dict(conninfo)
    kwargs: dict[str, Any] = {"application_name": application_name[:63]}
    for key, value in KEEPALIVES.items():
        if key not in given:
            kwargs[key] = value
    if "tcp_user_timeout" not in given and settings.tcp_user_timeout_ms:
        kwargs["tcp_user_timeout"] = settings.tcp_user_timeout_ms
    if "connect_timeout" not in given and settings.db_connect_timeout_s:
        kwargs["connect_timeout"] = settings.db_connect_timeout_s
    if pgbouncer:
        # Transaction mode hands each transaction any server connection: a statement prepared on one
        # is missing on the next ("prepared statement _pg3_0 does not exist").
        kwargs["prepare_threshold"] = None
    else:
        options = " ".join(o for o in (session_options(session or {}), str(given.get("options") or "")) if o)
        if options:
            kwargs["options"] = options
    return kwargs


class Watchdog:
    """Cuts a connection that has been borrowed for longer than its deadline: the socket is shut
    down, so the statement waiting on it fails at once with a psycopg.OperationalError (a broken
    connection, which a pool then discards), even when the server is frozen and the kernel keeps
    acknowledging. One daemon thread per watchdog, started on first use."""

    def __init__(self, name: str = "pgqw-watchdog") -> None:
        self.name = name
        self._cond = threading.Condition()
        self._armed: dict[object, tuple[float, psycopg.Connection]] = {}
        self._thread: threading.Thread | None = None
        # When the thread's wait ends (inf: nothing armed); a new deadline before it wakes the thread.
        self._waking_at = math.inf
        self.cuts = 0  # connections cut so far

    @contextmanager
    def guard(self, conn: psycopg.Connection, seconds: float | None) -> Iterator[None]:
        """Within this block, conn is cut once `seconds` have passed (None or 0: never). A psycopg
        error raised after a cut is replaced by one that says the database did not answer in time."""
        if not seconds or seconds <= 0:
            yield
            return
        token = object()
        with self._cond:
            at = time.monotonic() + seconds
            self._armed[token] = (at, conn)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            if at < self._waking_at:  # with one deadline for all, only the first borrow while none is armed
                self._cond.notify()
        cut = False
        try:
            yield
        except psycopg.Error as exc:
            with self._cond:
                cut = self._armed.pop(token, None) is None
            if cut:
                raise psycopg.OperationalError(
                    f"the database did not answer within {seconds:g}s; the connection was closed"
                ) from exc
            raise
        finally:
            if not cut:
                with self._cond:
                    self._armed.pop(token, None)

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                due = [(t, c) for t, (at, c) in self._armed.items() if at <= now]
                for token, conn in due:
                    # Under the lock: the borrower cannot give the connection back meanwhile.
                    del self._armed[token]
                    self._cut(conn)
                nxt = min((at for at, _ in self._armed.values()), default=None)
                self._waking_at = math.inf if nxt is None else nxt
                self._cond.wait(None if nxt is None else max(0.0, nxt - time.monotonic()))
                self._waking_at = -math.inf  # awake: it looks at every armed borrow before it waits again

    def _cut(self, conn: psycopg.Connection) -> None:
        try:
            fd = conn.fileno()
        except Exception:  # noqa: BLE001 - closed meanwhile: nothing to cut
            return
        try:
            with socket.socket(fileno=os.dup(fd)) as sock:
                sock.shutdown(socket.SHUT_RDWR)
            self.cuts += 1
        except OSError:
            pass
