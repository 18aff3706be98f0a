"""Peers on message brokers: Celery on Redis and on RabbitMQ, and Dramatiq on Redis.

These are the systems users compare a PostgreSQL queue with. Each drains the drain section's number
of no-op jobs with the run's largest process count, at its usual production settings:

- celery-redis, celery-rabbitmq: Celery 5, `celery worker --pool prefork --concurrency P` (P child
  processes run tasks, the parent reads the broker), `task_acks_late=True` (a job is acknowledged
  after it ran), `worker_prefetch_multiplier=1`, no result backend (`task_ignore_result=True`).
  On RabbitMQ its defaults: a durable classic queue and persistent messages (delivery_mode 2).
- dramatiq-redis: `dramatiq --processes P` at its defaults (8 threads a process; a message is
  acknowledged after it ran), no result backend.

One repetition: every job enqueued first, one per call through the system's producer API (Celery
`Task.delay`, Dramatiq `Actor.send`) from this process, then the workers started. The figure is
jobs ÷ (last job's end − first job's start), as the other peers' and ours (the first start to the
last finish); a broker keeps no log of events, so the no-op task itself records, in each worker
process, its first and latest run (wall clock and the process's CPU clock) with a job count, one
pwrite of a small record to a file of that process (STATS_ENV). Worker CPU per job is from those
clocks (each task process from its first to its last job) plus /proc for the process that
started them (Celery's parent, Dramatiq's supervisor) over the same window; the polled wall time,
from the workers' start until every job ran, is kept beside it with the ramp (how long after the
first process's first job the last process ran its first).

Every queue, exchange and key is named pgqw-bench-*, and is removed before and after each drain.
A broker that does not answer, or a missing package, skips that system with one line in the report
(results.facts["brokers"]["skipped"]), never fails the run. Nothing here imports Celery, Dramatiq,
redis or kombu at module level: the worker processes load `bench.brokers:celery_app` and
`bench.brokers:dramatiq_broker` through the module's __getattr__, configured from the environment.
"""
from __future__ import annotations

import importlib.metadata
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from pgqw import launch

from .common import ROOT, Context, proc_cpu_s

# Where the brokers are: settings with defaults (this machine's services), not fixed in the code.
REDIS_URL = os.environ.get("PGQW_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
AMQP_URL = os.environ.get("PGQW_BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")

# What the worker processes read.
URL_ENV = "PGQW_BENCH_BROKER_URL"
QUEUE_ENV = "PGQW_BENCH_BROKER_QUEUE"
STATS_ENV = "PGQW_BENCH_BROKER_STATS"

PREFIX = "pgqw-bench"
TASK = "noop"
CELERY_APP_PATH = "bench.brokers:celery_app"
DRAMATIQ_BROKER_PATH = "bench.brokers:dramatiq_broker"


def version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# ----------------------------------------------------------------------------- what each task records

# first job's wall time, latest job's wall time, the process's CPU clock at each, jobs run
_RECORD = struct.Struct("=ddddq")
_lock = threading.Lock()
_state: list[Any] | None = None   # [pid, fd, first wall, first cpu, count]


def record_job() -> None:
    """The no-op task's body: one small pwrite to this process's record (Dramatiq runs tasks on
    threads, hence the lock; a forked Celery child opens its own file)."""
    global _state
    with _lock:
        now, cpu = time.time(), time.process_time()
        st = _state
        if st is None or st[0] != os.getpid():
            path = Path(os.environ[STATS_ENV]) / f"{os.getpid()}.rec"
            st = _state = [os.getpid(), os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), now, cpu, 0]
        st[4] += 1
        os.pwrite(st[1], _RECORD.pack(st[2], now, st[3], cpu, st[4]), 0)


@dataclass(frozen=True)
class Record:
    first: float
    last: float
    cpu_first: float
    cpu_last: float
    count: int


def read_records(folder: Path) -> list[Record]:
    out = []
    for path in folder.glob("*.rec"):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if len(data) >= _RECORD.size:
            out.append(Record(*_RECORD.unpack(data[:_RECORD.size])))
    return out


# ----------------------------------------------------------------------------- what the workers load


def make_celery_app(url: str, queue: str) -> Any:
    """A Celery app with one no-op task at the production settings named in the module's docstring.
    The control and event exchanges carry our prefix, so nothing of another Celery user is touched."""
    from celery import Celery

    app = Celery("pgqw_bench", broker=url, set_as_current=False)
    app.conf.update(
        task_acks_late=True, worker_prefetch_multiplier=1, task_ignore_result=True, result_backend=None,
        task_default_queue=queue, task_default_exchange=queue, task_default_routing_key=queue,
        control_exchange=PREFIX, event_exchange=f"{PREFIX}-ev",
        broker_connection_retry_on_startup=True,
    )

    @app.task(name=TASK, shared=False)
    def noop(n: int | None = None) -> None:
        record_job()

    return app


