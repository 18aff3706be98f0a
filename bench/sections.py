"""The sections of the benchmark, in the order they run. Each records rows in ctx.results.

Keys name what a row is: raw.* the ceiling, fn.* our stored functions driven by a bare client,
worker.* real `pgqw worker` processes, api.* the HTTP API, peer.* procrastinate and pgqueuer
(bench/peers.py), broker.* Celery and Dramatiq (bench/brokers.py). Every row names the raw row it is a
ratio to (its baseline), measured in the same run.
"""
from __future__ import annotations

import http.client
import json
import multiprocessing as mp
import time
import uuid
from typing import Any, Callable
from urllib.parse import urlsplit

import psycopg

from pgqw import db

from . import queue, raw
from .brokers import section_brokers
from .common import (
    Context,
    CpuWindow,
    ServerCpu,
    calls_delta,
    connect,
    database_commits,
    function_calls,
    percentile,
    reset_queue,
    run_clients,
    split,
    stats_delta,
    table_stats,
    throughput,
    wait_for_stats,
)
from .delayed import section_delayed
from .peers import section_peers
from .procs import Api, Workers

SECTIONS = ("raw", "enqueue", "http", "drain", "peers", "brokers", "latency", "delayed", "depth", "bloat", "empty")

LISTING = {
    "title": "3-bedroom apartment in Yaba",
    "priceMinor": 270000000,
    "currency": "NGN",
    "address": "12 Herbert Macaulay Way, Yaba, Lagos",
    "bedrooms": 3,
}


def _rate(found: list) -> float:
    return throughput(found)[0]


# ----------------------------------------------------------------------------- raw ceiling


def _raw_rep(ctx: Context, conn: psycopg.Connection, procs: int, batch: int) -> None:
    """One repetition of the raw ceiling: load, then drain with `procs` bare clients."""
    s = ctx.sizes
    mode = "single" if batch == 1 else "batch"
    raw.reset(conn)
    raw.load(conn, s.raw_single_jobs if batch == 1 else s.raw_batch_jobs)
    found = run_clients(raw.claim_client, [(ctx.dsn, batch)] * procs, timeout_s=s.timeout_s)
    rate, n, secs = throughput(found)
    row = ctx.results.add(f"raw.{mode}.p{procs}", "raw",
                          f"raw claim + complete, {batch} per claim, {procs} proc", "jobs/s", rate,
                          baseline=f"raw.{mode}.p{procs}")
    ctx.log(f"raw {mode} p{procs} rep {len(row.values)}: {n} jobs in {secs:.2f}s = {rate:,.0f}/s")


def section_raw(ctx: Context) -> None:
    s = ctx.sizes
    with connect(ctx.dsn) as conn:
        raw.create(conn)
        for procs in s.procs:
            for batch in (1, s.batch):
                for _ in range(s.reps):
                    _raw_rep(ctx, conn, procs, batch)
        raw.reset(conn)


# ----------------------------------------------------------------------------- enqueue


def section_enqueue(ctx: Context) -> None:
    s, r = ctx.sizes, ctx.results
    procs = max(s.procs)
    with connect(ctx.dsn) as conn:
        raw.create(conn)
        for rep in range(s.reps):
            raw.reset(conn)
            found = run_clients(raw.insert_client, [(ctx.dsn, n, 1) for n in split(s.enqueue_single_jobs, procs)],
                                timeout_s=s.timeout_s)
            r.add("raw.insert.single", "enqueue", f"raw insert, 1 per transaction, {procs} proc", "jobs/s",
                  _rate(found), baseline="raw.insert.single")
            reset_queue(conn)
            tag = uuid.uuid4().hex[:6]
            found = run_clients(queue.enqueue_client,
                                [(ctx.dsn, f"{tag}-{i}", n, 1) for i, n in enumerate(split(s.enqueue_single_jobs, procs))],
                                timeout_s=s.timeout_s)
            r.add("fn.enqueue_job", "enqueue", f"enqueue_job, 1 per call, {procs} proc", "jobs/s",
                  _rate(found), baseline="raw.insert.single")
            raw.reset(conn)
            found = run_clients(raw.insert_client,
                                [(ctx.dsn, n, s.batch) for n in split(s.enqueue_batch_jobs, procs)], timeout_s=s.timeout_s)
            r.add("raw.insert.batch", "enqueue", f"raw insert, {s.batch} per statement, {procs} proc", "jobs/s",
                  _rate(found), baseline="raw.insert.batch")
            reset_queue(conn)
            tag = uuid.uuid4().hex[:6]
            found = run_clients(queue.enqueue_client,
                                [(ctx.dsn, f"{tag}-{i}", n, s.batch) for i, n in enumerate(split(s.enqueue_batch_jobs, procs))],
                                timeout_s=s.timeout_s)
            r.add("fn.enqueue_jobs", "enqueue", f"enqueue_jobs, {s.batch} per call, {procs} proc", "jobs/s",
                  _rate(found), baseline="raw.insert.batch")
            ctx.log("enqueue rep {}: raw {:,.0f}/s, enqueue_job {:,.0f}/s, raw batch {:,.0f}/s, enqueue_jobs {:,.0f}/s".format(
                rep + 1, *(r.rows[k].values[-1] for k in
                           ("raw.insert.single", "fn.enqueue_job", "raw.insert.batch", "fn.enqueue_jobs"))))
        raw.reset(conn)
        reset_queue(conn)


