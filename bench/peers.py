"""Peer queues beside ours: procrastinate and pgqueuer on the same server, in the same run.

Each peer gets a fresh database of its own on the benchmark's server, its schema applied with its
own command (`procrastinate schema --apply`, `pgq install`), and then:

- enqueue: P client processes (the bench's largest process count) add no-op jobs through the
  peer's documented producer API, one per call (`Task.defer_async`, `Queries.enqueue(name, payload)`)
  and in batches of the bench's batch size (`Task.batch_defer_async`, `Queries.enqueue([...], ...)`);
- drain: P real worker processes started with the peer's own worker (`procrastinate worker`;
  `pgqueuer.run`, which is `pgq run` without its CLI: see pgqueuer_worker), idle and listening,
  then drain_jobs no-op jobs enqueued in one transaction. The figure
  is jobs ÷ (last job finished − first job started), from the peer's own log of events
  (procrastinate_events, pgqueuer_log), which is how ours is measured (job_attempts); a separate
  connection polls the peer's job table until every job is done, and that wall time (from the
  enqueue's commit) is kept in the profile as a check;
- enqueue to start: 1 worker at its defaults, jobs enqueued one per call at the latency section's
  rate; per job, the peer's start event minus its enqueue event (as ours: started_at - created_at).

Settings: each peer at its defaults and at concurrency 1 per process. procrastinate's default
concurrency is 1, so for it the two are one run. pgqueuer's default is batch size 10 (no cap on jobs
in flight); it has no per-process concurrency of 1 (an entrypoint's concurrency_limit is global
across workers, and --max-concurrent-tasks must be at least twice the batch size), so its
"concurrency 1" is --batch-size 1: one job per dequeue.

The peers are benchmark-only dependencies (the `bench` extra). Nothing here imports them at module
level: `pgqw bench` without them reports the section as failed and runs the others.
The procrastinate app and the pgqueuer factory below are what the peers' worker processes load
(`--app bench.peers.procrastinate_app`, `bench.peers:pgqueuer_factory`); their DSN comes from
PEER_DSN_ENV.
"""
from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable
from urllib.parse import quote, urlencode

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgqw import launch

from . import raw
from .common import (
    ROOT,
    Context,
    CpuWindow,
    ServerCpu,
    connect,
    new_database,
    percentile,
    proc_cpu_s,
    run_clients,
    split,
    throughput,
)

PEER_DSN_ENV = "PGQW_BENCH_PEER_DSN"
TASK = "noop"
PEERS = ("procrastinate", "pgqueuer")
APP_PATH = "bench.peers.procrastinate_app"
FACTORY_PATH = "bench.peers:pgqueuer_factory"


def version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# ----------------------------------------------------------------------------- what the workers load


def make_procrastinate_app(conninfo: str) -> Any:
    """A procrastinate App with one async no-op task, as its docs define one."""
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo))

    @app.task(name=TASK)
    async def noop(n: int | None = None) -> None:
        return None

    return app


_app: Any = None


def __getattr__(name: str) -> Any:
    """`procrastinate --app bench.peers.procrastinate_app` loads the app through here, so that
    importing this module never imports procrastinate."""
    global _app
    if name == "procrastinate_app":
        if _app is None:
            _app = make_procrastinate_app(os.environ.get(PEER_DSN_ENV, ""))
        return _app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@contextlib.asynccontextmanager
async def pgqueuer_factory() -> AsyncIterator[Any]:
    """`pgq run bench.peers:pgqueuer_factory`: its README's consumer (one asyncpg connection, a
    PgQueuer, one entrypoint) with a no-op handler.

    asyncpg, not psycopg: it is the driver of pgqueuer's README and the one its CLI tries first, and
    its psycopg driver waits for notifications with the connection's lock held (up to 1 s), which
    delayed the first dequeue of every drain by a second here."""
    import asyncpg
    from pgqueuer import AsyncpgDriver, PgQueuer
    from pgqueuer.models import Job

    conn = await asyncpg.connect(asyncpg_dsn(os.environ.get(PEER_DSN_ENV, "")),
                                 server_settings={"application_name": "bench-peer-pgqueuer"})
    try:
        pgq = PgQueuer(AsyncpgDriver(conn))

        @pgq.entrypoint(TASK)
        async def noop(job: Job) -> None:
            return None

        yield pgq
    finally:
        await conn.close()


