"""A primary that dies mid-drain, and what the queue keeps: the scenario behind
tests/acceptance/test_failover.py, with real servers and real processes.

One run (run_failover): a primary and a streaming standby of its own (tests.lab.replication,
synchronous or asynchronous), the queue migrated through libpq's multi-host URL
(`host=primary,standby target_session_attrs=read-write`), `pgqw api` and several `pgqw worker`
processes on that same URL, running tests.lab.failover_tasks (each run of a handler leaves a row in
public.failover_effects). Jobs arrive three ways: a first part enqueued before the workers start, the
rest by a feeder thread in small batches while they drain, and one at a time through the API (POST
/api/jobs with an Idempotency-Key) every few tens of milliseconds. A client that gets an error resends
the same keys, as a real one would; only an answer counts as accepted.

Once enough jobs have succeeded, the primary is killed (SIGKILL to every process, at once) and the
standby promoted, as a failover manager would: at once, or after Plan.promote_after_s (the manager's
detection). Plan.standby_stall_s first stops the primary's WAL sender for that long, so the standby
falls behind (or, synchronous, every commit waits). Nothing is restarted or told: the workers, the
API, the feeder and the poster reconnect by themselves. When every job on the new primary is
finished, the workers are stopped with SIGTERM and the new primary is asked what survived:

  lost                jobs accepted (an enqueue answered) that the new primary does not have, or
                      that never succeeded there
  successes lost      jobs seen succeeded on the primary just before the kill whose success the
                      new primary does not have (run again, or gone with their job)
  succeeded twice     jobs with more than one succeeded attempt (report_double_runs)
  handler re-runs     jobs with more than one row in failover_effects (a run whose row was lost with
                      the rest of the old primary's last writes cannot be seen)
  success, no effect  succeeded attempts whose handler's own row is missing: a success recorded for
                      work whose write was lost
  abandoned attempts  attempts the sweep took back (lease expired) or a worker handed back

and how long the queue was out: from the kill to the first claim, the first success and the first
answered POST on the new primary.
"""
from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from pgqw import db, launch
from pgqw.launch import Child
from tests.lab import ROOT
from tests.lab.replication import ReplicatedPair

TASKS = "tests.lab.failover_tasks"
TYPE = "failover_effect"
DBNAME = "failover"
MAX_ATTEMPTS = 20

# The application's own table, where each run of the handler leaves a row (tests.lab.failover_tasks).
EFFECTS_DDL = """
create table public.failover_effects (
    id          bigserial primary key,
    job_id      uuid not null,
    attempt     integer not null,
    lease_token uuid not null,
    worker_id   text not null,
    at          timestamptz not null default clock_timestamp(),
    constraint failover_effects_job_token_key unique (job_id, lease_token)
)
"""

WORKER_ENV = {
    "POLL_INTERVAL_MS": "200",
    "SWEEP_INTERVAL_MS": "500",
    "SHUTDOWN_GRACE_MS": "3000",
    "WORKER_LOG_JOBS": "0",
}


@dataclass
class Plan:
    """The knobs of one run."""

    jobs: int = 2000                 # enqueued through the database (before the workers, then by the feeder)
    before: int = 1000               # of those, enqueued before the workers start
    batch: int = 20                  # the feeder's jobs per enqueue_jobs call (one transaction)
    feed_interval_s: float = 0.1     # between two feeder batches
    api_interval_s: float = 0.05     # between two POST /api/jobs
    workers: int = 4
    concurrency: int = 8
    kill_after_succeeded: int = 1100  # the primary dies once this many jobs have succeeded
    standby_stall_s: float = 0.0     # before the kill, nothing reaches the standby for this long
    promote_after_s: float = 0.0     # between the kill and the promotion (a failover manager's detection)
    drain_timeout_s: float = 120.0   # for every job to finish after the kill


