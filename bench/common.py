"""What every section shares: the sizes of a run, the figures it records, client processes that
start together, CPU accounting, and small database helpers.

The product keeps its SQL in pgqw/db/. The benchmark also reads statistics views and builds its
own bare comparison tables (bench/raw.py); that SQL lives here and in bench/, never in the product.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import psycopg

ROOT = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------------------- sizes


@dataclass(frozen=True)
class Sizes:
    """How big one run is. FULL is what docs/benchmarks.md reports; QUICK is a smoke run."""

    name: str
    reps: int                      # repetitions of every figure (median, min, max)
    procs: tuple[int, ...]         # client / worker process counts for the throughput curves
    raw_single_jobs: int           # jobs drained per repetition, one per claim
    raw_batch_jobs: int            # jobs drained per repetition, 100 per claim
    batch: int                     # jobs per claim / per insert in the batch variants
    enqueue_single_jobs: int
    enqueue_batch_jobs: int
    http_requests: int
    http_clients: int
    drain_jobs: int                # the 20,000 no-op jobs (pgqw worker drains)
    fn_single_jobs: int            # jobs per functions-loop drain, 1 per claim (a profile aid, kept short)
    worker_concurrency: int        # WORKER_CONCURRENCY of each worker process in the drain
    latency_seconds: float         # how long each latency repetition enqueues at the steady rate
    latency_rate: float            # jobs per second (the 50)
    poll_interval_ms: int
    depth_small: int               # ready jobs, small backlog (the 10k)
    depth_large: int               # ready jobs, deep backlog (the 1M)
    depth_finished: int            # finished jobs in the table during the depth runs (the 1M)
    depth_claims: int              # jobs claimed and completed per depth repetition
    bloat_jobs: int
    empty_drained: int             # jobs drained before the empty-queue probes (the 100k)
    empty_probes: int              # empty claims timed per repetition
    timeout_s: float = 600.0       # any one measurement that takes longer than this is a failure
    peers: bool = True             # run procrastinate and pgqueuer beside ours (bench/peers.py)
    idle_windows: bool = True      # count an idle pool's claims (about 25 s a window: see bench/sections.py)


FULL = Sizes(
    name="full", reps=3, procs=(1, 2, 4),
    raw_single_jobs=8_000, raw_batch_jobs=100_000, batch=100,
    enqueue_single_jobs=8_000, enqueue_batch_jobs=100_000,
    http_requests=4_000, http_clients=8,
    drain_jobs=20_000, fn_single_jobs=8_000, worker_concurrency=100,
    latency_seconds=10.0, latency_rate=50.0, poll_interval_ms=1000,
    depth_small=10_000, depth_large=1_000_000, depth_finished=1_000_000, depth_claims=4_000,
    bloat_jobs=10_000, empty_drained=100_000, empty_probes=200,
)

QUICK = Sizes(
    name="quick", reps=1, procs=(1, 4),
    raw_single_jobs=1_500, raw_batch_jobs=20_000, batch=100,
    enqueue_single_jobs=1_500, enqueue_batch_jobs=20_000,
    http_requests=600, http_clients=4,
    drain_jobs=3_000, fn_single_jobs=1_500, worker_concurrency=100,
    latency_seconds=4.0, latency_rate=50.0, poll_interval_ms=1000,
    depth_small=2_000, depth_large=50_000, depth_finished=50_000, depth_claims=800,
    bloat_jobs=2_000, empty_drained=10_000, empty_probes=50,
)

# For tests/bench: a few hundred jobs, one repetition of everything, well-formed output only.
TINY = Sizes(
    name="tiny", reps=1, procs=(1, 2),
    raw_single_jobs=200, raw_batch_jobs=1_000, batch=50,
    enqueue_single_jobs=200, enqueue_batch_jobs=1_000,
    http_requests=60, http_clients=2,
    drain_jobs=300, fn_single_jobs=200, worker_concurrency=4,
    latency_seconds=1.0, latency_rate=50.0, poll_interval_ms=200,
    depth_small=200, depth_large=2_000, depth_finished=1_000, depth_claims=100,
    bloat_jobs=300, empty_drained=1_000, empty_probes=10,
    timeout_s=120.0,
    peers=False,  # the CI smoke run has no time for the peers (they still run with --only peers)
    # Nor for the idle pool's windows, which wait out PostgreSQL's idle statistics timer twice each
    # (tests/worker counts an idle worker's claims the same way, on one worker).
    idle_windows=False,
)

PROFILES = {s.name: s for s in (FULL, QUICK, TINY)}


# ----------------------------------------------------------------------------- results


@dataclass
class Row:
    """One figure: its repetitions, and the raw figure of the same run it is compared with."""

    key: str
    section: str
    label: str
    unit: str
    values: list[float]
    baseline: str | None = None     # key of the row this one is a ratio to
    better: str = "higher"          # "higher" or "lower"
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    @property
    def min(self) -> float:
        return min(self.values) if self.values else float("nan")

    @property
    def max(self) -> float:
        return max(self.values) if self.values else float("nan")


@dataclass
class Results:
    rows: dict[str, Row] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)      # machine, server, settings
    profiles: dict[str, Any] = field(default_factory=dict)   # CPU, commits, calls per job
    errors: list[str] = field(default_factory=list)
    log_lines: list[str] = field(default_factory=list)

    def add(self, key: str, section: str, label: str, unit: str, value: float, **kw: Any) -> Row:
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = Row(key=key, section=section, label=label, unit=unit, values=[], **kw)
        row.values.append(float(value))
        return row

    def ratio(self, key: str, to: str | None = None) -> float | None:
        row = self.rows.get(key)
        base_key = to or (row.baseline if row else None)
        base = self.rows.get(base_key) if base_key else None
        if row is None or base is None or not row.values or not base.values or base.median == 0:
            return None
        return row.median / base.median

    @classmethod
    def from_json(cls, text: str) -> Results:
        data = json.loads(text)
        found = cls(facts=data.get("facts", {}), profiles=data.get("profiles", {}), errors=data.get("errors", []))
        fields = ("key", "section", "label", "unit", "values", "baseline", "better", "note")
        for row in data.get("rows", []):
            found.rows[row["key"]] = Row(**{k: row[k] for k in fields if k in row})
        return found

    def to_json(self) -> str:
        return json.dumps({
            "facts": self.facts,
            "rows": [asdict(r) | {"median": r.median, "min": r.min, "max": r.max, "ratio": self.ratio(r.key)}
                     for r in self.rows.values()],
            "profiles": self.profiles,
            "errors": self.errors,
        }, indent=1, default=str)


@dataclass
class Context:
    """What a section gets: where the scratch database is, how big to go, where to record."""

    dsn: str                # the scratch database, migrated
    admin_dsn: str          # the server's maintenance database (to create and drop scratch ones)
    sizes: Sizes
    results: Results
    work_dir: Path          # temporary files of this run (worker logs)
    verbose: bool = True

    def log(self, text: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {text}"
        self.results.log_lines.append(line)
        if self.verbose:
            print(line, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- client processes


@dataclass
class ClientResult:
    count: int
    start: float        # time.perf_counter() (CLOCK_MONOTONIC, the same in every process)
    end: float
    cpu_s: float        # user + system CPU of the client process while it worked
    extra: Any = None


def _client_main(prepare: Callable[..., Callable[[], Any]], args: tuple, barrier: Any, out: Any) -> None:
    try:
        work = prepare(*args)
        barrier.wait(timeout=120)
        t0, c0 = time.perf_counter(), os.times()
        got = work()
        t1, c1 = time.perf_counter(), os.times()
        count, extra = (got if isinstance(got, tuple) else (got, None))
        out.put(asdict(ClientResult(count=int(count), start=t0, end=t1,
                                    cpu_s=(c1.user - c0.user) + (c1.system - c0.system), extra=extra)))
    except BaseException:  # report, never hang the parent
        try:
            barrier.abort()
        except Exception:
            pass
        out.put({"error": traceback.format_exc()})


def run_clients(
    prepare: Callable[..., Callable[[], Any]], args_per_client: list[tuple], *, timeout_s: float
) -> list[ClientResult]:
    """Starts one process per args tuple. Each calls prepare(*args) (connect, prepare statements),
    waits until all are ready, then runs the returned work() and reports what it counted.
    Raises RuntimeError with a client's traceback if one failed."""
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    barrier = ctx.Barrier(len(args_per_client))
    procs = [ctx.Process(target=_client_main, args=(prepare, a, barrier, out), daemon=True)
             for a in args_per_client]
    for p in procs:
        p.start()
    found: list[dict] = []
    deadline = time.monotonic() + timeout_s
    try:
        for _ in procs:
            found.append(out.get(timeout=max(1.0, deadline - time.monotonic())))
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
    errors = [f["error"] for f in found if "error" in f]
    if errors:
        raise RuntimeError("a benchmark client failed:\n" + errors[0])
    return [ClientResult(**f) for f in found]