def make_dramatiq_broker(url: str, queue: str) -> Any:
    """A Dramatiq Redis broker (its keys under our prefix) with one no-op actor, at its defaults."""
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    broker = RedisBroker(url=url, namespace=PREFIX)
    dramatiq.set_broker(broker)

    @dramatiq.actor(actor_name=TASK, queue_name=queue, broker=broker)
    def noop(n: int | None = None) -> None:
        record_job()

    return broker


_loaded: dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    """`celery -A bench.brokers:celery_app` and `dramatiq bench.brokers:dramatiq_broker` load their
    app through here, so importing this module imports neither."""
    makers: dict[str, Callable[[str, str], Any]] = {"celery_app": make_celery_app,
                                                     "dramatiq_broker": make_dramatiq_broker}
    if name in makers:
        if name not in _loaded:
            _loaded[name] = makers[name](os.environ.get(URL_ENV, ""), os.environ.get(QUEUE_ENV, ""))
        return _loaded[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ----------------------------------------------------------------------------- the brokers


def _host_port(url: str, default_port: int) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname or '127.0.0.1'}:{parts.port or default_port}"


def _redis(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url, socket_connect_timeout=1.0, socket_timeout=5.0)


def redis_unavailable(url: str) -> str | None:
    try:
        _redis(url).ping()
    except Exception:  # noqa: BLE001 - any failure to answer is "does not answer"
        return f"Redis does not answer on {_host_port(url, 6379)}"
    return None


def redis_durability(url: str) -> str:
    """What a Redis restart keeps, from its own settings (CONFIG GET appendonly, save, appendfsync)."""
    try:
        client = _redis(url)
        config = {**client.config_get("appendonly"), **client.config_get("save"),
                  **client.config_get("appendfsync")}
        server = client.info("server").get("redis_version", "?")
    except Exception as exc:  # noqa: BLE001 - CONFIG can be renamed away
        return f"Redis: persistence unknown (CONFIG GET failed: {exc})"
    aof, save = config.get("appendonly", "?"), config.get("save", "?")
    said = f"Redis {server}, appendonly {aof}, save \"{save}\""
    if aof == "no" and not save:
        return f"{said}: no persistence, a restart loses every queued job"
    if aof == "yes":
        return f"{said}, appendfsync {config.get('appendfsync', '?')}: a crash loses what was not yet fsynced"
    return f"{said}: snapshots only, a restart loses the jobs queued since the last snapshot"


def _redis_flush(url: str) -> None:
    client = _redis(url)
    keys = list(client.scan_iter(match=f"*{PREFIX}*", count=1000))
    if keys:
        client.delete(*keys)
    # kombu's Redis transport keeps its fanout bindings' expiry times in one shared sorted set.
    ours = [m for m, _ in client.zscan_iter("_kombu.binding_deadlines", match=f"*{PREFIX}*")]
    if ours:
        client.zrem("_kombu.binding_deadlines", *ours)


def _amqp(url: str) -> Any:
    from kombu import Connection

    return Connection(url, connect_timeout=2.0)


def amqp_unavailable(url: str) -> str | None:
    try:
        with _amqp(url) as conn:
            conn.ensure_connection(max_retries=1, timeout=2.0)
    except Exception:  # noqa: BLE001
        return f"RabbitMQ does not answer on {_host_port(url, 5672)}"
    return None


def _amqp_flush(url: str, queue: str) -> None:
    with _amqp(url) as conn:
        channel = conn.channel()
        channel.queue_delete(queue)
        for exchange in (queue, f"{PREFIX}.pidbox", f"{PREFIX}-ev", f"reply.{PREFIX}.pidbox"):
            channel.exchange_delete(exchange)


def amqp_durability(url: str, queue: str) -> str:
    """Checks the queue is durable by declaring it again as durable (RabbitMQ refuses a declare whose
    flags differ from the queue's), and says what that keeps."""
    try:
        with _amqp(url) as conn:
            channel = conn.channel()
            channel.queue_declare(queue, durable=True, auto_delete=False)
            server = conn.connection.server_properties.get("version", "?")
            if isinstance(server, bytes):
                server = server.decode()
    except Exception as exc:  # noqa: BLE001
        return f"RabbitMQ: the queue is not durable as declared ({exc})"
    return (f"RabbitMQ {server}, durable classic queue, persistent messages (delivery_mode 2): queued jobs "
            "survive a broker restart; without publisher confirms (Celery's default) a publish returns before "
            "RabbitMQ has written it to disk")


