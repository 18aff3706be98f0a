"""What /metrics, queue_stats() and the console's polls cost with a long history.

    .venv/bin/python -m bench.history                         # 10 million attempts, prints the report
    .venv/bin/python -m bench.history --out docs/evidence/stats-at-10m.txt
    .venv/bin/python -m bench.history --attempts 1000 --runs 3 # a smoke run
    .venv/bin/python -m bench.history --keep                  # keep the database (its name is printed)
    .venv/bin/python -m bench.history --reuse pgqw_history_…  # measure a kept one again (after a migrate)

It creates a scratch database pgqw_history_<random> on the server (--dsn, else BENCH_DATABASE_URL,
else the local PostgreSQL on 127.0.0.1:5432, else an embedded one), migrates it, and fills it with
set-based INSERT … SELECT generate_series: about --attempts job_attempts rows over --attempts / 2.52
jobs, nearly all finished (succeeded, some dead and cancelled), the newest few as the waiting backlog
(pending, some scheduled later, failed waiting for a retry, a few processing). Every row goes in
through the tables' constraints, foreign keys and indexes, none dropped. It then runs VACUUM
(ANALYZE), times `select * from queue_stats()` (median and p95 of --runs calls), keeps
EXPLAIN (ANALYZE, BUFFERS) of every statement it runs (auto_explain) and its figures beside exact
counts (where they are estimates), then starts a real `pgqw api` (pgqw.launch, METRICS_CACHE_MS=0 so
every scrape runs the query) and times GET /metrics, /api/stats and /api/queues the same way, over one
kept-alive HTTP connection as a scraper or the page holds, and the console's job list (the first page,
a status's, a search by queue and type) the same way. It also times a worker's claim of 10 ready jobs
and their success (claim_jobs, mark_jobs_succeeded) next to the history, each in a transaction rolled back. The database is dropped at the end unless --keep.
"""
from __future__ import annotations

import argparse
import http.client
import shlex
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from bench.common import new_database
from pgqw import launch
from pgqw.migrate import migrate

from .common import ROOT, connect, percentile
from .run import BenchError, code_facts, machine_facts, server, server_facts

ATTEMPTS_PER_JOB = 2.52  # what the shape below gives: succeeded 1 to 4 attempts, dead 5, cancelled 1
PATHS = ("/metrics", "/api/stats", "/api/queues")
# The console's job list over the history: the first page newest first, a status's, a search.
LIST_PATHS = ("/api/jobs?limit=50", "/api/jobs?status=dead&limit=50", "/api/jobs?status=pending&limit=50",
              "/api/jobs?queue=reports&type=noop&limit=50")
CLAIM_BATCH = 10  # jobs per timed claim_jobs