def throughput(found: Iterable[ClientResult]) -> tuple[float, int, float]:
    """(items per second, items, seconds) from the first start to the last end."""
    found = list(found)
    total = sum(r.count for r in found)
    elapsed = max(r.end for r in found) - min(r.start for r in found)
    return (total / elapsed if elapsed > 0 else float("nan")), total, elapsed


def split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


# ----------------------------------------------------------------------------- CPU accounting


def _proc_ticks(pid: int, *, children: bool = False) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0
    # After the ")": state is fields[0]; utime, stime, cutime, cstime are stat fields 14-17.
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks


def _is_postgres(pid: int) -> bool:
    try:
        return "postgres" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except (OSError, IndexError):
        return False


def proc_cpu_s(pid: int) -> float:
    return _proc_ticks(pid) / CLK_TCK


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


class ServerCpu:
    """CPU used by the whole PostgreSQL server between two readings: every live process under the
    postmaster plus what the postmaster collected from backends that exited (cutime/cstime).
    It counts every database of the server, so other users of a shared server show up too."""

    def __init__(self, conn: psycopg.Connection) -> None:
        row = conn.execute("select pg_backend_pid()").fetchone()
        backend = int(row[0]) if row else 0
        # A server on another machine has pids that mean nothing here: check they are postgres's.
        self.postmaster = _ppid(backend) if _is_postgres(backend) else None
        self.ok = self.postmaster is not None and _is_postgres(self.postmaster)

    def ticks(self) -> int:
        if not self.ok or self.postmaster is None:
            return 0
        total = _proc_ticks(self.postmaster, children=True)
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and _ppid(int(entry.name)) == self.postmaster:
                total += _proc_ticks(int(entry.name))
        return total

    def seconds(self) -> float:
        return self.ticks() / CLK_TCK