def asyncpg_dsn(conninfo: str) -> str:
    """A postgresql:// URL (asyncpg reads no key=value strings) of a libpq conninfo or URL."""
    params = conninfo_to_dict(conninfo)
    user = quote(str(params.pop("user", "") or ""), safe="")
    password = params.pop("password", None)
    dbname = quote(str(params.pop("dbname", "") or ""), safe="")
    host, port = str(params.pop("host", "") or ""), params.pop("port", None)
    netloc = user + (f":{quote(str(password), safe='')}" if password else "") + ("@" if user else "")
    if host and not host.startswith("/"):
        netloc += host + (f":{port}" if port else "")
    else:
        if host:
            params["host"] = host
        if port:
            params["port"] = port
    return f"postgresql://{netloc}/{dbname}" + (f"?{urlencode(params)}" if params else "")


# ----------------------------------------------------------------------------- each peer


@dataclass(frozen=True)
class Drain:
    """One worker configuration of a peer."""

    name: str                 # "default" or "c1"
    label: str                # what the row says
    args: tuple[str, ...]     # extra command-line arguments of the worker
    ceiling: str              # "single" or "batch": the raw ceiling it is a ratio to
    ours: str                 # our row (prefix, + .pN) it is compared with


@dataclass(frozen=True)
class Peer:
    name: str
    dist: str
    install: Callable[[], list[str]]           # command line that applies the schema
    worker: Callable[[tuple[str, ...]], list[str]]
    drains: tuple[Drain, ...]
    enqueue_api: tuple[str, str]                # (one per call, batch) as documented
    tables: tuple[str, ...]                     # truncated between repetitions


def _procrastinate_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "procrastinate", "--app", APP_PATH, *args]


def _pgqueuer_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pgqueuer", *args]


PROCRASTINATE = Peer(
    name="procrastinate", dist="procrastinate",
    install=lambda: _procrastinate_cmd("schema", "--apply"),
    worker=lambda extra: _procrastinate_cmd("worker", *extra),
    drains=(Drain("c1", "concurrency 1 (its default)", ("--concurrency", "1"), "single", "worker.single"),),
    enqueue_api=("Task.defer_async", "Task.batch_defer_async"),
    tables=("procrastinate_jobs", "procrastinate_events", "procrastinate_workers"),
)

PGQUEUER = Peer(
    name="pgqueuer", dist="pgqueuer",
    install=lambda: _pgqueuer_cmd("install"),
    worker=lambda extra: [sys.executable, "-m", "bench.peers", "pgqueuer-worker", *extra],
    drains=(Drain("default", "defaults (batch size 10)", (), "batch", "worker.batch"),
            Drain("c1", "batch size 1", ("--batch-size", "1"), "single", "worker.single")),
    enqueue_api=("Queries.enqueue(name, payload)", "Queries.enqueue([names], [payloads], [priorities])"),
    tables=("pgqueuer", "pgqueuer_log", "pgqueuer_statistics"),
)

BY_NAME = {p.name: p for p in (PROCRASTINATE, PGQUEUER)}