class Feeder(threading.Thread):
    """Enqueues `keys` in batches on its own connection; on an error it reconnects and resends the
    batch, same keys (the idempotency key makes a batch that did commit the same jobs again)."""

    def __init__(self, url: str, keys: list[str], batch: int, interval_s: float, deadline: float) -> None:
        super().__init__(name="failover feeder", daemon=True)
        self.url, self.keys, self.batch, self.interval_s, self.deadline = url, keys, batch, interval_s, deadline
        self.acked: dict[str, tuple[uuid.UUID, float]] = {}  # key → (job id, wall time of the answer)
        self.errors = 0
        self.resent_batches = 0
        self.resent_found = 0  # jobs a resent batch found already there (its first commit had landed)
        self.failure: str | None = None

    def run(self) -> None:
        conn: psycopg.Connection | None = None
        try:
            for start in range(0, len(self.keys), self.batch):
                chunk = self.keys[start:start + self.batch]
                resent = False
                while True:
                    try:
                        if conn is None or conn.closed or conn.broken:
                            conn = psycopg.connect(self.url, autocommit=True, connect_timeout=3)
                        rows = db.enqueue_jobs(conn, jobs=[
                            {"type": TYPE, "payload": {"n": int(k.rsplit("-", 1)[1])}, "idempotency_key": k,
                             "max_attempts": MAX_ATTEMPTS} for k in chunk])
                        break
                    except psycopg.Error:
                        self.errors += 1
                        resent = True
                        if conn is not None:
                            conn.close()
                        if time.monotonic() > self.deadline:
                            raise
                        time.sleep(0.1)
                now = time.time()
                for key, row in zip(chunk, rows):
                    self.acked[key] = (row.id, now)
                if resent:
                    self.resent_batches += 1
                    self.resent_found += sum(1 for r in rows if not r.created)
                time.sleep(self.interval_s)
        except Exception as exc:  # noqa: BLE001 - reported by the run
            self.failure = f"{type(exc).__name__}: {exc}"
        finally:
            if conn is not None:
                conn.close()


class Poster(threading.Thread):
    """POST /api/jobs, one job at a time, until stopped; a request that gets no 200/202 is sent again
    with the same Idempotency-Key."""

    def __init__(self, api_url: str, prefix: str, interval_s: float) -> None:
        super().__init__(name="failover poster", daemon=True)
        self.api_url, self.prefix, self.interval_s = api_url, prefix, interval_s
        self.stop = threading.Event()
        self.accepted: dict[str, tuple[uuid.UUID, float, float, int]] = {}  # key → (id, sent, answered, status)
        self.refusals: dict[str, int] = {}  # status or error kind → count

    def post(self, key: str, n: int) -> tuple[int, dict[str, Any] | None]:
        body = json.dumps({"type": TYPE, "payload": {"n": n}, "max_attempts": MAX_ATTEMPTS}).encode()
        request = urllib.request.Request(f"{self.api_url}/api/jobs", data=body, method="POST", headers={
            "Content-Type": "application/json", "Idempotency-Key": key})
        try:
            with urllib.request.urlopen(request, timeout=5) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as exc:
            return exc.code, None
        except OSError as exc:
            return 0, {"error": type(exc).__name__}

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            key = f"{self.prefix}-{i}"
            while not self.stop.is_set():
                sent = time.time()
                status, answer = self.post(key, 1_000_000 + i)
                if status in (200, 202) and answer is not None:
                    self.accepted[key] = (uuid.UUID(answer["data"]["id"]), sent, time.time(), status)
                    break
                kind = str(status) if status else str((answer or {}).get("error", "error"))
                self.refusals[kind] = self.refusals.get(kind, 0) + 1
                self.stop.wait(0.1)
            i += 1
            self.stop.wait(self.interval_s)


@dataclass
class FailoverRun:
    """What one run measured: `figures` (name → value, in order) and a timeline."""

    mode: str
    plan: Plan
    figures: dict[str, Any] = field(default_factory=dict)
    timeline: list[str] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        return self.figures[name]