# One statement per table. Job i (1 … :jobs, oldest first, created over the last 7 days) is, counted
# from the newest: :processing processing, then :failed failed (waiting for a retry, half of them
# ready now), then :pending pending (a tenth scheduled for later); every older job is finished: dead
# when i % 100 = 7 (5 failed attempts), cancelled when i % 200 = 13 (1 attempt, cancelled while it ran),
# else succeeded after 1 + i % 4 attempts (the failed ones before it: every tenth job's first attempt
# abandoned by a worker that stopped, every 97th handed back, the rest failed). Queues default 70 %,
# emails 20 %, reports 10 % (by i / 3, so each queue has jobs of every status); types listing_flyer 80 %, noop 20 %. Ids are in creation order (as
# UUIDv7 would be), which keeps the fill's index inserts sequential.
FILL_JOBS = """
insert into jobs (id, type, payload, status, attempts, max_attempts, last_error, run_at, created_at,
                  started_at, finished_at, locked_by, lease_expires_at, idempotency_key, queue, priority)
select ('00000000-0000-7000-8000-' || lpad(to_hex(g.i), 12, '0'))::uuid,
       case when mod(g.i, 5) = 0 then 'noop' else 'listing_flyer' end,
       jsonb_build_object('n', g.i),
       s.status,
       s.attempts,
       5,
       case when s.status in ('failed', 'dead') then 'simulated failure' end,
       case when s.status = 'failed' and mod(g.i, 2) = 0 then now() + interval '30 seconds'
            when s.status = 'pending' and mod(g.i, 10) = 0 then now() + interval '1 hour'
            else t.created end,
       t.created,
       case when s.attempts > 0 then t.created + (s.attempts - 1) * interval '10 seconds' + interval '1 second' end,
       case when s.status in ('succeeded', 'dead', 'cancelled')
            then t.created + (s.attempts - 1) * interval '10 seconds' + interval '1.2 seconds' end,
       case when s.status = 'processing' then 'w-' || (mod(g.i, 2) + 1) end,
       case when s.status = 'processing' then now() + interval '60 seconds' end,
       'h-' || g.i,
       case when mod(g.i / 3, 10) < 7 then 'default' when mod(g.i / 3, 10) < 9 then 'emails' else 'reports' end,
       0
  from generate_series(1, %(jobs)s::bigint) as g(i)
 cross join lateral (select now() - interval '7 days' * (1 - g.i::double precision / %(jobs)s) as created) t
 cross join lateral (
     select case when g.i > %(jobs)s - %(processing)s then 'processing'
                 when g.i > %(jobs)s - %(processing)s - %(failed)s then 'failed'
                 when g.i > %(jobs)s - %(processing)s - %(failed)s - %(pending)s then 'pending'
                 when mod(g.i, 100) = 7 then 'dead'
                 when mod(g.i, 200) = 13 then 'cancelled'
                 else 'succeeded' end as status) s0
 cross join lateral (
     select s0.status,
            case s0.status when 'processing' then 1 when 'failed' then 1 + mod(g.i, 3) when 'pending' then 0
                           when 'dead' then 5 when 'cancelled' then 1 else 1 + mod(g.i, 4) end as attempts) s
"""

# Every attempt of every job, in job order: attempt n < the job's last failed (or was abandoned);
# the last one ended as the job did (succeeded, failed, cancelled), or is running (processing).
FILL_ATTEMPTS = """
insert into job_attempts (job_id, attempt, worker_id, started_at, finished_at, outcome, error,
                          abandon_reason, lease_token_hash)
select j.id, a.n, 'w-' || (mod(a.n, 2) + 1), o.started,
       case when o.outcome is not null then o.started + interval '200 milliseconds' end,
       o.outcome,
       case o.outcome when 'failed' then 'simulated failure' when 'abandoned' then 'worker stopped'
                      when 'cancelled' then 'cancelled' end,
       case when o.outcome = 'abandoned' then o.reason end,
       case when o.outcome is null then sha256(uuid_send(j.id)) end
  from jobs j
 cross join lateral generate_series(1, j.attempts) as a(n)
 cross join lateral (
     select j.created_at + (a.n - 1) * interval '10 seconds' + interval '1 second' as started,
            case when a.n < j.attempts then
                     case when a.n = 1 and right(j.idempotency_key, 1) = '0' then 'abandoned'
                          when a.n = 1 and mod(substr(j.idempotency_key, 3)::bigint, 97) = 0 then 'abandoned'
                          else 'failed' end
                 else case j.status when 'succeeded' then 'succeeded' when 'processing' then null
                                    when 'cancelled' then 'cancelled' else 'failed' end
            end as outcome,
            case when right(j.idempotency_key, 1) = '0' then 'lease_expired' else 'handed_back' end as reason) o
"""