def _peer_env(dsn: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PGQUEUER_", "PROCRASTINATE_"))}
    # pgq's own DSN option (PGDSN) goes to asyncpg when it is installed, which reads URLs only.
    env.update({PEER_DSN_ENV: dsn, "PGDSN": asyncpg_dsn(dsn), "PYTHONUNBUFFERED": "1"})
    return env


def _run_cmd(cmd: list[str], dsn: str, timeout_s: float = 120) -> str:
    done = subprocess.run(cmd, cwd=ROOT, env=_peer_env(dsn), capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[2:])} exited with {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout + done.stderr


# ----------------------------------------------------------------------------- enqueue clients


def _procrastinate_enqueue_client(dsn: str, n: int, batch: int) -> Callable[[], int]:
    loop = asyncio.new_event_loop()
    app = make_procrastinate_app(dsn)
    loop.run_until_complete(app.open_async())
    task = app.tasks[TASK]

    async def go() -> None:
        try:
            if batch == 1:
                for i in range(n):
                    await task.defer_async(n=i)
            else:
                for start in range(0, n, batch):
                    await task.batch_defer_async(*({"n": i} for i in range(start, min(n, start + batch))))
        finally:
            await app.close_async()

    def work() -> int:
        loop.run_until_complete(go())
        loop.close()
        return n

    return work


def _pgqueuer_enqueue_client(dsn: str, n: int, batch: int) -> Callable[[], int]:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    loop = asyncio.new_event_loop()
    conn = loop.run_until_complete(asyncpg.connect(asyncpg_dsn(dsn)))
    queries = Queries(AsyncpgDriver(conn))

    async def go() -> None:
        try:
            if batch == 1:
                for i in range(n):
                    await queries.enqueue(TASK, json.dumps({"n": i}).encode())
            else:
                for start in range(0, n, batch):
                    k = min(n, start + batch) - start
                    await queries.enqueue([TASK] * k, [json.dumps({"n": i}).encode() for i in range(start, start + k)],
                                          [0] * k)
        finally:
            await conn.close()

    def work() -> int:
        loop.run_until_complete(go())
        loop.close()
        return n

    return work


ENQUEUE_CLIENTS = {"procrastinate": _procrastinate_enqueue_client, "pgqueuer": _pgqueuer_enqueue_client}


async def _enqueue_all(peer: Peer, dsn: str, n: int) -> None:
    """n no-op jobs in one transaction (one statement) through the peer's batch API: the drain's load."""
    if peer.name == "procrastinate":
        app = make_procrastinate_app(dsn)
        async with app.open_async():
            await app.tasks[TASK].batch_defer_async(*({"n": i} for i in range(n)))
    else:
        import asyncpg
        from pgqueuer import AsyncpgDriver, Queries

        conn = await asyncpg.connect(asyncpg_dsn(dsn))
        try:
            await Queries(AsyncpgDriver(conn)).enqueue(
                [TASK] * n, [json.dumps({"n": i}).encode() for i in range(n)], [0] * n)
        finally:
            await conn.close()


# ----------------------------------------------------------------------------- measuring a drain


def _remaining(peer: Peer, conn: psycopg.Connection) -> int:
    if peer.name == "procrastinate":
        row = conn.execute("select count(*) from procrastinate_jobs where status in ('todo', 'doing')").fetchone()
    else:
        row = conn.execute("select count(*) from pgqueuer").fetchone()
    return int(row[0]) if row else 0


def _db_span(peer: Peer, conn: psycopg.Connection) -> tuple[int, float]:
    """(jobs that succeeded, seconds from the first start to the last success) from the peer's log."""
    if peer.name == "procrastinate":
        row = conn.execute(
            "select count(*) filter (where type = 'succeeded'),"
            "       extract(epoch from max(at) filter (where type = 'succeeded') - min(at) filter (where type = 'started'))"
            "  from procrastinate_events").fetchone()
    else:
        row = conn.execute(
            "select count(*) filter (where status = 'successful'),"
            "       extract(epoch from max(created) filter (where status = 'successful')"
            "                        - min(created) filter (where status = 'picked'))"
            "  from pgqueuer_log").fetchone()
    return (int(row[0] or 0), float(row[1] or 0)) if row else (0, 0.0)


def _ready(peer: Peer, conn: psycopg.Connection, procs: int) -> bool:
    if peer.name == "procrastinate":
        row = conn.execute("select count(*) from procrastinate_workers").fetchone()
    else:
        row = conn.execute("select count(*) from pg_stat_activity where datname = current_database()"
                           " and application_name = 'bench-peer-pgqueuer'").fetchone()
    return bool(row) and int(row[0]) >= procs


def _start_workers(ctx: Context, peer: Peer, drain: Drain, dsn: str, procs: int, tag: str) -> list[launch.Child]:
    children = []
    for i in range(procs):
        log = ctx.work_dir / f"{tag}-{i + 1}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(peer.worker(drain.args), cwd=ROOT, env=_peer_env(dsn), stdin=subprocess.DEVNULL,
                                       stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        children.append(launch.Child(f"{tag}-{i + 1}", "peer", process, log))
    return children


def _check(children: list[launch.Child]) -> None:
    for c in children:
        if not c.alive():
            raise RuntimeError(f"{c.name} exited with {c.returncode}:\n{c.tail()}")


@contextlib.contextmanager
def _workers(ctx: Context, peer: Peer, drain: Drain, dsn: str, procs: int, tag: str,
             conn: psycopg.Connection):
    """procs worker processes of the peer, started, registered and idle; stopped (SIGTERM) at exit."""
    children = _start_workers(ctx, peer, drain, dsn, procs, tag)
    try:
        launch.wait_for(lambda: (_check(children), _ready(peer, conn, procs))[1], timeout=60,
                        what=lambda: f"{procs} {peer.name} workers to start:\n{children[0].tail()}")
        time.sleep(1.0)  # their listeners follow the registration: let them settle, as for ours
        yield children
    finally:
        launch.stop_all(children, timeout=20)


def _drain_rep(ctx: Context, peer: Peer, drain: Drain, dsn: str, procs: int, rep: int) -> None:
    s, r = ctx.sizes, ctx.results
    n = s.drain_jobs
    key = f"peer.{peer.name}.drain.{drain.name}.p{procs}"
    with connect(dsn) as conn:
        _truncate(peer, conn)
        with _workers(ctx, peer, drain, dsn, procs, f"{peer.name}-{drain.name}-p{procs}-r{rep + 1}", conn) as children:
            server = ServerCpu(conn)
            cpu0 = sum(proc_cpu_s(c.pid) for c in children)
            win = CpuWindow(server).start()
            asyncio.run(_enqueue_all(peer, dsn, n))
            t0 = time.perf_counter()
            deadline = time.monotonic() + s.timeout_s
            while _remaining(peer, conn) > 0:
                _check(children)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{key}: the drain did not finish in {s.timeout_s:.0f}s")
                time.sleep(0.05)
            wall = time.perf_counter() - t0
            cpu = win.stop()
            worker_cpu = sum(proc_cpu_s(c.pid) for c in children) - cpu0
        done, span = _db_span(peer, conn)
    if done != n:
        r.errors.append(f"{key} rep {rep + 1}: {done} jobs succeeded of {n}")
    rate = done / span if span > 0 else float("nan")
    r.add(key, "peers", f"{_name(peer)}, worker, {drain.label}, {procs} proc", "jobs/s", rate,
          baseline=f"raw.{drain.ceiling}.p{procs}")
    r.profiles.setdefault(key, []).append({
        "jobs": n, "db_span_s": span, "poll_wall_s": wall, "poll_jobs_per_s": n / wall if wall > 0 else None,
        "worker_cpu_ms_per_job": worker_cpu * 1000 / n,
        "server_cpu_ms_per_job": cpu.get("server_cpu_s", float("nan")) * 1000 / n,
        "machine_busy_pct": 100 * cpu["machine_busy_s"] / cpu["machine_capacity_s"] if cpu["machine_capacity_s"] else None,
    })
    ctx.log(f"{key} rep {rep + 1}: {done} jobs in {span:.2f}s (db) = {rate:,.0f}/s; polled done after {wall:.2f}s "
            f"= {n / wall:,.0f}/s; worker CPU {worker_cpu * 1000 / n:.3f} ms/job")


def _truncate(peer: Peer, conn: psycopg.Connection) -> None:
    conn.execute(sql.SQL("truncate {} restart identity cascade").format(
        sql.SQL(", ").join(sql.Identifier(t) for t in peer.tables)))


def _name(peer: Peer) -> str:
    return f"{peer.name} {version(peer.dist) or '?'}"


# ----------------------------------------------------------------------------- enqueue to start


async def _steady_defers(peer: Peer, dsn: str, n: int, rate: float) -> None:
    """n jobs, one per call through the peer's single enqueue, on a steady schedule of rate per second."""
    async def paced(enqueue: Callable[[int], Any]) -> None:
        t0 = time.perf_counter()
        for i in range(n):
            wait = t0 + i / rate - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            await enqueue(i)

    if peer.name == "procrastinate":
        app = make_procrastinate_app(dsn)
        async with app.open_async():
            task = app.tasks[TASK]
            await paced(lambda i: task.defer_async(n=i))
    else:
        import asyncpg
        from pgqueuer import AsyncpgDriver, Queries

        conn = await asyncpg.connect(asyncpg_dsn(dsn))
        try:
            queries = Queries(AsyncpgDriver(conn))
            await paced(lambda i: queries.enqueue(TASK, json.dumps({"n": i}).encode()))
        finally:
            await conn.close()


def _start_delays_ms(peer: Peer, conn: psycopg.Connection) -> list[float]:
    """Per job: its start (procrastinate 'started', pgqueuer 'picked') minus its enqueue, from the
    peer's own log (transaction timestamps, as ours: job_attempts.started_at - jobs.created_at)."""
    if peer.name == "procrastinate":
        query = ("select extract(epoch from s.at - d.at) * 1000.0 from procrastinate_events d"
                 "  join procrastinate_events s on s.job_id = d.job_id and s.type = 'started'"
                 " where d.type = 'deferred'")
    else:
        query = ("select extract(epoch from p.created - q.created) * 1000.0 from pgqueuer_log q"
                 "  join pgqueuer_log p on p.job_id = q.job_id and p.status = 'picked'"
                 " where q.status = 'queued'")
    return [float(v) for (v,) in conn.execute(query)]


def _latency_rep(ctx: Context, peer: Peer, dsn: str, rep: int) -> None:
    """One worker at the peer's defaults (LISTEN on in both), jobs enqueued one at a time at the
    latency section's rate: enqueue to start, p50 and p99, beside ours (worker.latency.listen.p1)."""
    s = ctx.sizes
    n = max(1, int(s.latency_rate * s.latency_seconds))
    key = f"peer.{peer.name}.latency.p1"
    with connect(dsn) as conn:
        _truncate(peer, conn)
        with _workers(ctx, peer, peer.drains[0], dsn, 1, f"{peer.name}-latency-r{rep + 1}", conn) as children:
            asyncio.run(_steady_defers(peer, dsn, n, s.latency_rate))
            deadline = time.monotonic() + 30
            while _remaining(peer, conn) > 0 and time.monotonic() < deadline:
                _check(children)
                time.sleep(0.1)
        values = _start_delays_ms(peer, conn)
        _truncate(peer, conn)
    if len(values) != n:
        ctx.results.errors.append(f"{key} rep {rep + 1}: {len(values)} of {n} jobs started")
    label = f"{_name(peer)}, worker, {peer.drains[0].label}, LISTEN, 1 proc, enqueue to start"
    for p, base in ((50, "raw.latency.p50"), (99, "raw.latency.p99")):
        ctx.results.add(f"{key}.p{p}", "peers", f"{label}, p{p}", "ms", percentile(values, p), baseline=base,
                        better="lower")
    ctx.log(f"{key} rep {rep + 1}: p50 {percentile(values, 50):.2f} ms, p99 {percentile(values, 99):.2f} ms")


# ----------------------------------------------------------------------------- the section


@contextlib.contextmanager
def peer_database(ctx: Context, peer: Peer):
    name = f"pgqw_bench_peer_{peer.name}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ctx.admin_dsn, autocommit=True) as conn:
        new_database(conn, name)
    try:
        yield make_conninfo(ctx.admin_dsn, dbname=name)
    finally:
        with psycopg.connect(ctx.admin_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))