def _http_client(url: str, prefix: str, n: int) -> Callable[[], tuple[int, dict]]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    body = json.dumps({"type": "listing_flyer", "payload": LISTING}).encode()

    def work() -> tuple[int, dict]:
        statuses: dict[str, int] = {}
        for i in range(n):
            conn.request("POST", "/api/jobs", body=body, headers={
                "Content-Type": "application/json", "Idempotency-Key": f"{prefix}-{i}"})
            resp = conn.getresponse()
            resp.read()
            statuses[str(resp.status)] = statuses.get(str(resp.status), 0) + 1
        conn.close()
        return statuses.get("202", 0), statuses

    return work


def section_http(ctx: Context) -> None:
    s, r = ctx.sizes, ctx.results
    with connect(ctx.dsn) as conn, Api(ctx) as api:
        server = ServerCpu(conn)
        # Warm the API's pool and Flask before timing.
        run_clients(_http_client, [(api.url, f"warm-{uuid.uuid4().hex[:6]}", 20)], timeout_s=60)
        for rep in range(s.reps):
            reset_queue(conn)
            tag = uuid.uuid4().hex[:6]
            api0, win = api.cpu_s(), CpuWindow(server).start()
            found = run_clients(_http_client, [(api.url, f"{tag}-{i}", n) for i, n in
                                               enumerate(split(s.http_requests, s.http_clients))],
                                timeout_s=s.timeout_s)
            cpu = win.stop()
            rate, n, secs = throughput(found)
            bad = {k: v for f in found for k, v in (f.extra or {}).items() if k != "202"}
            if bad:
                ctx.results.errors.append(f"http rep {rep + 1}: non-202 answers {bad}")
            r.add("api.enqueue", "enqueue", f"POST /api/jobs (waitress), {s.http_clients} clients", "jobs/s",
                  rate, baseline="raw.insert.single")
            ctx.results.profiles.setdefault("http", []).append({
                "requests": n, "seconds": secs, "api_process_cpu_s": api.cpu_s() - api0,
                "client_cpu_s": sum(f.cpu_s for f in found), **cpu})
            ctx.log(f"http rep {rep + 1}: {n} jobs in {secs:.2f}s = {rate:,.0f}/s")
        reset_queue(conn)


# ----------------------------------------------------------------------------- drain


def _fn_drain(ctx: Context, conn: psycopg.Connection, procs: int, batch: int, key: str, label: str,
              async_claim: bool = False) -> None:
    s = ctx.sizes
    n = s.fn_single_jobs if batch == 1 else s.drain_jobs
    server = ServerCpu(conn)
    for rep in range(s.reps):
        reset_queue(conn)
        queue.enqueue_noops(conn, n)
        conn.execute("analyze jobs, job_attempts")
        win = CpuWindow(server).start()
        found = run_clients(queue.claim_client,
                            [(ctx.dsn, f"fn-{i}", batch, None, async_claim) for i in range(procs)],
                            timeout_s=s.timeout_s)
        cpu = win.stop()
        rate, n, secs = throughput(found)
        ctx.results.add(key, "drain", label, "jobs/s", rate,
                        baseline=f"raw.{'single' if batch == 1 else 'batch'}.p{procs}")
        if "server_cpu_s" in cpu and n:
            # Every backend of the server over the loop: the clients' own and anything else it did.
            ctx.results.add(f"{key}.server_cpu", "drain", f"{label}: server CPU per job", "ms",
                            cpu["server_cpu_s"] * 1000 / n, better="lower")
        ctx.log(f"{key} rep {rep + 1}: {n} jobs in {secs:.2f}s = {rate:,.0f}/s")