def machine_cpu() -> tuple[float, float]:
    """(busy seconds, total seconds) of all CPUs since boot, from /proc/stat."""
    try:
        parts = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return 0.0, 0.0
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
    total = sum(parts[:8])
    return (total - idle) / CLK_TCK, total / CLK_TCK


class CpuWindow:
    """Reads machine and server CPU at start() and stop(); client CPU is added by the caller."""

    def __init__(self, server: ServerCpu | None) -> None:
        self.server = server

    def start(self) -> CpuWindow:
        self.t0 = time.perf_counter()
        self.m0 = machine_cpu()
        self.s0 = self.server.seconds() if self.server and self.server.ok else None
        return self

    def stop(self) -> dict[str, float]:
        t1 = time.perf_counter()
        m1 = machine_cpu()
        s1 = self.server.seconds() if self.server and self.server.ok else None
        wall = t1 - self.t0
        got = {
            "wall_s": wall,
            "machine_busy_s": m1[0] - self.m0[0],
            "machine_capacity_s": m1[1] - self.m0[1],
        }
        if s1 is not None and self.s0 is not None:
            got["server_cpu_s"] = s1 - self.s0
        return got


# ----------------------------------------------------------------------------- database helpers


def new_database(admin: psycopg.Connection, name: str) -> None:
    """A new empty database whose own default search_path starts with the queue's schema: the benchmark's
    SQL (its raw baselines and checks) names the queue's tables plainly. pgqw itself names every object
    with the schema and does not rely on it."""
    from psycopg import sql

    from pgqw import schema

    admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    admin.execute(sql.SQL("alter database {} set search_path = {}, public").format(
        sql.Identifier(name), sql.Identifier(schema.name())))


