"""`pgqw soak`: a chaos soak that must lose nothing.

It enqueues N listing_flyer jobs (1 % of them with an invalid listing, so the dead path is taken
too), runs K real worker processes (`python -m pgqw.cli worker`, short simulated latency, 20 %
transient failures, a short lease so recovery is quick) and, at random points of the run's
progress, injects faults:

  kill       SIGKILL of a random worker; it is started again, under a new id, after a pause
  terminate  pg_terminate_backend of a random connection of a worker (found by application_name)
  restart    a full restart of the PostgreSQL server (stop fast or immediate, down for a pause, start),
             only when the soak owns the server: the one it starts itself (tests.lab.cluster) when
             neither --database-url nor DATABASE_URL is given. A server it does not own is never
             restarted. Workers are not touched after a restart: they must come back by themselves.

When every job is succeeded or dead (or --timeout passed, which is a failure) the workers are
stopped with SIGTERM and the database is checked (tests.lab.queries.soak_checks): every job succeeded or dead, none
processing, one flyer per succeeded job and none on any other job, no job run to success twice, no
two attempts of one job overlapping in time, every attempt finished, and jobs.attempts equal to the
job's attempt rows. The figures are printed as a table with the fault counts; the exit code is 1
when any check is off. The fault schedule is drawn from --seed; timing, and so which job meets which
fault, is the machine's.

`--check-only` runs the same database checks against an existing database (--database-url).
"""
from __future__ import annotations

import argparse
import random
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Sequence

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgqw import config, db, launch
from pgqw.argtypes import whole
from pgqw.demo.listing import EXAMPLE_LISTING
from pgqw.errors import UsageError
from pgqw.tasks import register_modules
from tests.lab import ROOT, new_database, queries

INVALID_LISTING = {**EXAMPLE_LISTING, "currency": "XYZ"}  # a permanent error: dead at its first attempt
ENQUEUE_BATCH = 500
POLL_S = 0.2
# Each fault fires when the fraction of jobs finished passes a point drawn at random from its range.
# Restarts come no later than 60 %, leaving time to see every worker reconnect while work remains.
FAULT_RANGES = {"kill": (0.05, 0.85), "terminate": (0.05, 0.85), "restart": (0.1, 0.6)}
KILL_PAUSE_S = (0.5, 2.0)                 # a killed worker is started again after a pause in this range
RECONNECT_LIMIT_S = 30.0                  # after a server restart, every live worker must be back within this
STARTUP_S = 0.5                           # no server restart until every worker logged its start this long ago
START_LIMIT_S = 30.0                      # a started worker must log its start line within this
STOP_LIMIT_S = 20.0                       # a worker must exit after SIGTERM within this
RESTART_MODES = ("immediate", "fast")     # restart i stops the server with mode i % 2: a crash, then a clean stop
APP_SOAK = "pgqw-soak"
FAULT_CHECKS = (("kill", "SIGKILLs of workers"), ("terminate", "backend terminations"),
                ("restart", "server restarts"))


class SoakError(RuntimeError):
    """The soak could not set itself up (the server, the database); the message says why."""


# ------------------------------------------------------------------------------------------ checks

@dataclass
class Check:
    figure: str
    value: str
    expected: str
    ok: bool
    detail: str = ""


def _ids(ids: Sequence[Any], total: int) -> str:
    if not ids:
        return ""
    shown = ", ".join(str(i) for i in ids)
    return f"{shown}{f' (and {total - len(ids)} more)' if total > len(ids) else ''}"