def _worker_drain(ctx: Context, conn: psycopg.Connection, procs: int, batch_claim: bool, rep: int,
                  concurrency: int | None = None) -> None:
    """One drain of drain_jobs noop jobs by `procs` real worker processes, measured from the
    database: jobs / (last attempt finished - first attempt started). concurrency: the workers'
    WORKER_CONCURRENCY when not the profile's (the rows worker.cN.*, compared with the peers)."""
    s, r = ctx.sizes, ctx.results
    mode = "batch" if batch_claim else "single"
    key = f"worker.c{concurrency}.{mode}.p{procs}" if concurrency else f"worker.{mode}.p{procs}"
    reset_queue(conn)
    server = ServerCpu(conn)
    with Workers(ctx, procs, tag=f"bench-{mode}-p{procs}-r{rep + 1}", batch_claim=batch_claim,
                 concurrency=concurrency) as workers:
        w0 = workers.cpu_s()
        commits0, calls0, stats0 = database_commits(conn), function_calls(conn), table_stats(conn, ["jobs", "job_attempts"])
        win = CpuWindow(server).start()
        # One transaction: the workers (idle, listening) all wake at its commit.
        with conn.transaction():
            queue.enqueue_noops(conn, s.drain_jobs)
        deadline = time.monotonic() + s.timeout_s
        while True:
            row = conn.execute("select exists (select 1 from jobs where status in ('pending', 'processing', 'failed'))").fetchone()
            if row and not row[0]:
                break
            workers.check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{key}: the drain did not finish in {s.timeout_s:.0f}s")
            time.sleep(0.1)
        cpu = win.stop()
        worker_cpu = workers.cpu_s() - w0
    # The workers have exited: their counters are flushed.
    wait_for_stats(conn, "job_attempts", "upd", stats0["job_attempts"]["upd"] + s.drain_jobs)
    stats = stats_delta(stats0, table_stats(conn, ["jobs", "job_attempts"]))
    calls = calls_delta(calls0, function_calls(conn))
    commits = database_commits(conn) - commits0
    row = conn.execute(
        "select count(*), count(distinct job_id), extract(epoch from max(finished_at) - min(started_at)),"
        "       count(*) filter (where outcome = 'succeeded')"
        "  from job_attempts").fetchone()
    attempts, jobs_done, span, ok = int(row[0]), int(row[1]), float(row[2] or 0), int(row[3])
    if ok != s.drain_jobs or attempts != s.drain_jobs:
        r.errors.append(f"{key} rep {rep + 1}: {ok} succeeded attempts, {attempts} attempts for {s.drain_jobs} jobs")
    rate = jobs_done / span if span > 0 else float("nan")
    r.add(key, "drain", f"pgqw worker, {'batch claim' if batch_claim else '1 per claim'}, "
          f"{f'concurrency {concurrency}, ' if concurrency else ''}{procs} proc",
          "jobs/s", rate, baseline=f"raw.{'batch' if batch_claim else 'single'}.p{procs}")
    n = s.drain_jobs
    profile = {
        "jobs": n, "db_span_s": span, "wall_s": cpu["wall_s"],
        "worker_cpu_ms_per_job": worker_cpu * 1000 / n,
        "server_cpu_ms_per_job": cpu.get("server_cpu_s", float("nan")) * 1000 / n,
        "machine_busy_pct": 100 * cpu["machine_busy_s"] / cpu["machine_capacity_s"] if cpu["machine_capacity_s"] else None,
        "transactions_per_job": commits / n,
        "calls_per_job": {k: v["calls"] / n for k, v in calls.items()},
        "function_ms_per_job": {k: v["total_ms"] / n for k, v in calls.items()},
        "dead_tuples_per_job": {t: d["dead"] / n for t, d in stats.items()},
        "hot_update_pct": {t: (100 * d["hot_upd"] / d["upd"] if d["upd"] else None) for t, d in stats.items()},
        "dead_tuples_after": {t: v["dead"] for t, v in table_stats(conn, ["jobs", "job_attempts"]).items()},
    }
    r.profiles.setdefault(key, []).append(profile)
    ctx.log(f"{key} rep {rep + 1}: {jobs_done} jobs in {span:.2f}s (db) = {rate:,.0f}/s; worker CPU "
            f"{profile['worker_cpu_ms_per_job']:.3f} ms/job, server CPU {profile['server_cpu_ms_per_job']:.3f} ms/job, "
            f"machine busy {profile['machine_busy_pct'] or 0:.0f}%, {profile['transactions_per_job']:.2f} xacts/job")