def _one(conn: psycopg.Connection, sql: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(sql, params or {})
        row = cur.fetchone()
    assert row is not None
    return row


def _seconds_after(conn: psycopg.Connection, column: str, where: str, kill_wall: float) -> float | None:
    """Seconds from the kill to the earliest `column` of job_attempts after it (the servers and this
    process read the same clock)."""
    row = _one(conn, f"select extract(epoch from min({column}))::float8 as at from job_attempts"
                     f" where {column} > to_timestamp(%(kill)s) and {where}", {"kill": kill_wall})
    return None if row["at"] is None else round(row["at"] - kill_wall, 2)


OUTCOME_SQL = """
with accepted as (select unnest(%(ids)s::uuid[]) as id),
     before_kill as (select unnest(%(seen)s::uuid[]) as id),
     kill as (select to_timestamp(%(kill)s) as at)
select
    (select count(*) from accepted a where not exists (select 1 from jobs j where j.id = a.id))::int
        as missing,
    (select count(*) from accepted a join jobs j using (id) where j.status <> 'succeeded')::int
        as not_succeeded,
    (select count(*) from jobs)::int as jobs_on_new_primary,
    (select count(*) from jobs where status = 'succeeded')::int as succeeded,
    (select count(*) from before_kill b where not exists (
        select 1 from job_attempts x, kill
         where x.job_id = b.id and x.outcome = 'succeeded' and x.finished_at <= kill.at
    ))::int as successes_lost,
    (select count(*) from before_kill b join jobs j using (id) where not exists (
        select 1 from job_attempts x, kill
         where x.job_id = b.id and x.outcome = 'succeeded' and x.finished_at <= kill.at
    ))::int as successes_lost_rerun,
    (select count(*) from job_attempts)::int as attempts,
    (select count(*) from job_attempts where outcome = 'failed')::int as failed_attempts,
    (select count(*) from job_attempts where outcome = 'abandoned' and abandon_reason = 'lease_expired')::int
        as abandoned_lease_expired,
    (select count(*) from job_attempts
      where outcome = 'abandoned' and abandon_reason is distinct from 'lease_expired')::int as abandoned_other,
    (select count(*) from job_attempts a, kill where a.started_at < kill.at
        and (a.finished_at is null or a.finished_at > kill.at))::int as attempts_across_kill,
    (select count(*) from job_attempts a, kill where a.started_at < kill.at and a.finished_at > kill.at
        and a.outcome = 'succeeded')::int as across_kill_succeeded,
    (select count(*) from job_attempts where finished_at is null)::int as attempts_open,
    (select count(*) from public.failover_effects)::int as effects,
    (select count(*) from (select job_id from public.failover_effects group by job_id having count(*) > 1) r)::int
        as rerun_jobs,
    (select count(*) from public.failover_effects e where not exists (select 1 from jobs j where j.id = e.job_id))::int
        as effects_of_unknown_jobs,
    (select count(*) from public.failover_effects e where not exists (
        select 1 from job_attempts a
         where a.job_id = e.job_id and a.lease_token_hash = sha256(uuid_send(e.lease_token))))::int
        as effects_without_attempt,
    (select count(*) from job_attempts a where a.outcome = 'abandoned' and not exists (
        select 1 from public.failover_effects e
         where e.job_id = a.job_id and sha256(uuid_send(e.lease_token)) = a.lease_token_hash))::int
        as abandoned_never_ran,
    (select count(*) from job_attempts a where a.outcome = 'succeeded' and not exists (
        select 1 from public.failover_effects e
         where e.job_id = a.job_id and sha256(uuid_send(e.lease_token)) = a.lease_token_hash))::int
        as succeeded_without_effect
"""


def run_failover(*, synchronous: bool, run_dir: Path, plan: Plan | None = None, bindir: Path | None = None,
                 progress: Callable[[str], None] | None = None) -> FailoverRun:
    """One run (the module's docstring); raises RuntimeError when the queue does not come back or
    a process dies. Every process and both servers are gone when it returns."""
    plan = plan or Plan()
    pair = ReplicatedPair(synchronous=synchronous, bindir=bindir)
    run = FailoverRun(pair.mode + (f", standby stalled {plan.standby_stall_s:g}s" if plan.standby_stall_s else ""),
                      plan)
    t0 = time.monotonic()

    def note(text: str) -> None:
        line = f"{time.monotonic() - t0:7.2f}s  {text}"
        run.timeline.append(line)
        if progress:
            progress(f"[{run.mode}] {line}")

    children: list[Child] = []
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        pair.start()
        note(f"primary on port {pair.primary.port}, standby on {pair.standby.port} "
             f"(PostgreSQL {pair.server_version()}, {pair.mode} replication, "
             f"synchronous_standby_names = '{pair.primary.settings['synchronous_standby_names']}')")
        pair.primary.create_database(DBNAME)
        url = pair.url(DBNAME)
        # As a deploy does it, in a process of its own (the task module is not imported here).
        migrating = launch.start(["migrate", "--tasks", TASKS], name="migrate", database_url=url, cwd=ROOT)
        if migrating.wait(timeout=120) != 0:
            raise RuntimeError(f"pgqw migrate failed:\n{migrating.tail()}")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(EFFECTS_DDL)
        note(f"pgqw migrate --tasks {TASKS} through {url}")
        primary_db = pair.primary.url(DBNAME)
        new_primary_db = pair.standby.url(DBNAME)

        keys = [f"db-{i}" for i in range(plan.jobs)]
        feeder_deadline = time.monotonic() + plan.drain_timeout_s + 60
        first = Feeder(url, keys[:plan.before], 500, 0.0, feeder_deadline)
        first.run()
        if first.failure:
            raise RuntimeError(f"the first {plan.before} jobs could not be enqueued: {first.failure}")
        note(f"{plan.before} jobs enqueued before the workers start")

        api = launch.start_api(0, database_url=url, log=run_dir / "api.log", cwd=ROOT)
        children.append(api)
        workers = [launch.start_worker(f"{run.mode[0]}w{i}", concurrency=plan.concurrency, args=["--tasks", TASKS],
                                       env=WORKER_ENV, database_url=url, log=run_dir / f"w{i}.log", cwd=ROOT)
                   for i in range(1, plan.workers + 1)]
        children += workers
        for child in children:
            child.wait_ready(timeout=60)
        assert api.url
        note(f"pgqw api and {plan.workers} workers (concurrency {plan.concurrency}) started on that URL")

        feeder = Feeder(url, keys[plan.before:], plan.batch, plan.feed_interval_s, feeder_deadline)
        poster = Poster(api.url, f"api-{pair.mode}", plan.api_interval_s)
        feeder.start()
        poster.start()

        with psycopg.connect(primary_db, autocommit=True) as conn:
            deadline = time.monotonic() + 120
            while (before_stall := _one(conn, "select count(*)::int as n from jobs where status = 'succeeded'")["n"]) \
                    < plan.kill_after_succeeded:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{plan.kill_after_succeeded} jobs did not succeed within 120s")
                if any(not w.alive() for w in workers):
                    raise RuntimeError("a worker exited before the kill")
                time.sleep(0.05)
            if plan.standby_stall_s > 0:
                stalled = pair.stall_replication()
                note(f"WAL sender (pid {stalled}) stopped: nothing reaches the standby for {plan.standby_stall_s:g}s")
                time.sleep(plan.standby_stall_s)
            seen = [r[0] for r in conn.execute("select id from jobs where status = 'succeeded'")]
            waiting = _one(conn, "select count(*) filter (where status = 'processing')::int as processing,"
                                 " count(*) filter (where status in ('pending', 'failed'))::int as waiting from jobs")
        lag = pair.replication() or {}
        # ---- the primary dies ----------------------------------------------------------------------
        pids = pair.kill_primary()
        kill_wall = pair.killed_at
        kill_at = time.monotonic() - (time.time() - kill_wall)
        note(f"primary killed (SIGKILL to {len(pids)} processes) with {len(seen)} jobs seen succeeded, "
             f"{waiting['processing']} processing, {waiting['waiting']} waiting; "
             f"{len(feeder.acked)} of the feeder's {len(feeder.keys)} and {len(poster.accepted)} API jobs accepted; "
             f"the standby was {lag.get('unsent_bytes')} bytes unsent, {lag.get('unflushed_bytes')} unflushed, "
             f"{lag.get('unreplayed_bytes')} unreplayed behind")
        if plan.promote_after_s > 0:
            time.sleep(plan.promote_after_s)
        promoted_s = pair.promote() - kill_wall
        note(f"standby promoted (pg_ctl promote) and accepting writes {promoted_s:.2f}s after the kill")

        with psycopg.connect(new_primary_db, autocommit=True) as conn:
            deadline = time.monotonic() + plan.drain_timeout_s
            while True:
                left = _one(conn, "select count(*) filter (where status not in ('succeeded', 'dead'))::int as n"
                                  " from jobs")["n"]
                api_back = any(answered > kill_wall for _, _, answered, _ in poster.accepted.values())
                if not feeder.is_alive() and api_back:
                    poster.stop.set()
                if left == 0 and not feeder.is_alive() and not poster.is_alive():
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"not drained {plan.drain_timeout_s:.0f}s after the kill: {left} jobs left, "
                                       f"feeder alive {feeder.is_alive()}, API back {api_back}")
                dead = [w.name for w in workers if not w.alive()]
                if dead:
                    raise RuntimeError(f"workers exited after the failover: {dead}")
                time.sleep(0.1)
            poster.join(10)
            drained_s = time.monotonic() - kill_at
            note(f"every job finished on the new primary {drained_s:.1f}s after the kill")
            if feeder.failure:
                raise RuntimeError(f"the feeder gave up: {feeder.failure}")

            first_claim = _seconds_after(conn, "started_at", "true", kill_wall)
            first_success = _seconds_after(conn, "finished_at", "outcome = 'succeeded'", kill_wall)
            api_answers = sorted(answered for _, _, answered, _ in poster.accepted.values() if answered > kill_wall)
            api_s = round(api_answers[0] - kill_wall, 2) if api_answers else None
            note(f"first claim on the new primary {first_claim}s after the kill, first success {first_success}s, "
                 f"first POST answered {api_s}s")
            connected = _one(conn, "select count(distinct split_part(application_name, ' ', 2)) filter"
                                   " (where application_name like 'pgqw-worker %%')::int as workers"
                                   " from pg_stat_activity")

            stop_codes = {}
            for child in [*workers, api]:
                stop_codes[child.name] = child.stop(timeout=30)
            note(f"workers and API stopped (SIGTERM): exit codes {stop_codes}")

            feeder_ids = [i for i, _ in feeder.acked.values()] + [i for i, _ in first.acked.values()]
            api_ids = [i for i, _, _, _ in poster.accepted.values()]
            everything = feeder_ids + api_ids
            outcome = _one(conn, OUTCOME_SQL, {"ids": everything, "seen": seen, "kill": kill_wall})
            lost_db = _one(conn, "select count(*)::int as n from unnest(%(ids)s::uuid[]) i"
                                 " where not exists (select 1 from jobs j where j.id = i)", {"ids": feeder_ids})["n"]
            lost_api = _one(conn, "select count(*)::int as n from unnest(%(ids)s::uuid[]) i"
                                  " where not exists (select 1 from jobs j where j.id = i)", {"ids": api_ids})["n"]
            double = db.report_double_runs(conn)
            workers_lines = {w.name: w.output() for w in workers}

        def count(event: str) -> int:
            return sum(sum(1 for line in text.splitlines() if f"] {event} " in line or line.endswith(f"] {event}"))
                       for text in workers_lines.values())

        run.figures = {
            "replication": pair.mode,
            "seconds nothing reached the standby before the kill": plan.standby_stall_s,
            "jobs accepted through the database": len(feeder_ids),
            "jobs accepted through the API (202/200)": len(api_ids),
            "jobs seen succeeded on the primary just before the kill": len(seen),
            "  of them while nothing reached the standby": len(seen) - before_stall if plan.standby_stall_s else "-",
            "standby behind just before the kill (bytes unsent / unflushed)":
                f"{lag.get('unsent_bytes')} / {lag.get('unflushed_bytes')}",
            "seconds from the kill to the standby promoted": round(promoted_s, 2),
            "seconds from the promotion to the first claim":
                None if first_claim is None else round(first_claim - promoted_s, 2),
            "seconds from the kill to the first claim": first_claim,
            "seconds from the kill to the first success": first_success,
            "seconds from the kill to the first POST answered": api_s,
            "seconds from the kill to every job finished": round(drained_s, 1),
            "lost: accepted jobs missing on the new primary": outcome["missing"],
            "  of them accepted through the database": lost_db,
            "  of them accepted through the API": lost_api,
            "lost: accepted jobs present but not succeeded": outcome["not_succeeded"],
            "successes lost (seen before the kill, gone after)": outcome["successes_lost"],
            "  of them jobs run again (the rest: jobs lost)": outcome["successes_lost_rerun"],
            "jobs whose success was recorded twice": double.succeeded_twice,
            "jobs with overlapping attempts": double.overlapping_jobs,
            "handler re-runs (jobs with 2+ effect rows)": outcome["rerun_jobs"],
            "handler runs whose claim the new primary lacks": outcome["effects_without_attempt"],
            "  of them for jobs the new primary lacks": outcome["effects_of_unknown_jobs"],
            "succeeded attempts without their effect row": outcome["succeeded_without_effect"],
            "attempts open at the kill": outcome["attempts_across_kill"],
            "  of them then succeeded (same lease, new primary)": outcome["across_kill_succeeded"],
            "attempts abandoned: lease expired, swept": outcome["abandoned_lease_expired"],
            "  of them whose handler never ran (the claim's answer was lost)": outcome["abandoned_never_ran"],
            "attempts abandoned: handed back": outcome["abandoned_other"],
            "attempts failed (the handler's insert met the outage)": outcome["failed_attempts"],
            "attempts in all": outcome["attempts"],
            "attempts left open": outcome["attempts_open"],
            "jobs on the new primary": outcome["jobs_on_new_primary"],
            "feeder batches resent after an error": feeder.resent_batches,
            "  jobs a resent batch found already there": feeder.resent_found,
            "POSTs refused or failed during the failover": dict(sorted(poster.refusals.items())),
            "workers connected to the new primary": connected["workers"],
            "workers' 'db error' lines": count("db error"),
            "workers' 'ignored late result' lines": count("ignored late result"),
            "exit codes on the final SIGTERM": sorted(set(stop_codes.values())),
        }
        return run
    except BaseException:
        # What a failure needs to be understood: the timeline, each process's last lines, the servers' logs.
        print("\n".join(run.timeline))
        for child in children:
            print(f"----- {child.name} (exit {child.returncode}) -----\n{child.tail(40)}")
        for name, server in (("primary", pair.primary), ("standby", pair.standby)):
            if server.logfile.exists():
                print(f"----- {name} server log -----\n{server.logfile.read_text(errors='replace')[-3000:]}")
        raise
    finally:
        for child in children:
            if child.alive():
                child.stop(timeout=15)
        for child in children:
            run.logs[child.name] = child.output()
        pair.cleanup()