def check_database(conn: psycopg.Connection, *, expected_jobs: int | None = None) -> list[Check]:
    """The final checks of a soak, against the queue in conn's database. Read-only."""
    r = queries.soak_checks(conn)
    final = r["succeeded"] + r["dead"]
    checks = []
    if expected_jobs is not None:
        checks.append(Check("jobs", str(r["jobs"]), str(expected_jobs), r["jobs"] == expected_jobs))
    checks += [
        Check("jobs succeeded or dead", f"{final} ({r['succeeded']} + {r['dead']})", str(r["jobs"]),
              final == r["jobs"], _ids(r["not_final_ids"], r["jobs"] - final)),
        Check("jobs processing", str(r["processing"]), "0", r["processing"] == 0),
        Check("jobs pending or failed", str(r["waiting"]), "0", r["waiting"] == 0),
        Check("flyers", str(r["flyers"]), f"{r['succeeded']} (= succeeded jobs)", r["flyers"] == r["succeeded"]),
        Check("flyers of jobs not succeeded", str(r["flyers_not_succeeded"]), "0", r["flyers_not_succeeded"] == 0,
              _ids(r["flyers_not_succeeded_ids"], r["flyers_not_succeeded"])),
        Check("succeeded jobs without a flyer", str(r["succeeded_no_flyer"]), "0", r["succeeded_no_flyer"] == 0,
              _ids(r["succeeded_no_flyer_ids"], r["succeeded_no_flyer"])),
        Check("jobs run to success twice", str(r["succeeded_twice"]), "0", r["succeeded_twice"] == 0,
              _ids(r["succeeded_twice_ids"], r["succeeded_twice"])),
        Check("succeeded attempts", str(r["succeeded_attempts"]), f"{r['succeeded']} (= succeeded jobs)",
              r["succeeded_attempts"] == r["succeeded"]),
        Check("jobs with overlapping attempts", str(r["overlapping"]), "0", r["overlapping"] == 0,
              _ids(r["overlapping_ids"], r["overlapping"])),
        Check("attempts not finished", str(r["unfinished_attempts"]), "0", r["unfinished_attempts"] == 0,
              _ids(r["unfinished_ids"], r["unfinished_attempts"])),
        Check("attempt rows", str(r["attempt_rows"]), f"{r['attempts_counted']} (= sum of jobs.attempts)",
              r["attempt_rows"] == r["attempts_counted"]),
        Check("jobs whose attempts <> attempt rows", str(r["attempts_mismatch"]), "0", r["attempts_mismatch"] == 0,
              _ids(r["attempts_mismatch_ids"], r["attempts_mismatch"])),
    ]
    return checks


def format_checks(checks: Sequence[Check]) -> str:
    rows = [(c.figure, c.value, c.expected, "OK" if c.ok else "FAIL") for c in checks]
    head = ("check", "value", "expected", "")
    widths = [max(len(head[i]), *(len(r[i]) for r in rows)) for i in range(4)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip()]
    for check, row in zip(checks, rows):
        lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
        if check.detail and not check.ok:
            lines.append(f"    -> {check.detail}")
    return "\n".join(lines)