def section_drain(ctx: Context) -> None:
    s = ctx.sizes
    with connect(ctx.dsn) as conn:
        for procs in s.procs:
            _fn_drain(ctx, conn, procs, 1, f"fn.single.p{procs}", f"functions loop, 1 per claim, {procs} proc")
            _fn_drain(ctx, conn, procs, s.batch, f"fn.batch.p{procs}",
                      f"functions loop, {s.batch} per claim, {procs} proc")
        procs = max(s.procs)
        _fn_drain(ctx, conn, procs, 1, f"fn.single_async.p{procs}",
                  f"functions loop, 1 per claim, claim commit async, {procs} proc", async_claim=True)
        raw.create(conn)
        for procs in s.procs:
            for batch_claim in (False, True):
                for rep in range(s.reps):
                    # The ceiling again, right before: on a shared machine the load drifts within minutes.
                    _raw_rep(ctx, conn, procs, s.batch if batch_claim else 1)
                    _worker_drain(ctx, conn, procs, batch_claim, rep)
        # The runtime at the peers' settings (bench/peers.py): concurrency 10 with batch claims, as
        # pgqueuer's defaults take 10 at a time, and concurrency 1, one job per claim, as procrastinate's.
        procs = max(s.procs)
        for concurrency, batch_claim in ((10, True), (1, False)):
            for rep in range(s.reps):
                _raw_rep(ctx, conn, procs, s.batch if batch_claim else 1)
                _worker_drain(ctx, conn, procs, batch_claim, rep, concurrency=concurrency)
        raw.reset(conn)
        reset_queue(conn)


# ----------------------------------------------------------------------------- latency


def _raw_listen_client(dsn: str, expected: int, timeout_s: float) -> Callable[[], tuple[int, list[float]]]:
    conn = connect(dsn)
    conn.execute(f"listen {raw.CHANNEL}")

    def work() -> tuple[int, list[float]]:
        found: list[float] = []
        deadline = time.monotonic() + timeout_s
        with conn:
            while len(found) < expected and time.monotonic() < deadline:
                for _ in conn.notifies(timeout=0.5, stop_after=1):
                    pass
                while True:
                    row = conn.execute(raw.CLAIM_ONE_TIMED).fetchone()
                    if row is None:
                        break
                    found.append(float(row[0]))
        return len(found), found

    return work


def _steady_enqueue(n: int, rate: float, insert: Callable[[int], None]) -> None:
    """Calls insert(0 .. n-1) at a steady rate per second (on schedule, not after each other)."""
    t0 = time.perf_counter()
    for i in range(n):
        wait = t0 + i / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        insert(i)


def _latency_row(ctx: Context, key: str, label: str, values_ms: list[float], baseline_p50: str, baseline_p99: str) -> None:
    r = ctx.results
    r.add(f"{key}.p50", "latency", f"{label}, p50", "ms", percentile(values_ms, 50), baseline=baseline_p50, better="lower")
    r.add(f"{key}.p99", "latency", f"{label}, p99", "ms", percentile(values_ms, 99), baseline=baseline_p99, better="lower")