@dataclass(frozen=True)
class System:
    name: str                       # celery-redis, celery-rabbitmq, dramatiq-redis
    dist: str                       # the package
    broker: str                     # "redis" or "amqp"
    url: Callable[[], str]
    queue: str
    settings: str                   # what the row says
    ours: str                       # our row it is shown beside (prefix, + .pN)

    def unavailable(self) -> str | None:
        needed = [self.dist, "redis"] if self.broker == "redis" else [self.dist]
        missing = [d for d in needed if version(d) is None]
        if missing:
            return f"{', '.join(missing)} not installed (pip install -e '.[bench]')"
        return redis_unavailable(self.url()) if self.broker == "redis" else amqp_unavailable(self.url())

    def flush(self) -> None:
        if self.broker == "redis":
            _redis_flush(self.url())
        else:
            _amqp_flush(self.url(), self.queue)

    def durability(self) -> str:
        return redis_durability(self.url()) if self.broker == "redis" else amqp_durability(self.url(), self.queue)

    def worker_cmd(self, procs: int) -> list[str]:
        if self.dist == "celery":
            return [sys.executable, "-m", "celery", "-A", CELERY_APP_PATH, "worker", "--pool", "prefork",
                    "--concurrency", str(procs), "--queues", self.queue, "--loglevel", "INFO",
                    "--hostname", f"{self.queue}@%h"]
        return [sys.executable, "-m", "dramatiq", DRAMATIQ_BROKER_PATH, "--processes", str(procs),
                "--queues", self.queue]

    def display(self, procs: int) -> str:
        return " ".join(["celery" if self.dist == "celery" else "dramatiq", *self.worker_cmd(procs)[3:]])

    def depth(self) -> int:
        """Jobs waiting in the queue now."""
        if self.dist == "celery" and self.broker == "redis":
            return int(_redis(self.url()).llen(self.queue))
        if self.broker == "redis":
            return int(_redis(self.url()).hlen(f"{PREFIX}:{self.queue}.msgs"))
        from amqp.exceptions import NotFound

        with _amqp(self.url()) as conn:
            try:
                return int(conn.channel().queue_declare(self.queue, passive=True).message_count)
            except NotFound:  # flushed, or never declared
                return 0


CELERY_SETTINGS = "prefork, acks late, prefetch 1, no result backend"
SYSTEMS = (
    System("celery-redis", "celery", "redis", lambda: REDIS_URL, f"{PREFIX}-celery", CELERY_SETTINGS, "worker.c1.single"),
    System("celery-rabbitmq", "celery", "amqp", lambda: AMQP_URL, f"{PREFIX}-celery", CELERY_SETTINGS,
           "worker.c1.single"),
    System("dramatiq-redis", "dramatiq", "redis", lambda: REDIS_URL, f"{PREFIX}-dramatiq",
           "defaults (8 threads a process), ack after the job, no result backend", "worker.c10.batch"),
)
BY_NAME = {s.name: s for s in SYSTEMS}


# ----------------------------------------------------------------------------- one drain


@dataclass
class Drain:
    jobs: int
    done: int                 # jobs the tasks counted
    span_s: float             # last job's end − first job's start
    wall_s: float             # workers started → every job ran (polled)
    ramp_s: float             # last process's first job − first process's first job
    worker_cpu_s: float
    enqueue_s: float
    depth_before: int         # jobs in the queue when the workers started
    executors: int            # processes that ran at least one job

    @property
    def rate(self) -> float:
        return self.done / self.span_s if self.span_s > 0 else float("nan")


def _enqueue(system: System, n: int) -> float:
    t0 = time.perf_counter()
    if system.dist == "celery":
        app = make_celery_app(system.url(), system.queue)
        task = app.tasks[TASK]
        # The queue, its exchange and binding declared afresh: the flush before removed them, and a
        # producer that remembers having declared them would publish into an exchange bound to nothing.
        with app.connection_for_write() as conn:
            app.amqp.queues[system.queue](conn.default_channel).declare()
        try:
            for i in range(n):
                task.delay(n=i)
        finally:
            app.close()
    else:
        broker = make_dramatiq_broker(system.url(), system.queue)
        actor = broker.get_actor(TASK)
        try:
            for i in range(n):
                actor.send(n=i)
        finally:
            broker.close()
    return time.perf_counter() - t0


