"""What one job costs the server for each step a job takes: for finding where the time goes in the
SQL, and for before/after comparisons of a change to the schema or the functions.

    python -m bench.sql_cost                          # this checkout's SQL, backend CPU, 3 rounds
    python -m bench.sql_cost --variant base --variant no_checks --rounds 5
    python -m bench.sql_cost --meter callgrind --dsn postgresql://postgres@127.0.0.1:5499/postgres \\
        --callgrind-dir /tmp/cg --jobs 300

One connection at a time, in a scratch database migrated from this checkout (dropped at the end).
Steps, each over --jobs jobs, one transaction per call:

  enqueue_job     one call per job
  enqueue_jobs    calls of 100
  claim+mark 1    claim_job, then mark_succeeded
  claim+mark 10   claim_jobs(10), then mark_jobs_succeeded of the 10 (a worker at concurrency 10)
  claim+mark 100  claim_jobs(100), then mark_jobs_succeeded of the 100
  raw ...         the raw ceiling's table and statements (bench/raw.py): insert, claim + complete

Two meters:

- cpu: the CPU the backend process used (/proc/<pid>/stat; the server must run on this machine)
  divided by the jobs. synchronous_commit = off keeps the wait for the disk out (the commit's own CPU
  stays in). This machine is shared: a round's figure moves by ±15 %, so compare medians of rounds.
- callgrind: instructions the backend executed, from a server run under valgrind's callgrind, which
  writes each backend's count to <callgrind-dir>/cg.<pid> when it exits. Repeatable to a fraction of a
  percent, whatever else the machine does, so a change of a few percent shows. Each step runs on two
  fresh connections, one with --warmup calls and one with --warmup calls and then the jobs; the
  difference, divided by the jobs, is what the jobs cost. Start such a server (as its owner) with

      initdb -D /tmp/cg/data -A trust -U postgres
      valgrind --tool=callgrind --vgdb=no --trace-children=yes --callgrind-out-file=/tmp/cg/cg.%p \\
          postgres -D /tmp/cg/data -p 5499 -c autovacuum=off

A variant is SQL run after the migration (a statement, or a name from VARIANTS); rounds alternate
between the variants, so a drift of the machine spreads over all of them.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

from bench.common import new_database
from pgqw import db
from pgqw.migrate import migrate

from . import raw
from .common import CLK_TCK

LOCAL = "postgresql://postgres@127.0.0.1:5432/postgres"


def _drop_checks(table: str) -> str:
    """SQL that drops every CHECK constraint of table (an experiment: what they cost)."""
    return f"""
        do $$ declare c record; begin
          for c in select conname from pg_constraint where conrelid = '{table}'::regclass and contype = 'c' loop
            execute format('alter table {table} drop constraint %I', c.conname);
          end loop;
        end $$"""


# Named experiments: SQL run after the migration. Not part of the product: each takes away something
# the product needs, to see what it costs.
VARIANTS: dict[str, str] = {
    "base": "",
    "no_checks": _drop_checks("jobs"),
    "no_attempt_checks": _drop_checks("job_attempts"),
    "no_secondary_indexes": """
        drop index jobs_status_created_idx; drop index if exists jobs_created_idx; drop index jobs_finished_idx;
        drop index jobs_queue_status_idx""",
    "no_domain_rules": """
        do $$ declare c record; begin
          for c in select t.typname, n.conname from pg_constraint n join pg_type t on t.oid = n.contypid
                    where t.typname in ('job_type', 'job_queue', 'job_status', 'job_payload', 'job_idempotency_key',
                                        'job_worker_id', 'job_max_attempts', 'attempt_number', 'attempt_outcome') loop
            execute format('alter domain %I drop constraint %I', c.typname, c.conname);
          end loop;
        end $$""",
    "no_attempts_fkey": "alter table job_attempts drop constraint job_attempts_job_id_fkey",
}


def _noops(prefix: str, start: int, stop: int) -> list[dict]:
    return [{"type": "noop", "payload": {}, "idempotency_key": f"{prefix}-{i}"} for i in range(start, stop)]


def _backlog(conn: psycopg.Connection, n: int) -> None:
    """n ready noop jobs, analyzed as autovacuum would leave them."""
    for start in range(0, n, 5000):
        db.enqueue_jobs(conn, jobs=_noops(uuid.uuid4().hex[:8], start, min(n, start + 5000)))
    conn.execute("analyze jobs")


@dataclass(frozen=True)
class Step:
    name: str
    per_call: int                                          # jobs per call of `call`
    prepare: Callable[[psycopg.Connection, int], None]     # (admin connection, calls to be made)
    call: Callable[[psycopg.Connection], None]


def _enqueue_one(conn: psycopg.Connection) -> None:
    db.enqueue_job(conn, type="noop", payload={}, idempotency_key=uuid.uuid4().hex)


def _enqueue_many(conn: psycopg.Connection) -> None:
    db.enqueue_jobs(conn, jobs=_noops(uuid.uuid4().hex, 0, 100))


def _claim_mark_one(conn: psycopg.Connection) -> None:
    job = db.claim_job(conn, worker_id="cost")
    assert job is not None, "the backlog ran out"
    db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token)


def _claim_mark(n: int) -> Callable[[psycopg.Connection], None]:
    def call(conn: psycopg.Connection) -> None:
        claimed = db.claim_jobs(conn, worker_id="cost", limit=n)
        assert len(claimed) == n, "the backlog ran out"
        db.mark_jobs_succeeded(conn, done=[(j.id, j.lease_token) for j in claimed])
    return call


def _raw_insert_one(conn: psycopg.Connection) -> None:
    conn.execute(raw.INSERT_ONE, [Jsonb({})])


def _raw_insert_many(conn: psycopg.Connection) -> None:
    conn.execute(raw.INSERT_MANY, [[Jsonb({}) for _ in range(100)]])


def _raw_claim_one(conn: psycopg.Connection) -> None:
    (job_id,) = conn.execute(raw.CLAIM_ONE).fetchone()
    conn.execute(raw.COMPLETE_ONE, [job_id])


def _raw_claim_many(conn: psycopg.Connection) -> None:
    ids = [r[0] for r in conn.execute(raw.CLAIM_MANY, [100]).fetchall()]
    assert len(ids) == 100, "the backlog ran out"
    conn.execute(raw.COMPLETE_MANY, [ids])


def _nothing(conn: psycopg.Connection, calls: int) -> None:
    pass


def _raw_backlog(conn: psycopg.Connection, calls: int) -> None:
    raw.reset(conn)
    raw.load(conn, calls)


STEPS = [
    Step("enqueue_job", 1, _nothing, _enqueue_one),
    Step("enqueue_jobs", 100, _nothing, _enqueue_many),
    Step("claim+mark 1", 1, lambda c, calls: _backlog(c, calls), _claim_mark_one),
    Step("claim+mark 10", 10, lambda c, calls: _backlog(c, calls * 10), _claim_mark(10)),
    Step("claim+mark 100", 100, lambda c, calls: _backlog(c, calls * 100), _claim_mark(100)),
    Step("raw insert 1", 1, _nothing, _raw_insert_one),
    Step("raw insert 100", 100, _nothing, _raw_insert_many),
    Step("raw claim+complete 1", 1, _raw_backlog, _raw_claim_one),
    Step("raw claim+complete 100", 100, lambda c, calls: _raw_backlog(c, calls * 100), _raw_claim_many),
]


class Meter:
    """Counts what a backend costs; `count(work)` runs work(conn) on a fresh connection."""

    def __init__(self, url: str) -> None:
        self.url = url

    def _connect(self) -> psycopg.Connection:
        conn = psycopg.connect(self.url, autocommit=True)
        conn.execute("set synchronous_commit = off")
        return conn


class CpuMeter(Meter):
    unit = "µs of backend CPU"

    def per_job(self, step: Step, calls: int, warmup: int) -> float:
        with self._connect() as conn:
            pid = conn.execute("select pg_backend_pid()").fetchone()[0]
            for _ in range(warmup):
                step.call(conn)
            cpu0 = _backend_cpu_s(pid)
            for _ in range(calls):
                step.call(conn)
            return (_backend_cpu_s(pid) - cpu0) * 1e6 / (calls * step.per_call)


class CallgrindMeter(Meter):
    unit = "thousand instructions"

    def __init__(self, url: str, folder: Path) -> None:
        super().__init__(url)
        self.folder = folder

    def _run(self, step: Step, calls: int) -> int:
        conn = self._connect()
        pid = conn.execute("select pg_backend_pid()").fetchone()[0]
        # A file of that name is an earlier backend's that had the same pid: this one writes its own at exit.
        (self.folder / f"cg.{pid}").unlink(missing_ok=True)
        for _ in range(calls):
            step.call(conn)
        conn.close()
        return _callgrind_total(self.folder / f"cg.{pid}")

    def per_job(self, step: Step, calls: int, warmup: int) -> float:
        base = self._run(step, warmup)
        total = self._run(step, warmup + calls)
        return (total - base) / 1000 / (calls * step.per_call)


def _backend_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _callgrind_total(path: Path, timeout_s: float = 60.0) -> int:
    """The instruction count callgrind writes when the backend exits (it exits a moment after close)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            m = re.search(r"^(?:summary|totals):\s+(\d+)", path.read_text(errors="replace"), re.M)
            if m:
                return int(m.group(1))
        time.sleep(0.1)
    raise RuntimeError(f"no callgrind totals in {path}: is the server running under callgrind, writing there?")