def connect(dsn: str, **kwargs: Any) -> psycopg.Connection:
    return psycopg.connect(dsn, **{"autocommit": True, "application_name": "pgqw-bench", **kwargs})


def reset_queue(conn: psycopg.Connection) -> None:
    """Empties the queue's tables (a new file each: no dead tuples carried between measurements)."""
    conn.execute("truncate jobs cascade")  # with everything that refers to them (attempts, results, ...)


def table_stats(conn: psycopg.Connection, tables: Iterable[str]) -> dict[str, dict[str, float]]:
    """Cumulative counters and sizes of some tables. Backends flush their counters when they
    exit or go idle, so read this after the processes that did the work have disconnected."""
    conn.execute("select pg_stat_clear_snapshot()")
    found: dict[str, dict[str, float]] = {}
    for name in tables:
        row = conn.execute(
            "select s.n_tup_ins, s.n_tup_upd, s.n_tup_hot_upd, s.n_tup_del, s.n_live_tup, s.n_dead_tup,"
            " pg_relation_size(s.relid), pg_indexes_size(s.relid)"
            "  from pg_stat_user_tables s where s.relname = %s",
            [name],
        ).fetchone()
        if row is None:
            continue
        keys = ("ins", "upd", "hot_upd", "del", "live", "dead", "heap_bytes", "index_bytes")
        found[name] = {k: float(v or 0) for k, v in zip(keys, row)}
    return found


def stats_delta(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {t: {k: after[t][k] - before.get(t, {}).get(k, 0.0) for k in after[t]} for t in after}


def wait_for_stats(conn: psycopg.Connection, table: str, field_name: str, at_least: float,
                   timeout_s: float = 15.0) -> None:
    """Waits until the cumulative counters show the work (backends flush about once a second)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if table_stats(conn, [table]).get(table, {}).get(field_name, 0.0) >= at_least:
            return
        time.sleep(0.2)


def database_commits(conn: psycopg.Connection) -> float:
    conn.execute("select pg_stat_clear_snapshot()")
    row = conn.execute(
        "select xact_commit + xact_rollback from pg_stat_database where datname = current_database()"
    ).fetchone()
    return float(row[0]) if row else 0.0


def function_calls(conn: psycopg.Connection) -> dict[str, dict[str, float]]:
    """Calls and total time per stored function (track_functions is set on the scratch database)."""
    conn.execute("select pg_stat_clear_snapshot()")
    return {
        name: {"calls": float(calls), "total_ms": float(total), "self_ms": float(self_ms)}
        for name, calls, total, self_ms in conn.execute(
            "select funcname, calls, total_time, self_time from pg_stat_user_functions"
        )
    }


def calls_delta(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    out = {}
    for name, v in after.items():
        b = before.get(name, {"calls": 0.0, "total_ms": 0.0, "self_ms": 0.0})
        d = {k: v[k] - b[k] for k in v}
        if d["calls"] > 0:
            out[name] = d
    return out


def percentile(values: list[float], p: float) -> float:
    """The p-th percentile (0-100), linear between closest ranks.

    The one percentile of the benchmark and the lab: tests/lab imports it from here, never the other
    way round. The benchmark is the measuring layer (figures, CPU, statistics); the lab's break-it
    checks sit on top of it, and bench/ stays free of the lab's servers and scenarios."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)