def section_latency(ctx: Context) -> None:
    s = ctx.sizes
    n = max(1, int(s.latency_rate * s.latency_seconds))
    with connect(ctx.dsn) as conn:
        raw.create(conn)
        # The bare LISTEN loop: insert + NOTIFY, a listener that claims on each notification.
        fork = mp.get_context("fork")
        for rep in range(s.reps):
            raw.reset(conn)
            out = fork.Queue()

            def listener(out: Any = out) -> None:
                work = _raw_listen_client(ctx.dsn, n, s.latency_seconds + 30)
                out.put(work()[1])

            p = fork.Process(target=listener, daemon=True)
            p.start()
            time.sleep(0.5)  # the listener is connected and listening
            _steady_enqueue(n, s.latency_rate, lambda i: conn.execute(raw.INSERT_NOTIFY, [json.dumps({"n": i})]))
            values = out.get(timeout=s.latency_seconds + 60)
            p.join(timeout=10)
            _latency_row(ctx, "raw.latency", "raw LISTEN loop, insert to claim", values,
                         "raw.latency.p50", "raw.latency.p99")
            ctx.log(f"raw latency rep {rep + 1}: p50 {percentile(values, 50):.2f} ms, p99 {percentile(values, 99):.2f} ms")
        raw.reset(conn)

        for listen, procs in ((True, 1), (False, 1), (True, max(s.procs))):
            mode = "listen" if listen else "poll"
            key = f"worker.latency.{mode}.p{procs}"
            for rep in range(s.reps):
                reset_queue(conn)
                calls0 = function_calls(conn)
                with Workers(ctx, procs, tag=f"bench-lat-{mode}-p{procs}-r{rep + 1}", batch_claim=True,
                             listen=listen) as workers:
                    tag = uuid.uuid4().hex[:6]
                    _steady_enqueue(n, s.latency_rate, lambda i, tag=tag: db.enqueue_job(
                        conn, type=queue.NOOP, payload={}, idempotency_key=f"{tag}-{i}"))
                    deadline = time.monotonic() + 30 + 3 * s.poll_interval_ms / 1000
                    while time.monotonic() < deadline:
                        row = conn.execute("select count(*) from job_attempts where outcome = 'succeeded'").fetchone()
                        if row and int(row[0]) >= n:
                            break
                        workers.check()
                        time.sleep(0.1)
                values = [float(v) for (v,) in conn.execute(
                    "select extract(epoch from a.started_at - j.created_at) * 1000.0"
                    "  from job_attempts a join jobs j on j.id = a.job_id where a.attempt = 1")]
                if len(values) != n:
                    ctx.results.errors.append(f"{key} rep {rep + 1}: {len(values)} of {n} jobs started")
                calls = calls_delta(calls0, function_calls(conn))
                claims = sum(v["calls"] for k, v in calls.items() if k == "claim_jobs")
                ctx.results.profiles.setdefault(key, []).append({
                    "jobs": len(values), "claim_calls_per_job": claims / max(1, len(values)),
                    "claim_ms_per_job": sum(v["total_ms"] for k, v in calls.items() if k == "claim_jobs") / max(1, len(values))})
                label = (f"pgqw worker, {'LISTEN' if listen else f'polling only ({s.poll_interval_ms} ms)'}, "
                         f"{procs} proc, enqueue to claim")
                _latency_row(ctx, key, label, values, "raw.latency.p50", "raw.latency.p99")
                ctx.log(f"{key} rep {rep + 1}: p50 {percentile(values, 50):.2f} ms, p99 {percentile(values, 99):.2f} ms")
        reset_queue(conn)


# ----------------------------------------------------------------------------- depth


def _depth_rep(ctx: Context, conn: psycopg.Connection, ready: int, key: str, label: str, batch: int = 1) -> None:
    s = ctx.sizes
    missing = ready - queue.ready_count(conn)
    if missing > 0:
        queue.bulk_load(conn, ready=missing)
    # Every repetition starts from the same clean index: the claims of the previous ones leave dead
    # entries at the head of the ready index, which autovacuum (off on this server) would remove.
    # Their cost is the empty-queue section's subject; here it would blur the effect of depth.
    # Plain VACUUM: the statistics stay as they were (the stale-statistics rows rely on it).
    conn.execute("vacuum jobs")
    procs = max(s.procs)
    claims = s.depth_claims if batch == 1 else 5 * s.depth_claims  # batches: a run long enough to time
    found = run_clients(queue.claim_client,
                        [(ctx.dsn, f"depth-{i}", batch, n) for i, n in enumerate(split(claims, procs))],
                        timeout_s=s.timeout_s)
    rate, n, secs = throughput(found)
    ctx.results.add(key, "depth", label, "jobs/s", rate, baseline=f"raw.{'single' if batch == 1 else 'batch'}.p{procs}")
    ctx.log(f"{key}: {n} jobs in {secs:.2f}s = {rate:,.0f}/s")