def _enqueue_rep(ctx: Context, peer: Peer, dsn: str, procs: int) -> None:
    s, r = ctx.sizes, ctx.results
    client = ENQUEUE_CLIENTS[peer.name]
    with connect(dsn) as conn:
        for mode, total, batch, api in (("single", s.enqueue_single_jobs, 1, peer.enqueue_api[0]),
                                        ("batch", s.enqueue_batch_jobs, s.batch, peer.enqueue_api[1])):
            _truncate(peer, conn)
            found = run_clients(client, [(dsn, k, batch) for k in split(total, procs)], timeout_s=s.timeout_s)
            rate, n, secs = throughput(found)
            what = "1 per call" if batch == 1 else f"{batch} per call"
            r.add(f"peer.{peer.name}.enqueue.{mode}", "peers", f"{_name(peer)}, {api}, {what}, {procs} proc",
                  "jobs/s", rate, baseline=f"raw.insert.{mode}")
            ctx.log(f"peer.{peer.name}.enqueue.{mode}: {n} jobs in {secs:.2f}s = {rate:,.0f}/s")
        _truncate(peer, conn)


def _raw_inserts(ctx: Context, procs: int) -> None:
    """The raw insert ceilings, when the enqueue section did not run (--only peers)."""
    s = ctx.sizes
    with connect(ctx.dsn) as conn:
        raw.create(conn)
        for mode, total, batch in (("single", s.enqueue_single_jobs, 1), ("batch", s.enqueue_batch_jobs, s.batch)):
            raw.reset(conn)
            found = run_clients(raw.insert_client, [(ctx.dsn, k, batch) for k in split(total, procs)],
                                timeout_s=s.timeout_s)
            what = "1 per transaction" if batch == 1 else f"{batch} per statement"
            ctx.results.add(f"raw.insert.{mode}", "enqueue", f"raw insert, {what}, {procs} proc", "jobs/s",
                            throughput(found)[0], baseline=f"raw.insert.{mode}")
        raw.reset(conn)


