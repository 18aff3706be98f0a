"""A soak with every feature on at once: the scenario behind tests/acceptance/test_soak_everything.py.

One run (run_soak): a server of its own (tests.lab.cluster), `pgqw migrate --tasks` this module, and
three real `pgqw worker` processes (this module's `soak_work` task) on three queues: `default`,
`limited` (set_queue_limit 2) and `pausable`. While a feeder enqueues a steady stream (most jobs
succeed, some fail once then succeed, some fail until an operator's retry_dead gives them one more
attempt), an operator thread, every second or so:

  cancels     a pending and a processing job, and reads the server's clock once the cancel committed
  retries     the dead jobs (retry_dead, one more attempt)
  pauses      `pausable` for a while, then resumes it (the commit times of both kept)
  prunes      finished jobs (succeeded, cancelled) with age 0, in a REPEATABLE READ transaction that first
              reads which jobs the prune can see, so the jobs that vanish are known
and the run itself kills a worker (SIGKILL) every KILL_EVERY_S and starts a new one, and restarts the
server twice (immediate, then fast). A schedule `* * * * *` (catch_up all) has its slots_after moved
back by hand, at the start and again after the first restart, so the workers' schedulers enqueue the
missed slots while they race. A sampler thread counts `limited`'s processing jobs every 100 ms.

After the stream the queue is drained and the workers stopped; the checks (RunResult.figures):
nothing accepted is lost (every enqueued id is there, or among the pruned), nothing is left unfinished,
no job succeeded twice or had overlapping attempts, no attempt started after its job's cancel committed,
no attempt started in `pausable` while it was paused, `limited` never had more than 2 processing, and each
schedule slot has exactly one job (pruned ones counted).
"""
from __future__ import annotations

import random
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from pgqw import db, launch
from pgqw.launch import Child
from tests.lab import ROOT

TASKS = "tests.lab.soak_everything_tasks"
TYPE = "soak_work"
DBNAME = "soak_everything"
SCHEDULE = "soak-every-minute"
LIMITED, PAUSABLE = "limited", "pausable"
LIMIT = 2

WORKER_ENV = {
    "POLL_INTERVAL_MS": "200",
    "SWEEP_INTERVAL_MS": "500",
    "SHUTDOWN_GRACE_MS": "3000",
    "WORKER_LOG_JOBS": "0",
}


# ----------------------------------------------------------------------------- the task the workers run

# The task lives in tests/lab/soak_everything_tasks.py, imported only by the workers (`--tasks`): a task
# defined here would join the test process's registry, which the test suite registers in every database.


# ----------------------------------------------------------------------------- the run's knobs and record

@dataclass
class Plan:
    duration_s: float = 75.0          # the stream of enqueues
    batch: int = 10                   # jobs per enqueue_jobs call
    feed_interval_s: float = 0.1
    workers: int = 3
    concurrency: int = 8
    kill_every_s: float = 15.0
    restarts_at_s: tuple[float, ...] = (22.0, 50.0)   # into the stream; modes immediate, then fast
    schedule_back_min: int = 10       # slots_after moved this far back (the second time: +5)
    drain_timeout_s: float = 60.0


@dataclass
class RunResult:
    figures: dict[str, Any] = field(default_factory=dict)
    timeline: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # invariants broken, with the jobs named


def _connect(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True, connect_timeout=3)