def section_depth(ctx: Context) -> None:
    s = ctx.sizes
    procs = max(s.procs)
    with connect(ctx.dsn) as conn:
        reset_queue(conn)
        t0 = time.perf_counter()
        queue.bulk_load(conn, finished=s.depth_finished, ready=s.depth_small)
        conn.execute("vacuum analyze jobs")
        ctx.log(f"depth: loaded {s.depth_finished:,} finished + {s.depth_small:,} ready in {time.perf_counter() - t0:.1f}s")
        # 1 per claim (claim_job + mark_succeeded), and as a worker with free slots claims
        # (claim_jobs(worker_concurrency) + mark_jobs_succeeded).
        k = s.worker_concurrency

        def both(ready: int, key: str, what: str) -> None:
            for _ in range(s.reps):
                _depth_rep(ctx, conn, ready, key, f"claim_job + mark_succeeded, {what}, {procs} proc")
            for _ in range(s.reps):
                _depth_rep(ctx, conn, ready, f"{key}.batch",
                           f"claim_jobs({k}) + mark_jobs_succeeded, {what}, {procs} proc", batch=k)

        both(s.depth_small, "depth.small", f"{s.depth_small:,} ready + {s.depth_finished:,} finished")
        t0 = time.perf_counter()
        queue.bulk_load(conn, ready=s.depth_large - queue.ready_count(conn))
        ctx.log(f"depth: topped up to {s.depth_large:,} ready in {time.perf_counter() - t0:.1f}s")
        # First with the statistics of the small backlog (a burst before autoanalyze runs) ...
        both(s.depth_large, "depth.large.stale", f"{s.depth_large:,} ready, statistics from before the burst")
        # ... then as autoanalyze leaves it.
        conn.execute("analyze jobs")
        both(s.depth_large, "depth.large", f"{s.depth_large:,} ready + {s.depth_finished:,} finished")
        reset_queue(conn)


# ----------------------------------------------------------------------------- bloat


def section_bloat(ctx: Context) -> None:
    s, r = ctx.sizes, ctx.results
    procs = max(s.procs)
    tables = ["jobs", "job_attempts"]
    with connect(ctx.dsn) as conn:
        raw.create(conn)
        for rep in range(s.reps):
            reset_queue(conn)
            queue.enqueue_noops(conn, s.bloat_jobs)
            conn.execute("analyze jobs, job_attempts")
            wait_for_stats(conn, "jobs", "ins", s.bloat_jobs)
            before = table_stats(conn, tables)
            run_clients(queue.claim_client, [(ctx.dsn, f"bloat-{i}", 1) for i in range(procs)], timeout_s=s.timeout_s)
            wait_for_stats(conn, "job_attempts", "upd", before["job_attempts"]["upd"] + s.bloat_jobs)
            after = table_stats(conn, tables)
            d = stats_delta(before, after)
            dead = sum(d[t]["dead"] for t in tables)
            r.add("bloat.dead_per_job", "bloat", "row versions made dead per processed job (jobs + job_attempts)",
                  "dead/job", dead / s.bloat_jobs, baseline="raw.bloat.dead_per_job", better="lower")
            r.add("bloat.jobs_dead_after", "bloat", f"dead tuples in jobs after draining {s.bloat_jobs:,}",
                  "tuples", after["jobs"]["dead"], better="lower")
            r.add("bloat.attempts_dead_after", "bloat", f"dead tuples in job_attempts after draining {s.bloat_jobs:,}",
                  "tuples", after["job_attempts"]["dead"], better="lower")
            r.add("bloat.jobs_hot_pct", "bloat", "HOT updates of jobs", "%",
                  100 * d["jobs"]["hot_upd"] / d["jobs"]["upd"] if d["jobs"]["upd"] else 0.0)
            r.add("bloat.attempts_hot_pct", "bloat", "HOT updates of job_attempts", "%",
                  100 * d["job_attempts"]["hot_upd"] / d["job_attempts"]["upd"] if d["job_attempts"]["upd"] else 0.0)
            r.profiles.setdefault("bloat", []).append({"delta": d, "after": after})

            raw.reset(conn)
            raw.load(conn, s.bloat_jobs)
            wait_for_stats(conn, raw.TABLE, "ins", s.bloat_jobs)
            rb = table_stats(conn, [raw.TABLE])
            run_clients(raw.claim_client, [(ctx.dsn, 1)] * procs, timeout_s=s.timeout_s)
            wait_for_stats(conn, raw.TABLE, "upd", rb[raw.TABLE]["upd"] + 2 * s.bloat_jobs)
            rd = stats_delta(rb, table_stats(conn, [raw.TABLE]))[raw.TABLE]
            r.add("raw.bloat.dead_per_job", "bloat", "raw table: row versions made dead per job", "dead/job",
                  rd["dead"] / s.bloat_jobs, baseline="raw.bloat.dead_per_job", better="lower")
            ctx.log(f"bloat rep {rep + 1}: {dead / s.bloat_jobs:.2f} dead/job (raw {rd['dead'] / s.bloat_jobs:.2f}); "
                    f"jobs HOT {r.rows['bloat.jobs_hot_pct'].values[-1]:.0f}%, "
                    f"job_attempts HOT {r.rows['bloat.attempts_hot_pct'].values[-1]:.0f}%")
        raw.reset(conn)
        reset_queue(conn)