def settings_facts(procs: int, sizes: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for peer in (PROCRASTINATE, PGQUEUER):
        out[peer.name] = {
            "version": version(peer.dist),
            "install": " ".join(["procrastinate", "--app", APP_PATH, "schema", "--apply"] if peer.name == "procrastinate"
                                else ["pgq", "install"]),
            "workers": {d.label: f"{procs} × `{' '.join(_display(peer, d))}`" for d in peer.drains},
            "enqueue": list(peer.enqueue_api),
        }
    out["procrastinate"]["driver"] = f"psycopg {version('psycopg')}, PsycopgConnector"
    out["pgqueuer"]["driver"] = f"asyncpg {version('asyncpg')}, AsyncpgDriver"
    out["pgqueuer"]["note"] = ("each worker runs `python -m bench.peers pgqueuer-worker [--batch-size N]`: "
                               "`pgqueuer.run(\"bench.peers:pgqueuer_factory\", batch_size=N)` on the CLI's event loop "
                               "(uvloop) and logging, which is what `pgq run` does; pgqueuer 1.6.0's `pgq run` itself "
                               "exits at start with typer 0.29")
    if sizes is not None:
        out["_sizes"] = (
            f"enqueue {sizes.enqueue_single_jobs:,} jobs one per call and {sizes.enqueue_batch_jobs:,} in calls of "
            f"{sizes.batch}, from {procs} client processes; drain {sizes.drain_jobs:,} jobs by {procs} worker "
            "processes, started and idle first, the jobs then enqueued in one transaction through the batch API; "
            f"latency: 1 worker at its defaults, {int(sizes.latency_rate * sizes.latency_seconds):,} jobs one per "
            f"call at {sizes.latency_rate:g} jobs/s; {sizes.reps} repetition(s) of each")
    return out


def _display(peer: Peer, drain: Drain) -> list[str]:
    if peer.name == "procrastinate":
        return ["procrastinate", "--app", APP_PATH, "worker", *drain.args]
    return ["pgq", "run", FACTORY_PATH, *drain.args]


def pgqueuer_worker(argv: list[str]) -> int:
    """What `pgq run bench.peers:pgqueuer_factory [--batch-size N]` does, through pgqueuer's public
    `pgqueuer.run` on the CLI's own event loop (uvloop) and logging: pgqueuer 1.6.0's `pgq run`
    exits at start with typer 0.29 (its --log-level parser hands a str where an enum is expected)."""
    import argparse

    import pgqueuer
    from pgqueuer.adapters.cli.cli import asyncio_run
    from pgqueuer.core import logconfig

    p = argparse.ArgumentParser(prog="python -m bench.peers pgqueuer-worker")
    p.add_argument("--batch-size", type=int, default=10)
    args = p.parse_args(argv)
    logconfig.setup_fancy_logger(logconfig.LogLevel.INFO)
    asyncio_run(pgqueuer.run(FACTORY_PATH, batch_size=args.batch_size))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["pgqueuer-worker"]:
        sys.exit(pgqueuer_worker(sys.argv[2:]))
    sys.exit("usage: python -m bench.peers pgqueuer-worker [--batch-size N]")


def section_peers(ctx: Context, peers: tuple[str, ...] = PEERS) -> None:
    s = ctx.sizes
    procs = max(s.procs)
    missing = [BY_NAME[p].dist for p in peers if version(BY_NAME[p].dist) is None]
    if missing:
        raise RuntimeError(f"not installed: {', '.join(missing)} (pip install -e '.[bench]')")
    ctx.results.facts["peers"] = {k: v for k, v in settings_facts(procs, s).items() if k in peers or k == "_sizes"}
    if "raw.insert.single" not in ctx.results.rows:
        _raw_inserts(ctx, procs)
    for name in peers:
        peer = BY_NAME[name]
        with peer_database(ctx, peer) as dsn:
            ctx.log(f"peers: {_name(peer)}: {' '.join(peer.install()[2:])}")
            _run_cmd(peer.install(), dsn)
            for rep in range(s.reps):
                _enqueue_rep(ctx, peer, dsn, procs)
                for drain in peer.drains:
                    _drain_rep(ctx, peer, drain, dsn, procs, rep)
                _latency_rep(ctx, peer, dsn, rep)


# ----------------------------------------------------------------------------- report


def comparisons(r: Any) -> list[tuple[str, str, str]]:
    """(peer row, our row, what) pairs measured in this run: our figure ÷ the peer's."""
    out = []
    for key in r.rows:
        if not key.startswith("peer."):
            continue
        _, name, what, *rest = key.split(".")
        if what == "enqueue":
            ours = "fn.enqueue_job" if rest[0] == "single" else "fn.enqueue_jobs"
        elif what == "latency":
            ours = f"worker.latency.listen.{rest[0]}.{rest[1]}"
        else:
            peer = BY_NAME.get(name)
            drain = next((d for d in peer.drains if d.name == rest[0]), None) if peer else None
            ours = f"{drain.ours}.{rest[1]}" if drain else ""
        if ours in r.rows:
            out.append((key, ours, r.rows[key].label))
    return out


def table_lines(r: Any) -> list[str]:
    pairs = comparisons(r)
    if not pairs:
        return []
    lines = ["", "Ours ÷ peer (same run):"]
    for key, ours, _ in pairs:
        x = r.ratio(ours, key)
        lines.append(f"  {r.rows[ours].label[:50]:<50} ÷ {r.rows[key].label[:60]:<60} "
                     f"{(f'{x:.2f}' if x is not None else '–'):>6}")
    return lines


def markdown_lines(r: Any) -> list[str]:
    from .report import fmt

    out: list[str] = []
    pairs = comparisons(r)
    if pairs:
        out += ["", "Ours beside each peer (our median ÷ the peer's: in jobs/s above 1 we are faster, in ms below "
                "1 we are):", "",
                "| ours | median | peer | median | ours ÷ peer |", "|---|---:|---|---:|---:|"]
        for key, ours, _ in pairs:
            x = r.ratio(ours, key)
            unit = r.rows[key].unit
            out.append(f"| {r.rows[ours].label} | {fmt(r.rows[ours].median, unit)} {unit} | {r.rows[key].label} "
                       f"| {fmt(r.rows[key].median, unit)} {unit} | {f'{x:.2f}' if x is not None else '–'} |")
    facts = r.facts.get("peers") or {}
    if facts:
        out += ["", "How the peers ran (each in a fresh database on the same server, `synchronous_commit` as above, "
                "no-op async handlers; drain figures from the peer's own event log: jobs ÷ (last success − first "
                "start), as ours):", ""]
        for name, f in facts.items():
            if name == "_sizes":
                continue
            workers = "; ".join(f"{k}: {v}" for k, v in f.get("workers", {}).items())
            out.append(f"- **{name} {f.get('version') or '?'}** ({f.get('driver', '')}): schema `{f.get('install')}`; "
                       f"workers {workers}; enqueue `{'`, `'.join(f.get('enqueue', []))}`"
                       + (f". Note: {f['note']}" if f.get("note") else ""))
        if facts.get("_sizes"):
            out.append(f"- Sizes: {facts['_sizes']}")
    prof = [k for k in r.profiles if k.startswith("peer.") and r.profiles[k]]
    if prof:
        out += ["", "| peer drain | db span s | polled done s | worker CPU ms/job | server CPU ms/job | machine busy |",
                "|---|---:|---:|---:|---:|---:|"]
        for k in prof:
            p = sorted(r.profiles[k], key=lambda x: x["db_span_s"])[len(r.profiles[k]) // 2]
            out.append(f"| {r.rows[k].label if k in r.rows else k} | {p['db_span_s']:.2f} | {p['poll_wall_s']:.2f} "
                       f"| {p['worker_cpu_ms_per_job']:.3f} | {p['server_cpu_ms_per_job']:.3f} "
                       f"| {p['machine_busy_pct'] or 0:.0f} % |")
    return out