def shape(attempts: int) -> dict[str, int]:
    jobs = max(10, round(attempts / ATTEMPTS_PER_JOB))
    return {"jobs": jobs, "processing": max(1, min(32, jobs // 10_000)), "failed": max(1, jobs // 2_000),
            "pending": max(2, jobs // 200)}


def fill(conn: psycopg.Connection, attempts: int, log) -> dict[str, float]:
    """Loads the history; the seconds each step took."""
    params = shape(attempts)
    took: dict[str, float] = {}
    conn.execute("set synchronous_commit = off")  # the fill only: nothing measured depends on it
    conn.execute("set maintenance_work_mem = '256MB'")
    for name, statement in (("jobs", FILL_JOBS), ("job_attempts", FILL_ATTEMPTS)):
        t0 = time.perf_counter()
        n = conn.execute(statement, params).rowcount
        took[f"insert {name}"] = time.perf_counter() - t0
        log(f"inserted {n:,} {name} rows in {took[f'insert {name}']:.1f}s")
    # Two live workers (an hour's registration) that take listing_flyer from every queue: the noop
    # jobs of the backlog are the ones no live worker can take.
    for wid in ("w-1", "w-2"):
        conn.execute("select register_worker(%s, array['listing_flyer'], null, 4, 'bench', null, 3600000)", [wid])
    t0 = time.perf_counter()
    # As autovacuum would have by then: statistics, and the visibility map that index-only scans use.
    conn.execute("vacuum (analyze) jobs")
    conn.execute("vacuum (analyze) job_attempts")
    took["vacuum analyze"] = time.perf_counter() - t0
    log(f"vacuum (analyze) in {took['vacuum analyze']:.1f}s")
    return took


def data_shape(conn: psycopg.Connection) -> list[str]:
    lines = []
    total = conn.execute("select count(*) from job_attempts").fetchone()[0]
    jobs = conn.execute("select count(*) from jobs").fetchone()[0]
    lines.append(f"job_attempts {total:,} rows over {jobs:,} jobs")
    rows = conn.execute("select status, count(*) from jobs group by 1 order by 2 desc").fetchall()
    lines.append("jobs by status: " + ", ".join(f"{s} {n:,}" for s, n in rows))
    ready = conn.execute("select count(*) from jobs where status in ('pending', 'failed') and run_at <= now()"
                         " and attempts < max_attempts").fetchone()[0]
    lines.append(f"ready now: {ready:,}")
    rows = conn.execute("select queue, count(*) from jobs group by 1 order by 1").fetchall()
    lines.append("jobs by queue: " + ", ".join(f"{q} {n:,}" for q, n in rows))
    rows = conn.execute("select coalesce(outcome, 'running') || coalesce(' (' || abandon_reason || ')', ''),"
                        " count(*) from job_attempts group by 1 order by 2 desc").fetchall()
    lines.append("attempts by outcome: " + ", ".join(f"{o} {n:,}" for o, n in rows))
    rows = conn.execute(
        "select c.relname, pg_size_pretty(pg_table_size(c.oid)), pg_size_pretty(pg_indexes_size(c.oid))"
        "  from pg_class c where c.relname in ('jobs', 'job_attempts') order by 1").fetchall()
    lines.append("sizes: " + "; ".join(f"{r} table {t}, indexes {i}" for r, t, i in rows))
    return lines


def accuracy(conn: psycopg.Connection) -> list[str]:
    """queue_stats()'s figures beside exact counts: where it gives the planner's estimate, how far off."""
    exact: dict[tuple[str, str | None, str | None], float] = {}
    for q, st, n in conn.execute("select queue, status, count(*) from jobs group by 1, 2"):
        exact[("jobs", q, st)] = n
    for outcome, n in conn.execute("select coalesce(outcome, 'running'), count(*) from job_attempts group by 1"):
        exact[("attempts", None, outcome)] = n
    lines = []
    for s in conn.execute("select metric, queue, label, value from queue_stats()"
                          " where metric in ('jobs', 'attempts', 'stats_estimated')"):
        metric, q, label, value = s
        if metric == "stats_estimated":
            lines.append(f"stats_estimated {label}: {value:g}")
            continue
        true = exact.get((metric, q, label), 0)
        if value != true:
            off = f"{(value - true) / true:+.1%}" if true else "n/a"
            lines.append(f"{metric} {q or ''} {label}: {value:,.0f} (exact {true:,.0f}, {off})".replace("  ", " "))
    return lines or ["every figure exact"]


def summary(name: str, values_ms: list[float], first_ms: float | None = None, extra: str = "") -> str:
    first = f"first {first_ms:8.1f}, " if first_ms is not None else ""
    return (f"{name:<46} {first}median {percentile(values_ms, 50):8.1f} ms, p95 {percentile(values_ms, 95):8.1f} ms, "
            f"max {max(values_ms):8.1f} ms over {len(values_ms)}{extra}")


def time_queue_stats(conn: psycopg.Connection, runs: int) -> tuple[float, list[float], int]:
    times = []
    rows = 0
    for _ in range(runs + 1):
        t0 = time.perf_counter()
        rows = len(conn.execute("select * from queue_stats()").fetchall())
        times.append((time.perf_counter() - t0) * 1000)
    return times[0], times[1:], rows


def time_claims(conn: psycopg.Connection, runs: int) -> tuple[float, list[float]]:
    """claim_jobs of CLAIM_BATCH ready jobs, then mark_jobs_succeeded of them, in a transaction rolled
    back (the backlog stays as it was for the next run): what a worker's claim and success cost next to
    the history, without the commit's wait for the disk."""
    times = []
    for _ in range(runs + 1):
        t0 = time.perf_counter()
        with conn.transaction(force_rollback=True):
            claimed = conn.execute("select (c.job).id, c.lease_token from claim_jobs('history', %s) c",
                                   [CLAIM_BATCH]).fetchall()
            conn.execute("select * from mark_jobs_succeeded(%s::uuid[], %s::uuid[])",
                         [[row[0] for row in claimed], [row[1] for row in claimed]]).fetchall()
        times.append((time.perf_counter() - t0) * 1000)
    return times[0], times[1:]


def explain_queue_stats(conn: psycopg.Connection) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS) of every statement queue_stats() runs, from auto_explain (its
    nested statements, sent to this session as notices): explaining the call itself would show only
    a Function Scan. auto_explain is loaded into this session only (LOAD needs a superuser). A server
    without the module (the embedded one's build) gives one line saying so instead."""
    notices: list[str] = []
    try:
        with conn.transaction():
            conn.execute("load 'auto_explain'")
    except psycopg.errors.UndefinedFile:
        return ["(no plans: this server has no auto_explain module)"]
    conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
    for setting in ("auto_explain.log_min_duration = 0", "auto_explain.log_analyze = on",
                    "auto_explain.log_buffers = on", "auto_explain.log_nested_statements = on",
                    "auto_explain.log_level = notice"):
        conn.execute(f"set {setting}")
    try:
        conn.execute("select * from queue_stats()").fetchall()
    finally:
        conn.execute("set auto_explain.log_min_duration = -1")
    return [line for text in notices for line in text.splitlines()]


def time_http(url: str, paths: tuple[str, ...], runs: int) -> list[str]:
    parts = urlsplit(url)
    lines = []
    http_conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        for path in paths:
            times, statuses, size = [], {}, 0
            for _ in range(runs + 1):
                t0 = time.perf_counter()
                http_conn.request("GET", path)
                response = http_conn.getresponse()
                body = response.read()
                times.append((time.perf_counter() - t0) * 1000)
                statuses[response.status] = statuses.get(response.status, 0) + 1
                size = len(body)
            codes = ", ".join(f"{n}× {code}" for code, n in sorted(statuses.items()))
            lines.append(summary(f"GET {path}", times[1:], times[0], f" ({codes}; {size:,} bytes)"))
    finally:
        http_conn.close()
    return lines


def measure(dsn: str, runs: int, scrapes: int, work_dir: Path, log) -> list[str]:
    out = []
    with connect(dsn) as conn:
        first, times, rows = time_queue_stats(conn, runs)
        out.append(summary("select queue_stats()", times, first, f" ({rows} rows)"))
        log(out[-1])
        first, times = time_claims(conn, runs)
        out.append(summary(f"claim {CLAIM_BATCH} + success", times, first, " (claim_jobs, mark_jobs_succeeded; rolled back)"))
        log(out[-1])
        plan = explain_queue_stats(conn)
        checked = accuracy(conn)
    api = launch.start_api(0, env={"METRICS_CACHE_MS": "0"}, database_url=dsn, log=work_dir / "api.log", cwd=ROOT)
    try:
        api.wait_ready(timeout=60)
        assert api.url
        for line in time_http(api.url, PATHS + LIST_PATHS, scrapes):
            out.append(line)
            log(line)
    finally:
        api.stop(timeout=15)
    return out + ["", "queue_stats() against exact counts (the figures that differ):", *checked,
                  "", "EXPLAIN (ANALYZE, BUFFERS) of every statement queue_stats() ran (auto_explain):", *plan]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m bench.history", description=__doc__.split("\n\n")[0])
    p.add_argument("--attempts", type=int, default=10_000_000, help="job_attempts rows (default 10 million)")
    p.add_argument("--runs", type=int, default=30, help="timed queue_stats() calls (after one untimed-first)")
    p.add_argument("--scrapes", type=int, default=30, help="timed requests per path")
    p.add_argument("--dsn", help="a superuser DSN of the server (default BENCH_DATABASE_URL, then the local one)")
    p.add_argument("--keep", action="store_true", help="keep the database at the end")
    p.add_argument("--reuse", metavar="DATABASE", help="measure an existing database (migrated again, not filled)")
    p.add_argument("--out", help="also write the report to this file")
    args = p.parse_args(argv)
    if args.attempts < 100:
        p.error("--attempts must be at least 100")
    if args.runs < 1 or args.scrapes < 1:
        p.error("--runs and --scrapes must be at least 1")
    command = "python -m bench.history" + ("" if not argv else " " + " ".join(shlex.quote(a) for a in argv))
    started = time.time()
    log_lines: list[str] = []

    def log(text: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {text}"
        log_lines.append(line)
        print(line, file=sys.stderr, flush=True)

    report = [f"command: {command}"]
    try:
        with ExitStack() as stack:
            admin_dsn, kind = stack.enter_context(server(args.dsn, log))
            name = args.reuse or f"pgqw_history_{uuid.uuid4().hex[:10]}"
            dsn = make_conninfo(admin_dsn, dbname=name)
            if not args.reuse:
                with psycopg.connect(admin_dsn, autocommit=True) as conn:
                    new_database(conn, name)
                log(f"database {name} on the {kind}")
            if not args.keep and not args.reuse:
                stack.callback(_drop, admin_dsn, name, log)
            migrate(dsn)
            took: dict[str, float] = {}
            with connect(dsn) as conn:
                if not args.reuse:
                    took = fill(conn, args.attempts, log)
                else:  # statistics for what the migrate may have added (a statistics object, an index)
                    conn.execute("analyze jobs")
                    conn.execute("analyze job_attempts")
            facts = code_facts()
            machine = machine_facts()
            with connect(dsn) as conn:
                srv = server_facts(conn)
                shape_lines = data_shape(conn)
            work_dir = Path(tempfile.mkdtemp(prefix="pgqw-history-"))
            results = measure(dsn, args.runs, args.scrapes, work_dir, log)
    except (BenchError, launch.LaunchError, TimeoutError, psycopg.Error) as exc:
        print(f"bench.history: {exc}", file=sys.stderr)
        return 2
    report += [
        f"commit: {facts['commit']} dirty: {facts['dirty']}",
        f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}, took {time.time() - started:.0f}s",
        f"machine: {machine['cpus']} cores ({machine['cpu_model']}), {machine['memory_gib']} GiB, "
        f"load at start {machine['load_start']}",
        f"server: {srv['version']} ({kind}); "
        + ", ".join(f"{k} {v}" for k, v in srv["settings"].items()),
        f"database: {name}" + (" (reused: not filled by this run)" if args.reuse else "")
        + (" (kept)" if args.keep else ""),
        "",
        "data:",
        *shape_lines,
        *(["fill: " + ", ".join(f"{k} {v:.0f}s" for k, v in took.items())] if took else []),
        "",
        "timings (client side; the API with METRICS_CACHE_MS=0 so every scrape runs queue_stats()):",
        *results,
    ]
    text = "\n".join(report) + "\n"
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _drop(admin_dsn: str, name: str, log) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
    log(f"dropped {name}")


if __name__ == "__main__":
    sys.exit(main())