# ----------------------------------------------------------------------------- empty queue


def _index_blocks(conn: psycopg.Connection, index: str) -> float:
    conn.execute("select pg_stat_clear_snapshot()")
    row = conn.execute(
        "select coalesce(idx_blks_hit, 0) + coalesce(idx_blks_read, 0) from pg_statio_user_indexes"
        " where indexrelname = %s", [index]).fetchone()
    return float(row[0]) if row else 0.0


def _probe(ctx: Context, prober: psycopg.Connection, probe: Callable[[psycopg.Connection, int], list[float]],
           index: str, key: str, label: str, baseline: str) -> None:
    s = ctx.sizes
    with connect(ctx.dsn) as reader:
        b0 = _index_blocks(reader, index)
        values = probe(prober, s.empty_probes)
        prober.execute("select pg_stat_force_next_flush()")
        blocks = (_index_blocks(reader, index) - b0) / s.empty_probes
    ctx.results.add(f"{key}.ms", "empty", f"{label}: one claim that finds nothing (median)", "ms",
                    percentile(values, 50), baseline=f"{baseline}.ms", better="lower")
    ctx.results.add(f"{key}.blocks", "empty", f"{label}: ready-index blocks read per empty claim", "blocks",
                    blocks, baseline=f"{baseline}.blocks", better="lower")


def _empty_rep(ctx: Context, conn: psycopg.Connection, ours: bool) -> None:
    """Warm a connection on the empty queue, enqueue and drain empty_drained jobs, then time the
    claims that find nothing: the first one, the next empty_probes, and the same after VACUUM."""
    s = ctx.sizes
    procs = max(s.procs)
    probe = queue.empty_claim_ms if ours else raw.empty_claim_ms
    index = "jobs_ready_idx" if ours else f"{raw.TABLE}_ready_idx"
    prefix = "empty" if ours else "raw.empty"
    what = "claim_job" if ours else "raw claim"
    with connect(ctx.dsn) as prober:
        if ours:
            reset_queue(conn)
        else:
            raw.reset(conn)
        probe(prober, 5)  # parse, plan, prepare: the timed calls below measure the scan, not the setup
        if ours:
            queue.enqueue_noops(conn, s.empty_drained)
            conn.execute("analyze jobs, job_attempts")
            run_clients(queue.claim_client, [(ctx.dsn, f"empty-{i}", s.batch) for i in range(procs)],
                        timeout_s=s.timeout_s)
        else:
            raw.load(conn, s.empty_drained)
            run_clients(raw.claim_client, [(ctx.dsn, s.batch)] * procs, timeout_s=s.timeout_s)
        ctx.results.add(f"{prefix}.first.ms", "empty",
                        f"{what}: the first empty claim right after draining {s.empty_drained:,}", "ms",
                        probe(prober, 1)[0], baseline="raw.empty.first.ms", better="lower")
        _probe(ctx, prober, probe, index, f"{prefix}.after_drain", f"{what} after draining {s.empty_drained:,}",
               "raw.empty.after_drain")
        conn.execute(f"vacuum {'jobs' if ours else raw.TABLE}")
        _probe(ctx, prober, probe, index, f"{prefix}.after_vacuum", f"{what} after VACUUM",
               "raw.empty.after_vacuum")