def format_rows(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(v) for v in row] for row in rows]
    widths = [max(len(head[i]), *(len(r[i]) for r in cells)) for i in range(len(head))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ output

class Out:
    """Prints each line at once and keeps it for --evidence."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stdout
        self.lines: list[str] = []

    def __call__(self, text: str = "") -> None:
        for line in text.split("\n"):
            self.lines.append(line)
        self.stream.write(text + "\n")
        self.stream.flush()

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


# ------------------------------------------------------------------------------------------ workers

@dataclass
class WorkerSlot:
    """One of the K workers. After a kill it is started again under a new id (w2-1 → w2-2), so the
    sweep's messages and the attempt rows say which incarnation held a job."""

    index: int
    incarnation: int = 0
    proc: launch.Child | None = None
    log_path: Path | None = None
    started_at: float = 0.0
    restart_at: float | None = None     # killed: start again at this time.monotonic()
    seen_started: float | None = None   # when the soak first saw its start line

    @property
    def worker_id(self) -> str:
        return f"w{self.index}-{self.incarnation}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def has_started(self) -> bool:
        """It logged its start line (so it reached the database); notes when that was first seen."""
        if self.seen_started is None and self.proc is not None and launch.WORKER_READY in self.proc.output():
            self.seen_started = time.monotonic()
        return self.seen_started is not None


@dataclass
class Faults:
    asked: dict[str, int]
    done: dict[str, int] = field(default_factory=lambda: {"kill": 0, "terminate": 0, "restart": 0})
    restart_back_s: list[float] = field(default_factory=list)     # per restart: until every live worker was back
    restart_not_back: list[str] = field(default_factory=list)     # per restart that failed: who was missing
    restart_down_s: list[float] = field(default_factory=list)     # per restart: stop to accepting connections
    unasked_exits: list[str] = field(default_factory=list)        # "w1-1 exit 1"
    stop_codes: dict[str, int | None] = field(default_factory=dict)


LOG_EVENTS = {
    "ignored late result": "late results ignored (QL409: the attempt had lost the job)",
    "lost": "running jobs found lost by a heartbeat",
    "swept": "jobs swept back by a worker (lease expired)",
    "db error": "database errors logged and retried",
    "listen": "LISTEN connections re-opened",
}


def count_log_events(paths: Sequence[Path]) -> dict[str, int]:
    counts = {k: 0 for k in LOG_EVENTS}
    counts["already"] = 0   # results recorded by an earlier try whose reply was lost
    pattern = re.compile(r"^\S+Z \[[^\]]+\] (ignored late result|lost|swept|db error|listen)\b")
    for path in paths:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            m = pattern.match(line)
            if m:
                counts[m.group(1)] += 1
            if "] success " in line and "recorded by an earlier try whose reply was lost" in line:
                counts["already"] += 1
    return counts


# ------------------------------------------------------------------------------------------ the soak

def _code_version() -> str:
    """The commit the soak ran, and whether the working tree differed from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                 capture_output=True, text=True, timeout=10).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    if not head:
        return "unknown (not a git checkout)"
    return f"commit {head}" + (f", with {len(changed)} file(s) changed in the working tree" if changed else "")


def _redacted(url: str) -> str:
    try:
        parts = conninfo_to_dict(url)
    except psycopg.Error:
        return "?"
    return f"{parts.get('host') or 'socket'}:{parts.get('port') or 5432}/{parts.get('dbname', '')}"


class Soak:
    def __init__(self, args: argparse.Namespace, out: Out) -> None:
        self.args = args
        self.out = out
        self.seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1_000_000)
        self.rng = random.Random(self.seed)
        self.t0 = time.monotonic()
        self.cluster: Any = None          # tests.lab.cluster.OwnedCluster when the soak owns the server
        self.server_url = ""              # a superuser DSN of the server (maintenance database)
        self.url = ""                     # the soak's own database
        self.dbname = f"pgqw_soak_{datetime.now(timezone.utc):%Y%m%d_%H%M%S}_{uuid.uuid4().hex[:6]}"
        self.run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix="pgqw-soak-")).resolve()
        self.log_dir = self.run_dir / "workers"
        self.slots: list[WorkerSlot] = []
        self.logs: list[Path] = []
        self.faults = Faults(asked={"kill": args.kills, "terminate": args.terminations, "restart": 0})
        self.schedule: list[tuple[float, str]] = []
        self.watch: tuple[float, set[str]] | None = None   # after a restart: (since, workers not back yet)
        self.total = args.jobs
        self.invalid_ids: list[uuid.UUID] = []  # the jobs enqueued with an invalid listing
        self.finished = 0
        self.timed_out = False
        self.run_s = 0.0
        self.keep: bool | None = None     # keep the database afterwards (a check failed, or --keep)
        self.server_version = "?"

    # -- output ------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def event(self, text: str) -> None:
        pct = 100.0 * self.finished / self.total if self.total else 0.0
        self.out(f"{self.elapsed():7.1f}s {pct:4.0f}%  {text}")

    # -- server and database -------------------------------------------------------------------

    def open_server(self) -> None:
        given = self.args.database_url or config.read("database_url")
        if given:
            if self.args.restarts:
                raise UsageError("--restarts needs a server the soak owns: leave out --database-url and "
                                 "DATABASE_URL and the soak starts one of its own")
            self.server_url = given
            return
        from tests.lab.cluster import ClusterError, OwnedCluster

        self.faults.asked["restart"] = 2 if self.args.restarts is None else self.args.restarts
        try:
            # Its own folder under the temporary directory, not in the run folder: the server runs as
            # another user under root, who must be able to reach it, and a run folder may sit under
            # a private one (pytest's basetemp is put back to 0700 by every pytest that starts).
            self.cluster = OwnedCluster()
            self.cluster.start()
        except ClusterError as exc:
            raise SoakError(f"cannot start a PostgreSQL server of its own: {exc}") from exc
        self.server_url = self.cluster.url()

    def connect(self, url: str | None = None, **kwargs: Any) -> psycopg.Connection:
        return psycopg.connect(url or self.url, autocommit=True, application_name=APP_SOAK,
                               connect_timeout=5, **kwargs)

    def create_database(self) -> None:
        from pgqw.migrate import migrate

        with self.connect(self.server_url) as conn:
            new_database(conn, self.dbname)
            version = conn.info.server_version
        self.url = make_conninfo(self.server_url, dbname=self.dbname)
        migrate(self.url)
        with psycopg.connect(self.url) as conn:  # the demo's task types, as `pgqw migrate` registers them
            register_modules(conn, ("pgqw.demo",))
        self.server_version = f"{version // 10000}.{version % 10000}"

    def drop_database(self) -> None:
        try:
            with self.connect(self.server_url) as conn:
                conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(self.dbname)))
        except psycopg.Error as exc:
            self.out(f"could not drop database {self.dbname}: {exc}")

    def enqueue(self) -> int:
        """Enqueues the jobs; notes which ones carry an invalid listing (self.invalid_ids)."""
        invalid = set(self.rng.sample(range(self.total), round(self.total * self.args.invalid_rate)))
        with self.connect() as conn:
            for start in range(0, self.total, ENQUEUE_BATCH):
                numbers = range(start, min(self.total, start + ENQUEUE_BATCH))
                batch = [{"type": "listing_flyer", "idempotency_key": f"soak-{i}",
                          "payload": INVALID_LISTING if i in invalid else EXAMPLE_LISTING,
                          "max_attempts": self.args.max_attempts}
                         for i in numbers]
                made = db.enqueue_jobs(conn, jobs=batch)  # in input order
                self.invalid_ids += [job.id for i, job in zip(numbers, made) if i in invalid]
        return len(invalid)

    # -- workers -------------------------------------------------------------------------------

    def worker_env(self) -> dict[str, str]:
        a = self.args
        return {
            "SIM_MIN_LATENCY_MS": str(a.latency_ms[0]),
            "SIM_MAX_LATENCY_MS": str(a.latency_ms[1]),
            "SIM_FAILURE_RATE": str(a.failure_rate),
            "STUCK_JOB_TIMEOUT_MS": str(a.lease_ms),
            "SWEEP_INTERVAL_MS": "500",
            "POLL_INTERVAL_MS": "500",
            "RETRY_BASE_DELAY_MS": "100",
            "RETRY_MAX_JITTER_MS": "100",
            "SHUTDOWN_GRACE_MS": "5000",
        }

    def start_worker(self, slot: WorkerSlot) -> None:
        slot.incarnation += 1
        slot.restart_at = None
        slot.log_path = self.log_dir / f"{slot.worker_id}.log"
        self.logs.append(slot.log_path)
        # In a session of its own (pgqw.launch): a Ctrl+C of the soak reaches the soak only; it stops them.
        slot.proc = launch.start_worker(slot.worker_id, concurrency=self.args.concurrency, env=self.worker_env(),
                                        database_url=self.url, log=slot.log_path, cwd=ROOT)
        slot.started_at = time.monotonic()
        slot.seen_started = None

    def stop_workers(self) -> None:
        """SIGTERM to every live worker (a graceful stop), then their exit codes."""
        live = [s for s in self.slots if s.alive()]
        launch.stop_all([s.proc for s in live if s.proc is not None], timeout=STOP_LIMIT_S)
        for s in live:
            assert s.proc is not None
            self.faults.stop_codes[s.worker_id] = None if s.proc.killed else s.proc.returncode

    def kill_all(self) -> None:
        launch.stop_all([s.proc for s in self.slots if s.proc is not None and s.alive()], sig=signal.SIGKILL)

    # -- faults --------------------------------------------------------------------------------

    def plan(self) -> None:
        for kind in ("kill", "terminate", "restart"):
            for _ in range(self.faults.asked[kind]):
                self.schedule.append((self.rng.uniform(*FAULT_RANGES[kind]), kind))
        self.schedule.sort()

    def fire(self, kind: str) -> bool:
        """Injects one fault; False when it cannot happen now (tried again on the next tick)."""
        if kind == "kill":
            return self.kill_one()
        if kind == "terminate":
            return self.terminate_one()
        return self.restart_server()

    def kill_one(self) -> bool:
        live = [s for s in self.slots if s.alive()]
        if not live:
            return False
        slot = self.rng.choice(live)
        assert slot.proc is not None
        pid = slot.proc.pid
        slot.proc.stop(signal.SIGKILL)
        pause = self.rng.uniform(*KILL_PAUSE_S)
        slot.restart_at = time.monotonic() + pause
        self.faults.done["kill"] += 1
        self.event(f"SIGKILL {slot.worker_id} (pid {pid}); it starts again as w{slot.index}-{slot.incarnation + 1} "
                   f"in {pause:.1f}s")
        return True

    def terminate_one(self) -> bool:
        # Which connections the workers hold: pg_stat_activity is the server's, not the queue's.
        try:
            with self.connect() as conn:
                backends = conn.execute(
                    "select pid, application_name from pg_stat_activity"
                    " where datname = current_database() and application_name like 'pgqw-worker %%'"
                    " and pid <> pg_backend_pid() order by application_name, pid").fetchall()
                if not backends:
                    return False
                pid, name = self.rng.choice(backends)
                row = conn.execute("select pg_terminate_backend(%s)", [pid]).fetchone()
        except psycopg.OperationalError:
            return False
        if not (row and row[0]):
            return False
        self.faults.done["terminate"] += 1
        self.event(f"pg_terminate_backend({pid}): {name}")
        return True

    def restart_server(self) -> bool:
        # A worker still starting would fail its startup against a stopped server (by design it
        # reports an unreachable database at start, and its first sweep, and exits), so restart only
        # once every worker has logged its start line and had a moment for that first sweep.
        if any(s.alive() and (not s.has_started() or time.monotonic() - (s.seen_started or 0) < STARTUP_S)
               for s in self.slots):
            return False
        mode = RESTART_MODES[self.faults.done["restart"] % len(RESTART_MODES)]
        live = {s.worker_id for s in self.slots if s.alive()}
        self.event(f"server restart: stop -m {mode}, down {self.args.down_s:g}s, start")
        began = time.monotonic()
        from tests.lab.cluster import ClusterError

        try:
            self.cluster.restart(down_s=self.args.down_s, mode=mode)
        except ClusterError as exc:
            raise SoakError(f"the server did not come back after a restart: {exc}") from exc
        up_s = time.monotonic() - began
        self.faults.done["restart"] += 1
        self.faults.restart_down_s.append(up_s)
        self.event(f"server accepting connections again after {up_s:.1f}s; waiting for {len(live)} worker(s) "
                   "to reconnect by themselves")
        self.watch = (time.monotonic(), live)
        return True

    def check_watch(self) -> None:
        """After a restart: every worker alive then must have a connection again, by itself."""
        if self.watch is None:
            return
        since, waiting = self.watch
        waiting = {w for w in waiting if any(s.worker_id == w and s.alive() for s in self.slots)}
        try:
            with self.connect() as conn:
                names = [r[0] for r in conn.execute(
                    "select application_name from pg_stat_activity where datname = current_database()"
                    " and application_name like 'pgqw-worker %%'").fetchall()]
        except psycopg.OperationalError:
            names = []
        back = {w for w in waiting if any(n.startswith(f"pgqw-worker {w} ") for n in names)}
        waiting -= back
        took = time.monotonic() - since
        if not waiting:
            self.faults.restart_back_s.append(took)
            self.event(f"every worker reconnected {took:.1f}s after the server came back")
            self.watch = None
        elif took > RECONNECT_LIMIT_S:
            self.faults.restart_not_back.append(", ".join(sorted(waiting)))
            self.event(f"NOT BACK after {took:.0f}s: {', '.join(sorted(waiting))}")
            self.watch = None
        else:
            self.watch = (since, waiting)

    # -- the run -------------------------------------------------------------------------------

    def progress(self) -> dict[str, int] | None:
        try:
            with self.connect() as conn:
                return db.count_by_status(conn)
        except psycopg.OperationalError:
            return None  # the server is restarting

    def loop(self) -> None:
        deadline = self.t0 + self.args.timeout
        next_report = 0.1
        while True:
            now = time.monotonic()
            counts = self.progress()
            if counts is not None:
                self.finished = counts["succeeded"] + counts["dead"]
                if self.finished >= self.total:
                    break
            if now > deadline:
                self.timed_out = True
                self.event(f"TIMEOUT after {self.args.timeout:g}s: {counts}")
                break
            fraction = self.finished / self.total
            if fraction >= next_report:
                self.event(f"{self.finished} of {self.total} jobs finished")
                next_report += 0.1
            for slot in self.slots:
                if slot.restart_at is not None:
                    if now >= slot.restart_at:
                        self.start_worker(slot)
                        self.event(f"started {slot.worker_id} again")
                elif not slot.alive():
                    code = slot.proc.returncode if slot.proc else None
                    self.faults.unasked_exits.append(f"{slot.worker_id} exit {code}")
                    self.event(f"UNASKED EXIT: {slot.worker_id} exited with {code} (log {slot.log_path}); "
                               "starting it again")
                    self.start_worker(slot)
                elif not slot.has_started() and now - slot.started_at > START_LIMIT_S:
                    self.faults.unasked_exits.append(f"{slot.worker_id} did not start")
                    self.event(f"{slot.worker_id} logged no start line in {START_LIMIT_S:g}s; killing it")
                    assert slot.proc is not None
                    slot.proc.stop(signal.SIGKILL)
                    slot.restart_at = now
            self.check_watch()
            while self.schedule and self.schedule[0][0] <= fraction:
                if self.watch is not None and self.schedule[0][1] == "restart":
                    break  # one restart at a time: the last one's reconnects are still being watched
                if not self.fire(self.schedule[0][1]):
                    break
                self.schedule.pop(0)
            time.sleep(POLL_S)
        self.run_s = self.elapsed()
        if not self.timed_out:
            self.event(f"all {self.total} jobs succeeded or dead")
        if self.watch is not None:
            # The jobs finished before every worker was seen back: look once more, then judge.
            limit = self.watch[0] + RECONNECT_LIMIT_S
            while self.watch is not None and time.monotonic() < limit + 1:
                self.check_watch()
                time.sleep(POLL_S)

    def run(self) -> int:
        a = self.args
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.open_server()
        self.create_database()
        owned = self.cluster is not None
        self.out(f"# pgqw soak, {datetime.now(timezone.utc):%Y-%m-%d %H:%M}Z, seed {self.seed}")
        self.out(f"# command: {a.invocation}")
        self.out(f"# code: {_code_version()}")
        self.out(f"# server: PostgreSQL {self.server_version}, "
                 + (f"owned by this soak (tests.lab.cluster on port {self.cluster.port}, data in {self.cluster.data}), "
                    "so it may restart it" if owned else f"{_redacted(self.server_url)}, NOT owned by this soak: "
                    "it is never restarted"))
        self.out(f"# database {self.dbname}; worker logs in {self.log_dir}/")
        self.out(f"# {a.jobs} listing_flyer jobs ({a.invalid_rate:.0%} with an invalid listing), max attempts "
                 f"{a.max_attempts}; {a.workers} workers x concurrency {a.concurrency}; simulated latency "
                 f"{a.latency_ms[0]}-{a.latency_ms[1]} ms, failure rate {a.failure_rate:g}, lease {a.lease_ms} ms, "
                 "sweep 500 ms, retry base 100 ms + jitter 100 ms")
        self.out(f"# faults asked: {self.faults.asked['kill']} SIGKILLs, {self.faults.asked['terminate']} backend "
                 f"terminations, {self.faults.asked['restart']} server restarts"
                 + ("" if owned else " (not owned)")
                 + ", each when the jobs finished pass a random point ("
                 + ", ".join(f"{k} {lo:.0%}-{hi:.0%}" for k, (lo, hi) in FAULT_RANGES.items()) + ")")
        self.t0 = time.monotonic()
        invalid = self.enqueue()
        self.event(f"enqueued {a.jobs} jobs ({invalid} with an invalid listing)")
        self.plan()
        for i in range(1, a.workers + 1):
            slot = WorkerSlot(index=i)
            self.slots.append(slot)
            self.start_worker(slot)
        self.event(f"started {a.workers} workers")
        try:
            self.loop()
        finally:
            self.stop_workers()
        self.event("workers stopped (SIGTERM)")
        return self.report()

    def report(self) -> int:
        f = self.faults
        with self.connect() as conn:
            checks = check_database(conn, expected_jobs=self.total)
            outcomes = queries.soak_outcomes(conn, invalid_ids=self.invalid_ids)
        owned = self.cluster is not None
        checks.append(Check("run finished within --timeout", f"{self.run_s:.1f}s", f"<= {self.args.timeout:g}s",
                            not self.timed_out))
        for kind, label in FAULT_CHECKS:
            if f.asked[kind]:
                checks.append(Check(label, str(f.done[kind]), f">= {f.asked[kind]} asked",
                                    f.done[kind] >= f.asked[kind]))
        if owned and f.asked["restart"]:
            back = f"{len(f.restart_back_s)} of {f.done['restart']}"
            if f.restart_back_s:
                back += f" (slowest {max(f.restart_back_s):.1f}s)"
            checks.append(Check("restarts after which every worker came back", back,
                                f"all, each within {RECONNECT_LIMIT_S:g}s",
                                len(f.restart_back_s) == f.done["restart"] and not f.restart_not_back,
                                "; ".join(f.restart_not_back)))
        checks.append(Check("workers that exited unasked", str(len(f.unasked_exits)), "0", not f.unasked_exits,
                            "; ".join(f.unasked_exits)))
        bad_stops = {w: c for w, c in f.stop_codes.items() if c != 0}
        checks.append(Check("workers not exiting 0 on the final SIGTERM", str(len(bad_stops)), "0", not bad_stops,
                            "; ".join(f"{w}: {c}" for w, c in bad_stops.items())))
        events = count_log_events(self.logs)
        ok = all(c.ok for c in checks)

        self.out("")
        self.out(format_checks(checks))
        self.out("")
        restarts = (str(f.done["restart"]) if owned
                    else "0: the server is not owned by this soak, so it is never restarted")
        self.out(format_rows(("fault", "asked", "done"), [
            ("SIGKILL of a worker (started again after a pause)", f.asked["kill"], f.done["kill"]),
            ("pg_terminate_backend of a worker connection", f.asked["terminate"], f.done["terminate"]),
            ("server restart (workers left to reconnect by themselves)", f.asked["restart"] if owned else "-",
             restarts),
        ]))
        self.out("")
        worker_ids = [p.stem for p in self.logs]
        self.out(format_rows(("what happened", "count"), [
            ("jobs succeeded", outcomes["jobs_succeeded"]),
            ("jobs dead", f"{outcomes['jobs_dead']} ({outcomes['dead_invalid']} of them invalid listings)"),
            ("jobs tried more than once", outcomes["retried_jobs"]),
            ("most attempts of one job", outcomes["most_attempts"]),
            ("attempts succeeded", outcomes["succeeded"]),
            ("attempts failed", outcomes["failed"]),
            ("attempts abandoned: lease expired (swept)", outcomes["lease_expired"]),
            ("attempts abandoned: handed back", outcomes["handed_back"]),
            ("worker processes run", f"{len(worker_ids)} ({', '.join(worker_ids)})"),
            *((LOG_EVENTS[k], events[k]) for k in LOG_EVENTS),
            ("successes recorded by a try whose reply was lost", events["already"]),
            *([("server restarts: stop to accepting connections again",
                ", ".join(f"{s:.1f}s" for s in f.restart_down_s))] if f.restart_down_s else []),
        ]))
        self.out("")
        self.out(f"result: {'OK' if ok else 'FAIL'}: {self.total} jobs in {self.run_s:.1f}s with "
                 f"{f.done['kill']} SIGKILLs, {f.done['terminate']} backend terminations and "
                 f"{f.done['restart']} server restarts; reproduce the fault plan with --seed {self.seed}")
        self.keep = not ok
        return 0 if ok else 1

    def close(self) -> None:
        self.kill_all()
        keep = self.args.keep or self.keep is not False
        if self.cluster is not None:
            if keep:
                try:
                    self.cluster.stop()
                except Exception:  # noqa: BLE001 - reported below
                    pass
                self.out(f"# kept: the server's data in {self.cluster.data} (stopped), database {self.dbname}")
            else:
                self.cluster.cleanup()
        elif self.url:
            if keep:
                self.out(f"# kept: database {self.dbname} on {_redacted(self.server_url)}")
            else:
                self.drop_database()


# ------------------------------------------------------------------------------------------ CLI

def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {value:g}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value:g}")
    return value


def _range_ms(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", text)
    if not m or int(m.group(1)) > int(m.group(2)):
        raise argparse.ArgumentTypeError(f"must be MIN-MAX in milliseconds, MIN <= MAX, got {text!r}")
    return int(m.group(1)), int(m.group(2))


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Registers `pgqw soak` on pgqw.cli's subparsers."""
    p = subparsers.add_parser(
        "soak", help="chaos soak: N jobs, K workers, kills, killed connections, server restarts; then checks",
        description="Run N jobs through K worker processes while killing workers (SIGKILL), terminating their "
        "database connections and restarting the PostgreSQL server (only one the soak starts itself: without "
        "--database-url and DATABASE_URL). Then check from the database that nothing was lost or run twice, "
        "print the checks as a table and exit 1 if any is off.")
    p.add_argument("--jobs", type=whole(1), default=2000, help="jobs to run (default 2000)")
    p.add_argument("--workers", type=whole(1), default=3, help="worker processes (default 3)")
    p.add_argument("--concurrency", type=whole(1), default=5, help="jobs at once per worker (default 5)")
    p.add_argument("--kills", type=whole(0), default=10, help="SIGKILLs of a random worker (default 10)")
    p.add_argument("--terminations", type=whole(0), default=20,
                   help="pg_terminate_backend of a random worker connection (default 20)")
    p.add_argument("--restarts", type=whole(0), default=None,
                   help="server restarts (default 2 when the soak owns the server; refused otherwise)")
    p.add_argument("--down-s", type=_seconds, default=1.0, help="seconds the server stays down (default 1)")
    p.add_argument("--seed", type=int, default=None, help="seed of the fault plan (default: random, printed)")
    p.add_argument("--timeout", type=_seconds, default=900.0,
                   help="seconds before the run counts as failed (default 900)")
    p.add_argument("--failure-rate", type=_fraction, default=0.2, help="SIM_FAILURE_RATE (default 0.2)")
    p.add_argument("--latency-ms", type=_range_ms, default=(50, 150), metavar="MIN-MAX",
                   help="simulated work time per job (default 50-150)")
    p.add_argument("--invalid-rate", type=_fraction, default=0.01,
                   help="fraction of jobs with an invalid listing, dead at once (default 0.01)")
    p.add_argument("--max-attempts", type=whole(1), default=5, help="max attempts per job (default 5)")
    p.add_argument("--lease-ms", type=whole(1), default=5000,
                   help="STUCK_JOB_TIMEOUT_MS of the workers (default 5000)")
    p.add_argument("--database-url", help="a superuser DSN of a server to create the soak's database on "
                   "(default DATABASE_URL, else a server of the soak's own); with --check-only, the database to check")
    p.add_argument("--run-dir", help="folder for the worker logs (default: a new temporary one)")
    p.add_argument("--evidence", metavar="PATH", help="also write the whole output to PATH")
    p.add_argument("--keep", action="store_true", help="keep the database (and the server's data) afterwards; "
                   "by default they are kept only when a check failed")
    p.add_argument("--check-only", action="store_true",
                   help="only run the checks against an existing queue database (--database-url or DATABASE_URL)")
    p.set_defaults(func=run)
    return p


def _invocation() -> str:
    argv = sys.argv
    if "soak" in argv:
        return "pgqw soak " + shlex.join(argv[argv.index("soak") + 1:])
    return "pgqw soak " + shlex.join(argv[1:])


def run(args: argparse.Namespace) -> int:
    """`pgqw soak`: the exit code (0 when every check holds)."""
    if not getattr(args, "invocation", None):
        args.invocation = _invocation().rstrip()
    out = Out()
    if args.check_only:
        return check_only(args, out)
    soak = Soak(args, out)
    try:
        code = soak.run()
    except SoakError as exc:
        print(f"pgqw soak: {exc}", file=sys.stderr)
        code = 1
        soak.keep = True
    finally:
        soak.close()
    if args.evidence:
        Path(args.evidence).write_text(out.text())
        print(f"# written to {args.evidence}")
    return code


def check_only(args: argparse.Namespace, out: Out) -> int:
    url = args.database_url or config.read("database_url")
    if not url:
        raise UsageError("--check-only needs the database to check: --database-url or DATABASE_URL")
    with psycopg.connect(url, autocommit=True, application_name=APP_SOAK, connect_timeout=10) as conn:
        checks = check_database(conn)
    out(f"# pgqw soak --check-only: {_redacted(url)}")
    out(format_checks(checks))
    ok = all(c.ok for c in checks)
    out(f"result: {'OK' if ok else 'FAIL'}")
    if args.evidence:
        Path(args.evidence).write_text(out.text())
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """`./run soak …` (python -m tests.lab.soak) from a checkout."""
    from pgqw.cli import Parser

    parser = Parser(prog="./run")
    add_parser(parser.add_subparsers(parser_class=Parser))
    args = parser.parse_args(["soak", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    from pgqw.cli import run_repository_command

    sys.exit(run_repository_command("./run soak", main))