def measure(dsn: str, variant_sql: str, calls: int, warmup: int, make_meter: Callable[[str], Meter],
            only: set[str] | None, sql_dir: Path | None = None) -> dict[str, float]:
    """One round of every step on a fresh scratch database: {step: cost per job}."""
    name = f"pgqw_cost_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        new_database(admin, name)
    url = make_conninfo(dsn, dbname=name)
    meter = make_meter(url)
    out: dict[str, float] = {}
    try:
        migrate(url, log=lambda line: None, **({"sql_dir": sql_dir} if sql_dir else {}))
        with psycopg.connect(url, autocommit=True) as conn:
            if variant_sql.strip():
                conn.execute(variant_sql)
            raw.create(conn)
            db.register_task_types(conn, types=[{"name": "noop", "payload_schema": {"type": "object"}}])
            for step in STEPS:
                if only and step.name not in only:
                    continue
                n = calls if step.per_call == 1 else max(1, calls // step.per_call)
                w = warmup if step.per_call == 1 else max(1, warmup * 10 // step.per_call)
                step.prepare(conn, 2 * w + n)
                out[step.name] = meter.per_job(step, n, w)
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sql_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("BENCH_DATABASE_URL", LOCAL))
    parser.add_argument("--meter", choices=("cpu", "callgrind"), default="cpu")
    parser.add_argument("--callgrind-dir", type=Path, default=Path("/tmp/cg"))
    parser.add_argument("--jobs", type=int, default=5000, help="jobs per step and round")
    parser.add_argument("--warmup", type=int, default=20, help="calls before the counted ones")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--step", action="append", default=[], help="only these steps; repeatable")
    parser.add_argument("--variant", action="append", default=[],
                        help=f"a name ({', '.join(VARIANTS)}) or SQL to run after the migration; repeatable")
    parser.add_argument("--sql-dir", action="append", type=Path, default=[],
                        help="compare the SQL of these db/ folders (another revision's: `git archive REV db | tar -x"
                             " -C /tmp/rev`) with this checkout's; repeatable")
    args = parser.parse_args(argv)
    variants = args.variant or ["base"]
    # Each db/ folder is one more "variant": this checkout's SQL, then each folder's, alternating.
    runs = [(v, v, None) for v in variants] + [(f"{d} (base)", "base", d) for d in args.sql_dir]
    if args.meter == "cpu":
        make_meter: Callable[[str], Meter] = CpuMeter
        unit = CpuMeter.unit
    else:
        make_meter = lambda url: CallgrindMeter(url, args.callgrind_dir)  # noqa: E731
        unit = CallgrindMeter.unit
    results: dict[str, list[dict[str, float]]] = {label: [] for label, _, _ in runs}
    for r in range(args.rounds):
        for label, v, folder in runs:
            results[label].append(measure(args.dsn, VARIANTS.get(v, v), args.jobs, args.warmup, make_meter,
                                          set(args.step) or None, folder))
            print(f"round {r + 1}/{args.rounds} {label[:60]!r}: done", flush=True)
    print(f"\n{unit} per job: median of {args.rounds} rounds (min-max), {args.jobs} jobs a step")
    for v in results:
        print(f"\n{v}")
        for label in results[v][0]:
            xs = [rd[label] for rd in results[v]]
            print(f"  {label:26s} {statistics.median(xs):9.1f} ({min(xs):.1f}-{max(xs):.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