# Long enough for every backend's pending function-call counts to reach pg_stat_user_functions.
STATS_REPORTED_S = 11.0


def _idle_rep(ctx: Context, conn: psycopg.Connection, listen: bool, rep: int) -> None:
    """The largest pool of workers, started and idle with nothing enqueued: the claims they make and
    the server's CPU over latency_seconds.

    A backend reports its function calls at most once a second; calls made within a second of its
    last report wait for its idle timer, ten seconds in PostgreSQL 15. So the count starts once the
    startup claims have surely been reported and ends once the window's have, and the rate is over
    the whole span between the two readings."""
    s = ctx.sizes
    procs, mode = max(s.procs), "listen" if listen else "poll"
    reset_queue(conn)
    server = ServerCpu(conn)
    with Workers(ctx, procs, tag=f"bench-idle-{mode}-r{rep + 1}", batch_claim=True, listen=listen) as workers:
        time.sleep(STATS_REPORTED_S)
        calls0, t0 = function_calls(conn), time.monotonic()
        window = CpuWindow(server).start()
        time.sleep(s.latency_seconds)
        cpu = window.stop()
        workers.check()
        time.sleep(STATS_REPORTED_S)
        calls, span = calls_delta(calls0, function_calls(conn)), time.monotonic() - t0
    claims = sum(v["calls"] for k, v in calls.items() if k in ("claim_job", "claim_jobs"))
    label = f"{procs} idle pgqw workers, {'LISTEN' if listen else f'polling only ({s.poll_interval_ms} ms)'}"
    ctx.results.add(f"idle.{mode}.claims_per_s", "empty", f"{label}: claims per second, nothing enqueued",
                    "claims/s", claims / span, better="lower")
    if "server_cpu_s" in cpu:
        ctx.results.add(f"idle.{mode}.server_ms_per_s", "empty", f"{label}: server CPU per second",
                        "ms/s", cpu["server_cpu_s"] * 1000 / cpu["wall_s"], better="lower")
    ctx.log(f"idle {mode} rep {rep + 1}: {claims:.0f} claims in {span:.1f} s, server CPU "
            f"{cpu.get('server_cpu_s', 0) * 1000:.1f} ms")


def section_empty(ctx: Context) -> None:
    s = ctx.sizes
    with connect(ctx.dsn) as conn:
        raw.create(conn)
        for rep in range(s.reps):
            if s.idle_windows:
                _idle_rep(ctx, conn, listen=True, rep=rep)
                _idle_rep(ctx, conn, listen=False, rep=rep)
            _empty_rep(ctx, conn, ours=True)
            _empty_rep(ctx, conn, ours=False)
            rows = ctx.results.rows
            ctx.log(f"empty rep {rep + 1}: ours first {rows['empty.first.ms'].values[-1]:.2f} ms, then "
                    f"{rows['empty.after_drain.ms'].values[-1]:.3f} ms ({rows['empty.after_drain.blocks'].values[-1]:.1f} blocks), "
                    f"after vacuum {rows['empty.after_vacuum.ms'].values[-1]:.3f} ms; raw first "
                    f"{rows['raw.empty.first.ms'].values[-1]:.2f} ms, then {rows['raw.empty.after_drain.ms'].values[-1]:.3f} ms "
                    f"({rows['raw.empty.after_drain.blocks'].values[-1]:.1f} blocks)")
        raw.reset(conn)
        reset_queue(conn)


RUNNERS: dict[str, Callable[[Context], None]] = {
    "raw": section_raw,
    "enqueue": section_enqueue,
    "http": section_http,
    "drain": section_drain,
    "latency": section_latency,
    "depth": section_depth,
    "bloat": section_bloat,
    "empty": section_empty,
    "peers": section_peers,  # bench/peers.py: procrastinate and pgqueuer beside ours
    "brokers": section_brokers,  # bench/brokers.py: Celery and Dramatiq on Redis and RabbitMQ
    "delayed": section_delayed,  # bench/delayed.py: jobs for later, and retries, start on time
}
