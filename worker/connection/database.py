"""The worker's connections, and the rule for a failed call: a connection error is retried.

Every call is one statement in autocommit mode on a pooled connection, but the recorder's one
transaction of successes and the claim after them (no session state either way, so
PgBouncer in transaction mode works: PGQW_PGBOUNCER=1, with LISTEN on a direct connection given as
WORKER_LISTEN_URL, or WORKER_LISTEN=0). `call` retries a transient error (lost
connection, server restarting, too many connections, pool timeout, serialization failure, deadlock)
with a capped backoff, logging each as `db error`; it never ends the process and never costs a job an
attempt. Any other error is the caller's at once.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any, Callable, TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from pgqw import db
from pgqw.config import ConfigError, Settings
from pgqw.connect import connect_kwargs as shared_connect_kwargs
from pgqw.worker.log import Log, first_line
from pgqw.worker.service import Backoff, WorkerExiting, retry

T = TypeVar("T")

POOL_TIMEOUT_S = 5.0            # wait for a pooled connection before logging and retrying
POOL_RECONNECT_S = 0.2          # a failed connect of the pool is tried once more after this, then a fresh one

Run = Callable[[Callable[[psycopg.Connection], T]], T]  # runs fn(conn) and returns its result


def is_transient(exc: BaseException) -> bool:
    """A database error worth retrying on another connection: connection lost, server shutting
    down or starting, too many connections, pool timeout, serialization failure or deadlock. Not a
    statement over one of the server's limits (class 54, program_limit_exceeded, such as a result too
    big for jsonb), which psycopg counts as an OperationalError too: it fails the same way every time."""
    state = getattr(exc, "sqlstate", None) or ""
    if state.startswith("54"):
        return False
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return True
    return state.startswith(("08", "53", "57P")) or state in ("40001", "40P01")


def connect_kwargs(conninfo: str, worker_id: str, role: str, *, listen: bool,
                   settings: Settings | None = None, pgbouncer: bool | None = None) -> dict[str, Any]:
    """psycopg.connect arguments for one of the worker's connections (role: "pool" or "listen"):
    pgqw/connect.py's shared keywords, autocommit, and the session's idle-in-transaction timeout.

    Keepalives do not cover a connection with data in flight: a statement sent into a network
    partition waits for TCP's backed-off retransmissions (about 25 s, 51 s, 102 s… after it was sent;
    tests/acceptance/test_partition.py measured a 24.6 s stall after a 30 s cut). TCP_USER_TIMEOUT_MS
    gives up on unacknowledged data sooner, and DB_CONNECT_TIMEOUT_S on a connect: the call fails, is
    logged as a db error and is retried on a new connection. A value in DATABASE_URL wins.

    pgbouncer (default: PGQW_PGBOUNCER, or WORKER_LISTEN=0, which has always meant "pooler-safe"):
    no server-side prepared statements, no startup options."""
    settings = settings or Settings()
    if pgbouncer is None:
        pgbouncer = settings.pgbouncer or not listen
    kwargs = shared_connect_kwargs(
        conninfo, settings, application_name=f"pgqw-worker {worker_id} {role}", pgbouncer=pgbouncer,
        # A session that stops between its work and its commit (a paused VM, a partition) would keep
        # its rows locked, and sweep_stuck skips locked rows: the server ends such a session.
        session={"idle_in_transaction_session_timeout": settings.worker_idle_in_transaction_timeout_ms or None})
    kwargs["autocommit"] = True
    return kwargs


def route_pool_log(log: Log) -> None:
    """psycopg_pool warns once per discarded connection; our own `db error` lines already say what
    happened, so only its errors are shown, in our format."""

    class ToWorkerLog(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            log("db pool", record.getMessage())

    pool_logger = logging.getLogger("psycopg.pool")
    pool_logger.setLevel(logging.ERROR)
    pool_logger.propagate = False
    pool_logger.handlers[:] = [ToWorkerLog()]


class Database:
    """The pool, opened by open() and closed by close(), and the two ways to use it."""

    def __init__(
        self, conninfo: str, settings: Settings, log: Log, exiting: threading.Event, *,
        wait: Callable[[float], bool] | None = None, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.conninfo = conninfo
        self.settings = settings
        self.log = log
        self.exiting = exiting
        self.wait = wait or exiting.wait  # sleeps between retries; True: the process is exiting
        self.clock = clock
        self.pool: ConnectionPool | None = None

    @property
    def listen_conninfo(self) -> str:
        """Where the LISTEN connection goes: WORKER_LISTEN_URL, else DATABASE_URL."""
        return self.settings.listen_url or self.conninfo

    def connect(self, role: str) -> psycopg.Connection:
        """A connection of its own, outside the pool: the listener's (role "listen", to
        listen_conninfo, a direct connection even behind PgBouncer), or one to the pool's URL."""
        if role == "listen" and self.settings.listen:
            url = self.listen_conninfo
            # A WORKER_LISTEN_URL of its own reaches the server directly: session options are fine.
            pgbouncer = None if self.settings.listen_url is None else False
        else:
            url, pgbouncer = self.conninfo, None
        return psycopg.connect(url, **connect_kwargs(
            url, self.settings.worker_id, role, listen=self.settings.listen, settings=self.settings,
            pgbouncer=pgbouncer))

    def open(self) -> psycopg.Connection | None:
        """Connects once directly (so an unreachable database fails with its own message), then opens
        the pool. Returns that first connection, LISTENing, when WORKER_LISTEN is on (the listener's),
        else None. Raises psycopg errors: startup problems are the caller's to report, and ConfigError
        for LISTEN through PgBouncer (it would never hear a notification)."""
        if self.settings.listen and self.settings.pgbouncer and not self.settings.listen_url:
            raise ConfigError(
                "PGQW_PGBOUNCER=1 with WORKER_LISTEN on: set WORKER_LISTEN_URL to a direct connection to "
                "the server (LISTEN does not work through PgBouncer in transaction mode), or WORKER_LISTEN=0")
        probe = self.connect("listen")
        try:
            if self.settings.listen:
                db.listen(probe)
            else:
                probe.close()
            cap = self.settings.concurrency
            pool = ConnectionPool(
                self.conninfo,
                min_size=min(2, cap + 2),
                max_size=cap + 4,   # one per executor, plus main loop, heartbeat, recorder and scheduler
                open=False,
                kwargs=connect_kwargs(self.conninfo, self.settings.worker_id, "pool", listen=self.settings.listen,
                                      settings=self.settings),
                timeout=POOL_TIMEOUT_S,
                # A connection found broken is replaced at once; if the server refuses (down, starting
                # up), psycopg_pool would try again after 1 s, 2 s, 4 s…, and every call would wait for
                # that, past a short lease. Its reconnect gives up after POOL_RECONNECT_S instead, and
                # _reconnect_failed starts a fresh one at once while a call waits: a connection comes
                # within POOL_RECONNECT_S of the server accepting again.
                reconnect_timeout=POOL_RECONNECT_S,
                reconnect_failed=self._reconnect_failed,
                name=f"pgqw-worker-{self.settings.worker_id}",
            )
            pool.open(wait=True, timeout=15)
            self.pool = pool
        except BaseException:
            probe.close()
            raise
        return probe if self.settings.listen else None

    def _reconnect_failed(self, pool: ConnectionPool) -> None:
        """psycopg_pool gave up a reconnect (called on its worker thread). While a call waits for a
        connection, a fresh attempt starts now (check() grows the pool when it can); with none waiting
        the pool stays as it is, and the next call's request starts one at once."""
        if self.exiting.is_set():
            return
        try:
            if pool.get_stats().get("requests_waiting", 0) > 0:
                pool.check()
        except Exception:  # noqa: BLE001 - closed meanwhile: nobody to serve
            pass

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close(timeout=2.0)

    # The service protocol's names (service.py): the pool is the first part started, the last stopped.
    start = open
    stop = close

    def once(self, fn: Callable[[psycopg.Connection], T]) -> T:
        """fn on a pooled connection, one try: errors are raised (the caller has its own backoff)."""
        if self.pool is None:
            raise WorkerExiting()
        with self.pool.connection(timeout=POOL_TIMEOUT_S) as conn:
            return fn(conn)

    def connection(self) -> contextlib.AbstractContextManager[psycopg.Connection]:
        """A pooled connection for a block of its user's (a handler's ctx.transaction), given back after it."""
        if self.pool is None:
            raise WorkerExiting()
        return self.pool.connection(timeout=POOL_TIMEOUT_S)

    def call(self, op: str, fn: Callable[[psycopg.Connection], T], *, deadline: float | None = None) -> T:
        """fn on a pooled connection, retried after a transient error (logged as `db error <op>`)
        until it returns, the deadline (a clock() time) passes (the last error is raised) or the
        process exits (WorkerExiting). Any other error is raised at once. The retry rule is the
        worker's one (service.retry), each call with a backoff of its own from its first failure."""
        if self.exiting.is_set():
            raise WorkerExiting()
        try:
            return self.once(fn)  # nearly every call: one try, nothing else made
        except Exception as exc:  # noqa: BLE001 - the retry rule decides
            first = exc
        return retry(_Call(self, op, deadline), self.wait, self._try, fn, after=first)

    def _try(self, fn: Callable[[psycopg.Connection], T]) -> T:
        if self.exiting.is_set():
            raise WorkerExiting()
        return self.once(fn)

    def retry_after(self, op: str, deadline: float | None, exc: Exception, delay: float) -> float:
        """A try of call(op) raised exc: retried after delay when the error is transient and the
        deadline allows it (logged as `db error`, the pool checked first), else raised."""
        if not is_transient(exc):
            raise exc
        if self.exiting.is_set():
            raise WorkerExiting() from exc
        self.check_pool()
        if deadline is not None and self.clock() + delay > deadline:
            raise exc
        self.db_error(op, exc, delay)
        return delay

    def check_pool(self) -> None:
        """After a connection error, test every idle pooled connection and replace the broken ones,
        so the retry gets a live connection (a killed backend or a restarted server breaks them all at
        once). Cheaper than a check on every checkout, which costs a round trip per call and makes
        psycopg_pool sleep 1 s or more after a failed check."""
        if self.pool is not None and not self.exiting.is_set():
            try:
                self.pool.check()
            except Exception:
                pass

    def db_error(self, op: str, exc: BaseException, delay: float) -> None:
        self.log("db error", f"{op}: {first_line(exc)}; reconnecting in {delay:.1f}s", op=op, error=first_line(exc))


class _Call(Backoff):
    """One call's retries (Database.call): its backoff (itself: one object per call), and what a
    failure costs, the database's rule."""

    __slots__ = ("database", "op", "deadline")

    def __init__(self, database: Database, op: str, deadline: float | None) -> None:
        super().__init__()
        self.database, self.op, self.deadline = database, op, deadline

    @property
    def backoff(self) -> Backoff:
        return self

    def failed(self, exc: Exception, delay: float) -> float:
        return self.database.retry_after(self.op, self.deadline, exc, delay)