def _env(system: System, stats: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "DRAMATIQ_"))}
    env.update({URL_ENV: system.url(), QUEUE_ENV: system.queue, STATS_ENV: str(stats), "PYTHONUNBUFFERED": "1"})
    return env


def stop_workers(child: launch.Child) -> None:
    """A graceful stop (SIGTERM), then SIGKILL to the whole session it leads (its own process group),
    so no prefork child or Dramatiq worker process outlives it."""
    try:
        launch.stop_all([child], timeout=20)
    finally:
        stop_workers_by_pid(child.pid)


def stop_workers_by_pid(pid: int) -> None:
    """SIGKILL to the process group a worker command led (it was started in a session of its own)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def drain(system: System, n: int, procs: int, work_dir: Path, *, timeout_s: float = 600.0, tag: str = "") -> Drain:
    """Enqueue n no-op jobs, start the workers, wait until all ran; the broker's queue is flushed
    before and after, and the workers are stopped in every case."""
    stats = work_dir / f"{system.name}{tag}-stats"
    stats.mkdir(parents=True, exist_ok=True)
    for old in stats.glob("*.rec"):
        old.unlink()
    system.flush()
    child: launch.Child | None = None
    try:
        enqueue_s = _enqueue(system, n)
        depth = system.depth()
        if depth != n:
            raise RuntimeError(f"{system.name}: {depth} of {n} enqueued jobs are in the queue")
        log = work_dir / f"{system.name}{tag}.log"
        t0 = time.perf_counter()
        with open(log, "wb") as out:
            process = subprocess.Popen(system.worker_cmd(procs), cwd=ROOT, env=_env(system, stats),
                                       stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        child = launch.Child(f"{system.name}{tag}", "peer", process, log)
        deadline = time.monotonic() + timeout_s
        root_cpu0: float | None = None
        records: list[Record] = []
        while True:
            records = read_records(stats)
            if root_cpu0 is None and records:
                root_cpu0 = proc_cpu_s(child.pid)
            if sum(r.count for r in records) >= n:
                break
            if not child.alive():
                raise RuntimeError(f"{system.name} workers exited with {child.returncode}:\n{child.tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{system.name}: {sum(r.count for r in records)} of {n} jobs ran in {timeout_s:.0f}s:\n"
                                   f"{child.tail()}")
            time.sleep(0.01 if root_cpu0 is None else 0.05)
        wall = time.perf_counter() - t0
        root_cpu = proc_cpu_s(child.pid) - (root_cpu0 or 0.0)
    finally:
        if child is not None:
            stop_workers(child)
        system.flush()
    records = read_records(stats)  # the final counts, after the stop
    firsts = [r.first for r in records]
    return Drain(jobs=n, done=sum(r.count for r in records), span_s=max(r.last for r in records) - min(firsts),
                 wall_s=wall, ramp_s=max(firsts) - min(firsts),
                 worker_cpu_s=root_cpu + sum(r.cpu_last - r.cpu_first for r in records),
                 enqueue_s=enqueue_s, depth_before=depth, executors=len(records))


# ----------------------------------------------------------------------------- the section


def _label(system: System, procs: int) -> str:
    return f"{system.dist} {version(system.dist) or '?'}, {system.name.split('-', 1)[1]}, {system.settings}, {procs} proc"


def postgres_durability(ctx: Context) -> str:
    settings = ctx.results.facts.get("server", {}).get("settings", {})
    sc, fs = settings.get("synchronous_commit", "?"), settings.get("fsync", "?")
    flushed = sc == "on" and fs == "on"
    return (f"PostgreSQL, synchronous_commit {sc}, fsync {fs}: "
            + ("every commit is flushed to the WAL on disk before it returns" if flushed
               else "commits are not all flushed before they return"))


def section_brokers(ctx: Context, names: tuple[str, ...] = tuple(BY_NAME)) -> None:
    s, r = ctx.sizes, ctx.results
    procs = max(s.procs)
    facts: dict[str, Any] = {"skipped": [], "systems": {}, "postgres": postgres_durability(ctx),
                             "sizes": f"{s.drain_jobs:,} no-op jobs enqueued one per call from 1 process, then "
                                      f"{procs} worker processes started; {s.reps} repetition(s)"}
    r.facts["brokers"] = facts
    for name in names:
        system = BY_NAME[name]
        why = system.unavailable()
        if why:
            facts["skipped"].append(f"{name}: skipped, {why}")
            ctx.log(f"brokers: {name}: skipped, {why}")
            continue
        key = f"broker.{name}.drain.p{procs}"
        facts["systems"][name] = {"version": version(system.dist), "workers": f"`{system.display(procs)}`",
                                  "settings": system.settings, "durability": "", "ours": f"{system.ours}.p{procs}"}
        for rep in range(s.reps):
            try:
                d = drain(system, s.drain_jobs, procs, ctx.work_dir, timeout_s=s.timeout_s, tag=f"-r{rep + 1}")
            except Exception as exc:  # noqa: BLE001 - one system's failure is reported, the others still run
                r.errors.append(f"{key} rep {rep + 1}: {type(exc).__name__}: {exc}".splitlines()[0])
                ctx.log(f"{key} rep {rep + 1} failed: {exc}")
                break
            if rep == 0:
                # After a drain, while nothing is queued: what a restart of the broker would keep.
                facts["systems"][name]["durability"] = system.durability()
                system.flush()
            if d.done != d.jobs or d.depth_before != d.jobs:
                r.errors.append(f"{key} rep {rep + 1}: {d.depth_before} queued and {d.done} ran of {d.jobs}")
            r.add(key, "brokers", _label(system, procs), "jobs/s", d.rate, baseline=f"raw.single.p{procs}")
            r.add(f"broker.{name}.enqueue", "brokers",
                  f"{system.dist} {version(system.dist) or '?'}, {system.name.split('-', 1)[1]}, "
                  f"{'Task.delay' if system.dist == 'celery' else 'Actor.send'}, 1 per call, 1 proc",
                  "jobs/s", d.jobs / d.enqueue_s if d.enqueue_s > 0 else float("nan"))
            r.profiles.setdefault(key, []).append({
                "jobs": d.jobs, "db_span_s": d.span_s, "poll_wall_s": d.wall_s, "ramp_s": d.ramp_s,
                "worker_cpu_ms_per_job": d.worker_cpu_s * 1000 / d.jobs, "executors": d.executors,
                "enqueue_s": d.enqueue_s})
            ctx.log(f"{key} rep {rep + 1}: {d.done} jobs in {d.span_s:.2f}s = {d.rate:,.0f}/s (ramp {d.ramp_s:.2f}s, "
                    f"polled {d.wall_s:.2f}s from the workers' start); worker CPU "
                    f"{d.worker_cpu_s * 1000 / d.jobs:.3f} ms/job; enqueued in {d.enqueue_s:.2f}s")


# ----------------------------------------------------------------------------- report


def table_lines(r: Any) -> list[str]:
    facts = r.facts.get("brokers") or {}
    if not facts:
        return []
    lines = ["", "Peers on brokers, durability in this run:"]
    for name, f in facts.get("systems", {}).items():
        lines.append(f"  {name}: {f.get('durability')}")
    lines.append(f"  ours: {facts.get('postgres')}")
    lines += [f"  {line}" for line in facts.get("skipped", [])]
    return lines


def markdown_lines(r: Any) -> list[str]:
    from .report import fmt

    facts = r.facts.get("brokers") or {}
    if not facts:
        return []
    out: list[str] = []
    systems = facts.get("systems", {})
    if systems:
        out += ["", "| system | drain jobs/s (median) | worker CPU ms/job | polled s | ramp s | durability |",
                "|---|---:|---:|---:|---:|---|"]
        for name, f in systems.items():
            key = next((k for k in r.rows if k.startswith(f"broker.{name}.drain.")), "")
            prof = sorted(r.profiles.get(key, []), key=lambda p: p["db_span_s"])
            p = prof[len(prof) // 2] if prof else {}
            row = r.rows.get(key)
            out.append(f"| {row.label if row else name} | {fmt(row.median) if row else '–'} "
                       f"| {p.get('worker_cpu_ms_per_job', float('nan')):.3f} | {p.get('poll_wall_s', float('nan')):.2f} "
                       f"| {p.get('ramp_s', float('nan')):.2f} | {f.get('durability')} |")
        for key in dict.fromkeys(f.get("ours", "") for f in systems.values()):
            ours = r.rows.get(key)
            if ours:
                out.append(f"| {ours.label} (ours, same run) | {fmt(ours.median)} | | | | {facts.get('postgres')} |")
        out += ["", "Workers: " + "; ".join(f"{name} {f.get('version') or '?'}: {f.get('workers')}"
                                           for name, f in systems.items()) + f". {facts.get('sizes', '')}."]
    out += [f"- {line}" for line in facts.get("skipped", [])]
    return out