# ----------------------------------------------------------------------------- the evidence

NOTABLE = ("db error", "db pool", "ignored late result", "swept", "lost", "error")


def _cell(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items()) or "none"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return "-" if value is None else str(value)


def table(runs: list[FailoverRun]) -> str:
    """The runs' figures side by side, one row per figure."""
    names = list(dict.fromkeys(name for run in runs for name in run.figures))
    heads = [run.mode for run in runs]
    rows = [[name, *(_cell(run.figures.get(name)) for run in runs)] for name in names if name != "replication"]
    widths = [max(len(r[i]) for r in [["figure", *heads], *rows]) for i in range(len(heads) + 1)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([line(["figure", *heads]), *(line(r) for r in rows)])


def notable_lines(run: FailoverRun, limit: int = 12) -> list[str]:
    """The workers' and the API's log lines about the failover (errors, refusals, sweeps), a few per process."""
    found = []
    for name, text in run.logs.items():
        lines = [line for line in text.splitlines()
                 if any(f"] {event} " in line for event in NOTABLE) or (name == "api" and "rror" in line)]
        found += [f"{name}: {line}" for line in lines[:limit]]
        if len(lines) > limit:
            found.append(f"{name}: … {len(lines) - limit} more")
    return found


def evidence_text(runs: list[FailoverRun], *, command: str, commit: str, server: str) -> str:
    plan = runs[0].plan
    head = [
        "# A primary killed mid-drain, its standby promoted: what the queue kept",
        f"# command: {command}",
        f"# commit {commit}, PostgreSQL {server} (primary and standby on one machine), {time.strftime('%Y-%m-%d')}",
        (f"# {plan.jobs} jobs through the database ({plan.before} before the workers start, the rest in batches of "
         f"{plan.batch} every {plan.feed_interval_s:g}s) and one POST /api/jobs every {plan.api_interval_s:g}s;"),
        (f"# {plan.workers} workers x concurrency {plan.concurrency}, lease 5s; the primary killed (SIGKILL, every "
         f"process at once) once {plan.kill_after_succeeded} had succeeded, the standby promoted "
         + (f"{plan.promote_after_s:g}s later." if plan.promote_after_s else "at once.")),
        "# 'standby stalled': its WAL sender stopped (SIGSTOP) that long before the kill, as a slow link would.",
        "# Both servers are tests.lab.cluster's (fsync off: a killed process leaves the machine's page cache up).",
        "",
        table(runs),
    ]
    for run in runs:
        head += ["", f"## {run.mode}: timeline (seconds since the run began)", *run.timeline,
                 "", f"## {run.mode}: what the processes logged about it", *notable_lines(run)]
    return "\n".join(head) + "\n"