class Conn:
    """One autocommit connection that reopens itself after an error (the server restarts under it)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn: psycopg.Connection | None = None

    def get(self) -> psycopg.Connection:
        if self.conn is None or self.conn.closed or self.conn.broken:
            self.conn = _connect(self.url)
        return self.conn

    def drop(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn = None


def _mode(rng: random.Random) -> tuple[str, str, int, int | None]:
    """(queue, mode, ms, max_attempts) of the next job."""
    r = rng.random()
    if r < 0.06:
        return LIMITED, "ok", rng.randint(300, 500), None
    if r < 0.14:
        return PAUSABLE, "ok", rng.randint(20, 60), None
    if r < 0.29:
        return "default", "flaky", rng.randint(20, 60), None
    if r < 0.34:
        return "default", "dead", rng.randint(10, 30), 2
    return "default", "ok", rng.randint(20, 60), None


class Feeder(threading.Thread):
    """Enqueues batches until stopped; a batch that met an error is resent with the same keys."""

    def __init__(self, url: str, plan: Plan, seed: int) -> None:
        super().__init__(name="soak feeder", daemon=True)
        self.url, self.plan, self.rng = url, plan, random.Random(seed)
        self.stop = threading.Event()
        self.accepted: dict[uuid.UUID, str] = {}   # id → mode
        self.queue_of: dict[uuid.UUID, str] = {}
        self.errors = 0
        self.failure: str | None = None

    def run(self) -> None:
        c = Conn(self.url)
        n = 0
        try:
            while not self.stop.is_set():
                jobs, modes = [], []
                for _ in range(self.plan.batch):
                    queue, mode, ms, max_attempts = _mode(self.rng)
                    job: dict[str, Any] = {"type": TYPE, "payload": {"n": n, "mode": mode, "ms": ms},
                                           "idempotency_key": f"soak-{n}", "queue": queue}
                    if max_attempts:
                        job["max_attempts"] = max_attempts
                    jobs.append(job)
                    modes.append((mode, queue))
                    n += 1
                while True:
                    try:
                        rows = db.enqueue_jobs(c.get(), jobs=jobs)
                        break
                    except psycopg.OperationalError:
                        self.errors += 1
                        c.drop()
                        time.sleep(0.1)
                for row, (mode, queue) in zip(rows, modes):
                    self.accepted[row.id] = mode
                    self.queue_of[row.id] = queue
                self.stop.wait(self.plan.feed_interval_s)
        except Exception as exc:  # noqa: BLE001 - reported by the run
            self.failure = f"{type(exc).__name__}: {exc}"
        finally:
            c.drop()


class Sampler(threading.Thread):
    """Counts `limited`'s processing jobs every 100 ms, on a connection of its own."""

    def __init__(self, url: str) -> None:
        super().__init__(name="soak sampler", daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.samples = 0
        self.max_seen = 0
        self.over: list[tuple[float, int]] = []
        self.errors = 0

    def run(self) -> None:
        c = Conn(self.url)
        while not self.stop.is_set():
            try:
                n = c.get().execute("select count(*) from pgqw.jobs where queue = %s and status = 'processing'",
                                    [LIMITED]).fetchone()[0]  # type: ignore[index]
                self.samples += 1
                self.max_seen = max(self.max_seen, n)
                if n > LIMIT:
                    self.over.append((time.time(), n))
            except psycopg.OperationalError:
                self.errors += 1
                c.drop()
            self.stop.wait(0.1)
        c.drop()


class Operator(threading.Thread):
    """Cancels, retries dead jobs, pauses/resumes `pausable` and prunes, as the owner, until stopped."""

    def __init__(self, url: str, feeder: Feeder, seed: int) -> None:
        super().__init__(name="soak operator", daemon=True)
        self.url, self.feeder, self.rng = url, feeder, random.Random(seed)
        self.stop = threading.Event()
        self.cancels: dict[uuid.UUID, tuple[str, datetime]] = {}  # id → (status when asked, server clock after commit)
        self.cancels_unknown = 0     # a cancel whose answer was lost (excluded from the check)
        self.cancels_refused = 0     # QS409: finished before the cancel came
        self.retried = 0
        self.pauses: list[tuple[datetime, datetime | None]] = []  # (pause committed, resume asked)
        self.pruned_ids: set[uuid.UUID] = set()       # jobs a prune could see (final, in its snapshot)
        self.pruned_keys: dict[uuid.UUID, str] = {}   # their idempotency keys (for the schedule's slots)
        self.pruned_status: dict[uuid.UUID, str] = {}  # and their final status
        self.pruned = 0                                # what prune_jobs answered, summed
        self.prunes = 0
        self.errors = 0
        self.failure: str | None = None
        self.prune_lock = threading.Lock()  # held by a prune from its read to its bookkeeping

    def _now(self, conn: psycopg.Connection) -> datetime:
        return conn.execute("select clock_timestamp()").fetchone()[0]  # type: ignore[index]

    def cancel_some(self, conn: psycopg.Connection) -> None:
        for status in ("pending", "processing"):
            row = conn.execute(
                "select id from pgqw.jobs where status = %s and type = %s and idempotency_key like 'soak-%%'"
                " order by random() limit 1", [status, TYPE]).fetchone()
            if row is None or row[0] in self.cancels:
                continue
            try:
                db.cancel_job(conn, job_id=row[0])
            except psycopg.OperationalError:
                self.cancels_unknown += 1
                raise
            except psycopg.Error as exc:
                if exc.sqlstate == "QS409":
                    self.cancels_refused += 1
                    continue
                raise
            self.cancels[row[0]] = (status, self._now(conn))

    def retry_dead(self, conn: psycopg.Connection) -> None:
        for (job_id,) in conn.execute("select id from pgqw.jobs where status = 'dead' and type = %s",
                                      [TYPE]).fetchall():
            try:
                db.retry_dead(conn, job_id=job_id, extra_attempts=1)
                self.retried += 1
            except psycopg.OperationalError:
                raise
            except psycopg.Error:
                pass

    def prune(self, conn: psycopg.Connection) -> None:
        # One snapshot for the read and the prune: the prune deletes only rows this read saw.
        with self.prune_lock, psycopg.connect(self.url, connect_timeout=3) as tx:
            tx.execute("set transaction isolation level repeatable read")
            seen = tx.execute("select id, idempotency_key, status::text from pgqw.jobs where status in ('succeeded', 'cancelled')"
                              " and finished_at < now()").fetchall()
            deleted = db.prune_jobs(tx, older_than=timedelta(0),
                                    statuses=["succeeded", "cancelled"], batch=100000)
            tx.commit()
            for job_id, key, status in seen:
                self.pruned_ids.add(job_id)
                self.pruned_keys[job_id] = key
                self.pruned_status[job_id] = status
            self.pruned += deleted
            self.prunes += 1

    def pause_resume(self, conn: psycopg.Connection) -> None:
        if self.pauses and self.pauses[-1][1] is None:
            resume_asked = self._now(conn)
            db.resume_queue(conn, queue=PAUSABLE)
            self.pauses[-1] = (self.pauses[-1][0], resume_asked)
        else:
            db.pause_queue(conn, queue=PAUSABLE, create=True)
            self.pauses.append((self._now(conn), None))

    def step(self, conn: psycopg.Connection, tick: int) -> None:
        self.cancel_some(conn)
        if tick % 3 == 0:
            self.retry_dead(conn)
        if tick % 4 == 0:
            self.pause_resume(conn)
        if tick % 8 == 5:
            self.prune(conn)

    def run(self) -> None:
        c = Conn(self.url)
        tick = 0
        try:
            while not self.stop.is_set():
                try:
                    self.step(c.get(), tick)
                except psycopg.OperationalError:
                    self.errors += 1
                    c.drop()
                tick += 1
                self.stop.wait(1.0)
            # Leave `pausable` running for the drain.
            while True:
                try:
                    if self.pauses and self.pauses[-1][1] is None:
                        self.pause_resume(c.get())
                    break
                except psycopg.OperationalError:
                    c.drop()
                    time.sleep(0.2)
        except Exception as exc:  # noqa: BLE001 - reported by the run
            self.failure = f"{type(exc).__name__}: {exc}"
        finally:
            c.drop()


def move_schedule_back(conn: psycopg.Connection, minutes: int) -> None:
    """As the owner: the schedule's slots of the last `minutes` minutes are due, each to be enqueued once."""
    conn.execute("update pgqw.schedules set slots_after = now() - make_interval(mins => %s), last_slot = null,"
                 " catch_up = 'all' where name = %s", [minutes, SCHEDULE])


# ----------------------------------------------------------------------------- the checks

CHECKS_SQL = """
with accepted as (select unnest(%(ids)s::uuid[]) as id),
     pruned as (select unnest(%(pruned)s::uuid[]) as id)
select
    (select count(*) from accepted a where not exists (select 1 from pgqw.jobs j where j.id = a.id)
        and not exists (select 1 from pruned p where p.id = a.id))::int as lost,
    (select count(*) from accepted a where not exists (select 1 from pgqw.jobs j where j.id = a.id)
        and exists (select 1 from pruned p where p.id = a.id))::int as gone_pruned,
    (select count(*) from pgqw.jobs where status not in ('succeeded', 'dead', 'cancelled'))::int as unfinished,
    (select count(*) from pgqw.jobs where status = 'succeeded')::int as succeeded,
    (select count(*) from pgqw.jobs where status = 'dead')::int as dead,
    (select count(*) from pgqw.jobs where status = 'cancelled')::int as cancelled,
    (select count(*) from (select job_id from pgqw.job_attempts where outcome = 'succeeded'
        group by job_id having count(*) > 1) r)::int as succeeded_twice,
    (select count(*) from pgqw.job_attempts where finished_at is null)::int as attempts_open,
    (select count(*) from pgqw.job_attempts)::int as attempts,
    (select count(*) from pgqw.job_attempts where outcome = 'failed')::int as attempts_failed,
    (select count(*) from pgqw.job_attempts where outcome = 'abandoned')::int as attempts_abandoned,
    (select count(*) from pgqw.job_attempts where outcome = 'cancelled')::int as attempts_cancelled,
    (select count(distinct a1.job_id) from pgqw.job_attempts a1 join pgqw.job_attempts a2
        on a1.job_id = a2.job_id and a1.attempt < a2.attempt
       where a2.started_at < coalesce(a1.finished_at, 'infinity'))::int as overlapping
"""

CANCEL_SQL = """
with asked as (select unnest(%(ids)s::uuid[]) as id, unnest(%(at)s::timestamptz[]) as committed)
select a.job_id, a.attempt, a.started_at, s.committed, r.requested_at
  from asked s join pgqw.job_attempts a on a.job_id = s.id
  left join pgqw.job_cancel_requests r on r.job_id = s.id
 where a.started_at > s.committed or a.started_at > r.requested_at
"""


def check(conn: psycopg.Connection, feeder: Feeder, op: Operator, sampler: Sampler,
          schedule_from: datetime, reset_after_prune: set[str], res: RunResult) -> None:
    f = res.figures
    ids = list(feeder.accepted)
    with conn.cursor(row_factory=dict_row) as cur:
        r = cur.execute(CHECKS_SQL, {"ids": ids, "pruned": list(op.pruned_ids)}).fetchone()
    assert r is not None
    f["jobs accepted by the feeder"] = len(ids)
    for mode in ("ok", "flaky", "dead"):
        f[f"  of them {mode}"] = sum(1 for m in feeder.accepted.values() if m == mode)
    f[f"  of them in '{LIMITED}'"] = sum(1 for q in feeder.queue_of.values() if q == LIMITED)
    f[f"  of them in '{PAUSABLE}'"] = sum(1 for q in feeder.queue_of.values() if q == PAUSABLE)
    f["feeder batches resent after an error"] = feeder.errors
    f["prune_jobs runs (age 0, succeeded + cancelled)"] = op.prunes
    f["jobs pruned (prune_jobs' answers summed)"] = op.pruned
    f["accepted jobs gone and pruned"] = r["gone_pruned"]
    f["LOST: accepted jobs gone and not pruned"] = r["lost"]
    f["jobs left now: succeeded / dead / cancelled"] = f"{r['succeeded']} / {r['dead']} / {r['cancelled']}"
    f["UNFINISHED jobs after the drain"] = r["unfinished"]
    f["retry_dead calls that revived a job"] = op.retried
    f["attempts (left): all / failed / abandoned / cancelled"] = (
        f"{r['attempts']} / {r['attempts_failed']} / {r['attempts_abandoned']} / {r['attempts_cancelled']}")
    f["ATTEMPTS left open"] = r["attempts_open"]
    f["SUCCEEDED TWICE (jobs with 2+ succeeded attempts)"] = r["succeeded_twice"]
    dr = db.report_double_runs(conn)
    f["report_double_runs: succeeded_twice / overlapping"] = f"{dr.succeeded_twice} / {dr.overlapping_jobs}"
    f["OVERLAPPING attempts (jobs)"] = r["overlapping"]
    if r["lost"]:
        res.failures.append(f"{r['lost']} accepted jobs lost")
    if op.pruned != r["gone_pruned"] + sum(1 for i in op.pruned_ids if i not in feeder.accepted):
        res.failures.append(f"prune_jobs said {op.pruned} deleted, {r['gone_pruned']} feeder jobs + "
                            f"{sum(1 for i in op.pruned_ids if i not in feeder.accepted)} others are gone")
    for name in ("unfinished", "attempts_open", "succeeded_twice", "overlapping"):
        if r[name]:
            res.failures.append(f"{name}: {r[name]}")
    if dr.succeeded_twice or dr.overlapping_jobs:
        res.failures.append(f"report_double_runs: {dr}")

    # Cancels: no attempt started after the cancel committed (server clock read after the commit).
    asked = list(op.cancels.items())
    rows = conn.execute(CANCEL_SQL, {"ids": [i for i, _ in asked], "at": [a[1] for _, a in asked]}).fetchall()
    after_commit = [x for x in rows if x[2] > x[3]]
    after_request = [x for x in rows if x[4] is not None and x[2] > x[4]]
    now_status = dict(conn.execute("select id, status::text from pgqw.jobs where id = any(%s)",
                                   [[i for i, _ in asked]]).fetchall())
    statuses: dict[str, int] = {}
    for i, _ in asked:
        st = now_status.get(i) or op.pruned_status.get(i, "gone?")
        statuses[st] = statuses.get(st, 0) + 1
    f["cancels committed: of pending / of processing jobs"] = (
        f"{sum(1 for _, a in asked if a[0] == 'pending')} / {sum(1 for _, a in asked if a[0] == 'processing')}")
    f["  their jobs' final status (pruned ones as pruned): " + " / ".join(sorted(statuses))] = " / ".join(
        str(statuses[k]) for k in sorted(statuses))
    if any(k not in ("cancelled", "succeeded") for k in statuses):
        res.failures.append(f"cancelled jobs ended {statuses}")
    f["cancels refused (job finished first) / answer lost"] = f"{op.cancels_refused} / {op.cancels_unknown}"
    f["ATTEMPTS STARTED AFTER THEIR CANCEL COMMITTED"] = len(after_commit)
    f["  attempts started after job_cancel_requests.requested_at"] = len(after_request)
    if after_commit:
        res.failures.append(f"attempts started after their cancel committed: {after_commit[:5]}")
    if after_request:
        res.failures.append(f"attempts started after their cancel's requested_at: {after_request[:5]}")

    # Pause: no attempt started in `pausable` between a pause's commit and its resume.
    paused_starts = 0
    for paused_at, resumed_at in op.pauses:
        paused_starts += conn.execute(
            "select count(*) from pgqw.job_attempts a join pgqw.jobs j on j.id = a.job_id where j.queue = %s"
            " and a.started_at > %s and a.started_at < %s", [PAUSABLE, paused_at, resumed_at]).fetchone()[0]  # type: ignore[index]
    f[f"pauses of '{PAUSABLE}' (each resumed)"] = len(op.pauses)
    f[f"ATTEMPTS STARTED IN '{PAUSABLE}' WHILE PAUSED"] = paused_starts
    if paused_starts:
        res.failures.append(f"{paused_starts} attempts started in a paused queue")

    # The limit.
    f[f"'{LIMITED}' samples (every 100 ms) / sampler reconnects"] = f"{sampler.samples} / {sampler.errors}"
    f[f"'{LIMITED}' most processing at once (limit {LIMIT})"] = sampler.max_seen
    if sampler.max_seen > LIMIT:
        res.failures.append(f"'{LIMITED}' above its limit: {sampler.over[:5]}")
    if sampler.samples < 100:
        res.failures.append(f"only {sampler.samples} samples of '{LIMITED}'")

    # Schedule slots: every minute after schedule_from up to the last slot, one job each (pruned counted).
    keys = [k for (k,) in conn.execute("select idempotency_key from pgqw.jobs where idempotency_key like %s",
                                       [f"schedule:{SCHEDULE}@%"]).fetchall()]
    keys += [k for k in op.pruned_keys.values() if k and k.startswith(f"schedule:{SCHEDULE}@")]
    slots = {}
    for k in keys:
        slots[k] = slots.get(k, 0) + 1
    expected = conn.execute(
        "select to_char(s at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') from generate_series("
        " date_trunc('minute', %s::timestamptz) + interval '1 minute', now(), interval '1 minute') s",
        [schedule_from]).fetchall()
    want = {f"schedule:{SCHEDULE}@{e}" for (e,) in expected}
    twice = sorted(k for k, n in slots.items() if n > 1 and not (n == 2 and k in reset_after_prune))
    again = sorted(k for k, n in slots.items() if n == 2 and k in reset_after_prune)
    # The slot of the current minute may have come after the drain's last scheduler pass.
    missing = sorted(k for k in want - set(slots) if k != max(want))
    f["schedule slots due (minutes since slots_after)"] = len(want)
    f["  of them pruned, then made due again by the hand reset"] = len(reset_after_prune)
    f["  of those given a second job (expected)"] = len(again)
    f["SCHEDULE SLOTS WITH 2+ JOBS (otherwise)"] = len(twice)
    f["SCHEDULE SLOTS MISSING (the current minute's excepted)"] = len(missing)
    if twice or missing:
        res.failures.append(f"schedule slots: 2+ jobs {twice[:3]}, missing {missing[:3]}")


# ----------------------------------------------------------------------------- the run

def run_soak(cluster: Any, run_dir: Path, *, plan: Plan | None = None, seed: int = 11,
             progress: Callable[[str], None] | None = None) -> RunResult:
    """One run on `cluster` (an OwnedCluster, started); every process stopped when it returns."""
    plan = plan or Plan()
    res = RunResult()
    t0 = time.monotonic()

    def note(text: str) -> None:
        line = f"{time.monotonic() - t0:7.2f}s  {text}"
        res.timeline.append(line)
        if progress:
            progress(line)

    url = cluster.create_database(DBNAME)
    migrating = launch.start(["migrate", "--tasks", TASKS], name="migrate", database_url=url, cwd=ROOT)
    if migrating.wait(timeout=120) != 0:
        raise RuntimeError(f"pgqw migrate failed:\n{migrating.tail()}")
    with _connect(url) as conn:
        db.set_queue_limit(conn, queue=LIMITED, max_running=LIMIT, create=True)
        db.resume_queue(conn, queue=PAUSABLE, create=True)
        db.set_schedule(conn, name=SCHEDULE, task_type=TYPE, cron="* * * * *",
                        payload={"n": -1, "mode": "ok", "ms": 10}, catch_up="all")
        move_schedule_back(conn, plan.schedule_back_min)
        schedule_from = conn.execute("select slots_after from pgqw.schedules where name = %s",
                                     [SCHEDULE]).fetchone()[0]  # type: ignore[index]
    note(f"server on port {cluster.port}; pgqw migrate --tasks {TASKS}; '{LIMITED}' limited to {LIMIT}; "
         f"schedule {SCHEDULE} '* * * * *' catch_up all, slots_after moved back {plan.schedule_back_min} min")

    children: dict[str, Child] = {}
    kills = 0
    generation = {i: 1 for i in range(1, plan.workers + 1)}

    def start(i: int) -> None:
        wid = f"e{i}-{generation[i]}"
        children[wid] = launch.start_worker(wid, concurrency=plan.concurrency, args=["--tasks", TASKS],
                                            env=WORKER_ENV, database_url=url, log=run_dir / f"{wid}.log", cwd=ROOT)

    run_dir.mkdir(parents=True, exist_ok=True)
    feeder = Feeder(url, plan, seed)
    sampler = Sampler(url)
    op = Operator(url, feeder, seed + 1)
    reset_after_prune: set[str] = set()
    try:
        for i in generation:
            start(i)
        for child in children.values():
            child.wait_ready(timeout=60)
        note(f"{plan.workers} workers (concurrency {plan.concurrency}) started on queues default, {LIMITED}, {PAUSABLE}")
        sampler.start()
        feeder.start()
        op.start()
        stream_start = time.monotonic()
        next_kill = stream_start + plan.kill_every_s
        restarts = list(plan.restarts_at_s)
        restart_modes = ["immediate", "fast"]
        done_restarts = 0
        while time.monotonic() - stream_start < plan.duration_s:
            now = time.monotonic()
            if now >= next_kill:
                i = random.Random(seed + kills).choice(list(generation))
                wid = f"e{i}-{generation[i]}"
                children[wid].send_signal(signal.SIGKILL)
                children[wid].wait(timeout=10)
                kills += 1
                generation[i] += 1
                start(i)
                note(f"SIGKILL {wid}; started e{i}-{generation[i]}")
                next_kill = now + plan.kill_every_s
            if restarts and now - stream_start >= restarts[0]:
                restarts.pop(0)
                mode = restart_modes[done_restarts % 2]
                before = time.monotonic()
                cluster.restart(mode=mode, down_s=1.0)
                done_restarts += 1
                note(f"server restart (stop -m {mode}, down 1s): back after {time.monotonic() - before:.1f}s")
                if done_restarts == 1:
                    # A slot whose job was pruned is kept from a second job only by last_slot, which this
                    # resets by hand: those slots get a second job, rightly; any other slot must not.
                    with op.prune_lock, _connect(url) as conn:
                        reset_after_prune.update(k for k in op.pruned_keys.values()
                                                 if k and k.startswith(f"schedule:{SCHEDULE}@"))
                        move_schedule_back(conn, plan.schedule_back_min + 5)
                        schedule_from = min(schedule_from, conn.execute(
                            "select slots_after from pgqw.schedules where name = %s",
                            [SCHEDULE]).fetchone()[0])  # type: ignore[index]
                    note(f"schedule slots_after moved back {plan.schedule_back_min + 5} min again (last_slot null)")
            for wid, child in children.items():
                if not child.alive() and wid in (f"e{i}-{g}" for i, g in generation.items()):
                    raise RuntimeError(f"worker {wid} exited unasked:\n{child.tail()}")
            time.sleep(0.2)
        feeder.stop.set()
        feeder.join(30)
        op.stop.set()
        op.join(30)
        note(f"stream stopped: {len(feeder.accepted)} jobs accepted")
        for failure in (feeder.failure, op.failure):
            if failure:
                raise RuntimeError(failure)

        # Drain: dead jobs are given their extra attempt until none is left waiting.
        deadline = time.monotonic() + plan.drain_timeout_s
        with _connect(url) as conn:
            while True:
                op.retry_dead(conn)
                left = conn.execute("select count(*) from pgqw.jobs where status not in"
                                    " ('succeeded', 'dead', 'cancelled')").fetchone()[0]  # type: ignore[index]
                dead = conn.execute("select count(*) from pgqw.jobs where status = 'dead'").fetchone()[0]  # type: ignore[index]
                if left == 0 and dead == 0:
                    break
                if time.monotonic() > deadline:
                    note(f"drain timed out: {left} unfinished, {dead} dead")
                    break
                time.sleep(0.5)
        note("drained")
        sampler.stop.set()
        sampler.join(5)
        live = {wid: c for wid, c in children.items() if c.alive()}
        launch.stop_all(live.values())
        exits = {wid: c.returncode for wid, c in live.items()}
        note(f"workers stopped (SIGTERM): exit codes {exits}")
        res.figures["workers SIGKILLed (each replaced)"] = kills
        res.figures["server restarts (immediate, fast)"] = done_restarts
        res.figures["seconds of stream"] = plan.duration_s
        with _connect(url) as conn:
            check(conn, feeder, op, sampler, schedule_from, reset_after_prune, res)
        bad_exits = {wid: code for wid, code in exits.items() if code != 0}
        res.figures["WORKERS NOT EXITING 0 on the final SIGTERM"] = len(bad_exits)
        if bad_exits:
            res.failures.append(f"workers' exit codes on SIGTERM: {bad_exits}")
        return res
    finally:
        feeder.stop.set()
        op.stop.set()
        sampler.stop.set()
        for child in children.values():
            if child.alive():
                child.stop(signal.SIGKILL, timeout=5)


def table(res: RunResult) -> str:
    width = max(len(k) for k in res.figures)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in res.figures.items())


def evidence_text(res: RunResult, *, command: str, commit: str, server: str, took_s: float) -> str:
    lines = [
        "# A soak with everything on: schedules, cancels, retries, prune, pause/resume and a limit,",
        "# while workers are SIGKILLed and the server restarted",
        f"# command: {command}",
        f"# commit {commit}, PostgreSQL {server} (tests.lab.cluster, fsync off), "
        f"{time.strftime('%Y-%m-%d')}, {took_s:.0f}s in all",
        "# Capitalised figures are invariants (0, or at most the limit); the others are what happened.",
        "",
        table(res),
        "",
        "result: " + ("OK" if not res.failures else "FAIL: " + "; ".join(res.failures)),
        "",
        "## timeline (seconds since the run began)",
        *res.timeline,
        "",
    ]
    return "\n".join(lines)

