"""The five break-it scenarios (and two extras) as code: run by the acceptance tests with short
latencies, and by `pgqw evidence` with the demo's own settings to write docs/evidence/.

Each scenario drives real processes (the API, workers) against a real database through a Stack,
measures only from the database and the logs, and returns a Result: the numbers a test asserts
on, and the text that goes into the evidence file.
"""
from __future__ import annotations

import re
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

import psycopg

from pgqw import db
from pgqw.demo.burst import burst, post_job
from pgqw.demo.idempotency import check_idempotency
from pgqw.demo.listing import EXAMPLE_LISTING
from pgqw.launch import wait_for
from pgqw.tables import format_table
from tests.lab import queries
from tests.lab.stack import Stack


@dataclass
class Profile:
    """Settings for one kind of run. FAST for the test suite; DEMO for evidence files."""

    name: str
    worker_env: dict[str, str]
    slow_env: dict[str, str]  # the worker that gets killed mid-job
    failing_env: dict[str, str]  # the worker whose every attempt fails
    retry_base_s: float
    retry_jitter_s: float
    poll_s: float
    timeout_s: float


FAST = Profile(
    name="fast",
    worker_env={
        "SIM_MIN_LATENCY_MS": "100", "SIM_MAX_LATENCY_MS": "300", "SIM_FAILURE_RATE": "0.2",
        "RETRY_BASE_DELAY_MS": "200", "RETRY_MAX_JITTER_MS": "100", "POLL_INTERVAL_MS": "100",
        "SWEEP_INTERVAL_MS": "300", "STUCK_JOB_TIMEOUT_MS": "2000", "HEARTBEAT_INTERVAL_MS": "400",
        "SHUTDOWN_GRACE_MS": "2000",
    },
    slow_env={"SIM_MIN_LATENCY_MS": "20000", "SIM_MAX_LATENCY_MS": "25000", "SIM_FAILURE_RATE": "0"},
    failing_env={"SIM_MIN_LATENCY_MS": "20", "SIM_MAX_LATENCY_MS": "50", "SIM_FAILURE_RATE": "1",
                 "RETRY_BASE_DELAY_MS": "300", "RETRY_MAX_JITTER_MS": "100"},
    retry_base_s=0.3,
    retry_jitter_s=0.1,
    poll_s=0.1,
    timeout_s=90,
)

DEMO = Profile(
    name="demo",
    worker_env={"STUCK_JOB_TIMEOUT_MS": "15000", "HEARTBEAT_INTERVAL_MS": "5000", "SWEEP_INTERVAL_MS": "5000"},
    slow_env={"SIM_MIN_LATENCY_MS": "25000", "SIM_MAX_LATENCY_MS": "30000", "SIM_FAILURE_RATE": "0"},
    failing_env={"SIM_FAILURE_RATE": "1"},
    retry_base_s=2.0,
    retry_jitter_s=1.0,
    poll_s=1.0,
    timeout_s=600,
)


@dataclass
class Result:
    name: str
    title: str
    numbers: dict[str, Any] = field(default_factory=dict)
    sections: list[tuple[str, str]] = field(default_factory=list)

    def add(self, heading: str, text: str) -> None:
        self.sections.append((heading, text.rstrip()))

    def text(self) -> str:
        out = [self.title, "=" * len(self.title), ""]
        for heading, body in self.sections:
            out += [f"-- {heading}", body, ""]
        return "\n".join(out)


def _short(job_id: Any) -> str:
    return str(job_id)[:8]


def _log_excerpt(log: str, pattern: str = r"\] (start|success|failed|dead|swept|handed)", limit: int = 14) -> str:
    lines = [line for line in log.splitlines() if re.search(pattern, line)]
    return "\n".join(lines[:limit]) + (f"\n... ({len(lines) - limit} more)" if len(lines) > limit else "")


def _log_peak(log: str) -> int:
    return max((int(m) for m in re.findall(r"peak (\d+)\)", log)), default=0)


def _wait_all_final(stack: Stack, ids: list[str], timeout: float) -> db.JobsSummary:
    def done() -> db.JobsSummary | None:
        with stack.connect() as conn:
            s = queries.summarize_jobs(conn, job_ids=ids)
        return s if s.succeeded + s.dead == len(ids) else None

    return wait_for(done, timeout=timeout, interval=0.2, what=f"{len(ids)} jobs to finish")  # type: ignore[return-value]


def _dead_after_every_attempt_failed(conn: psycopg.Connection, ids: list[str]) -> int:
    """Dead jobs whose every allowed attempt failed: at a simulated failure rate of 0.2 and five
    attempts, about one job in 3,000 ends there by chance, which is the queue working as designed."""
    row = conn.execute(
        "select count(*) from jobs j where j.id = any(%(ids)s::uuid[]) and j.status = 'dead'"
        " and j.attempts = j.max_attempts and not exists (select 1 from job_attempts a"
        "  where a.job_id = j.id and a.outcome is distinct from 'failed')",
        {"ids": ids},
    ).fetchone()
    return int(row[0]) if row else 0


def _summary_table(s: db.JobsSummary) -> str:
    return format_table([s], ["jobs", "pending", "processing", "succeeded", "failed", "dead", "attempts",
                              "failed_attempts", "abandoned_attempts", "flyers"])


def concurrency_50(stack: Stack, p: Profile) -> Result:
    """Test 1: 50 jobs at once, one worker, concurrency 5: the cap holds."""
    r = Result("concurrency-50-jobs", "Test 1: 50 jobs at once, one worker with concurrency 5")
    api = stack.api_url or stack.start_api()
    worker = stack.start_worker("w1", concurrency=5, env=p.worker_env)
    sent = burst(api, 50, prefix=f"burst-{uuid.uuid4().hex[:8]}", progress=False)
    ids = [s.job_id for s in sent if s.job_id]
    r.add("burst of 50 through POST /api/jobs", format_table(
        [{"http_status": code, "responses": sum(1 for s in sent if s.status == code)}
         for code in sorted({s.status for s in sent})]))
    summary = _wait_all_final(stack, ids, p.timeout_s)
    with stack.connect() as conn:
        conc = db.report_concurrency(conn, prefix="w1")
        runs = db.report_double_runs(conn, prefix="w1")
        dead_unlucky = _dead_after_every_attempt_failed(conn, ids)
    log = worker.output()
    r.add("worker log (first lines)", _log_excerpt(log))
    r.add("peak jobs at once per worker, from job_attempts timestamps (pgqw report concurrency w1)",
          format_table(conc, ["worker_id", "peak_at_once", "attempts_run"]))
    r.add("the 50 jobs", _summary_table(summary))
    r.numbers = {
        "sent": len(sent), "accepted": sum(1 for s in sent if s.status == 202), "ids": ids,
        "peak_db": max((c.peak_at_once for c in conc), default=0), "peak_log": _log_peak(log),
        "attempts": summary.attempts, "failed_attempts": summary.failed_attempts,
        "abandoned_attempts": summary.abandoned_attempts, "succeeded": summary.succeeded,
        "dead": summary.dead, "dead_every_attempt_failed": dead_unlucky, "flyers": summary.flyers,
        "overlapping": runs.overlapping_jobs, "succeeded_twice": runs.succeeded_twice,
    }
    r.add("result", f"peak {r.numbers['peak_db']} (log says {r.numbers['peak_log']}); {summary.succeeded} succeeded "
          f"after {summary.attempts} attempts ({summary.failed_attempts} retries); {summary.flyers} flyers")
    stack.stop(worker)
    return r


def backoff_to_dead(stack: Stack, p: Profile) -> Result:
    """Test 2: every attempt fails: failed → … → dead, waits doubling plus jitter."""
    r = Result("backoff-to-dead", "Test 2: 100% failure, a job goes to dead with doubling waits")
    api = stack.api_url or stack.start_api()  # MAX_ATTEMPTS is the enqueuer's setting: the default 5
    worker = stack.start_worker("w-fail", env={**p.worker_env, **p.failing_env})
    sent = post_job(api, f"fail-{uuid.uuid4().hex[:8]}")
    assert sent.job_id, sent
    job_id = sent.job_id

    def dead() -> bool:
        with stack.connect() as conn:
            job = db.get_job(conn, job_id=job_id)
        return bool(job and job.status == "dead")

    wait_for(dead, timeout=p.timeout_s, interval=0.2, what="the job to go dead")
    with stack.connect() as conn:
        timeline = db.report_timeline(conn, job_id=job_id)
        job = db.get_job(conn, job_id=job_id)
    assert job is not None
    dead_list = stack.get_json("/api/jobs?status=dead&limit=100")
    listed = dead_list["data"] if isinstance(dead_list["data"], list) else dead_list["data"].get("jobs", [])
    attempts = stack.get_json(f"/api/jobs/{job_id}/attempts")["data"]
    waits = [float(t.wait_before_s) for t in timeline[1:]]
    r.add("worker log", _log_excerpt(worker.output(), limit=20))
    r.add(f"pgqw report timeline {job_id}", format_table(
        timeline, ["attempt", "worker_id", "started_at", "finished_at", "wait_before_s", "outcome", "error"]))
    base = p.retry_base_s
    r.add("waits against the backoff formula (base x 2^(n-1), plus up to the jitter, plus up to one poll)",
          format_table([{"before_attempt": n + 2, "shortest_allowed_s": base * 2 ** n,
                         "measured_s": w, "jitter_and_poll_s": round(w - base * 2 ** n, 3)}
                        for n, w in enumerate(waits)]))
    r.add("the dead job in GET /api/jobs?status=dead, with GET /api/jobs/:id/attempts",
          f"listed: {any(j['id'] == job_id for j in listed)}; status {job.status}; "
          f"attempts {job.attempts}/{job.max_attempts}; last error: {job.last_error}\n"
          + format_table([{k: a.get(k) for k in ("attempt", "workerId", "outcome", "error")} for a in attempts]))
    r.numbers = {"job_id": job_id, "status": job.status, "attempts": job.attempts, "waits": waits,
                 "listed_dead": any(j["id"] == job_id for j in listed), "api_attempts": len(attempts),
                 "outcomes": [t.outcome for t in timeline]}
    stack.stop(worker)
    return r


def kill_mid_job(stack: Stack, p: Profile) -> Result:
    """Test 3: SIGKILL a worker mid-job; another worker's sweep recovers its jobs."""
    r = Result("stuck-job-recovery", "Test 3: kill the worker mid-job (SIGKILL), a new worker recovers")
    api = stack.api_url or stack.start_api()
    crash = stack.start_worker("w-crash", env={**p.worker_env, **p.slow_env})
    ids = [post_job(api, f"slow-{uuid.uuid4().hex[:8]}").job_id for _ in range(3)]
    assert all(ids), ids

    def all_processing() -> list[db.Job] | None:
        with stack.connect() as conn:
            jobs = queries.jobs_by_id(conn, job_ids=ids)
        return jobs if all(j.status == "processing" and j.locked_by == "w-crash" for j in jobs) else None

    before = wait_for(all_processing, timeout=30, what="w-crash to take all three jobs")
    cols = ["id", "status", "attempts", "locked_by", "started_at"]

    def table(jobs: Any) -> str:
        return format_table([{**j.__dict__, "id": _short(j.id)} for j in jobs], cols)

    r.add("before the kill", table(before))
    crash.process.send_signal(signal.SIGKILL)
    crash.process.wait(timeout=10)
    time.sleep(0.5)
    with stack.connect() as conn:
        after_kill = queries.jobs_by_id(conn, job_ids=ids)
    r.add("after SIGKILL: nothing changed, the rows still name a worker that no longer exists",
          table(after_kill))
    restarted = stack.start_worker("w-restarted", env=p.worker_env | {"SIM_FAILURE_RATE": "0"})
    summary = _wait_all_final(stack, ids, p.timeout_s)
    with stack.connect() as conn:
        attempts = queries.attempts_for_jobs(conn, job_ids=ids)
    r.add("w-restarted log", _log_excerpt(restarted.output(), r"\] (worker started|swept|start|success)"))
    r.add("job_attempts of the three jobs", format_table(
        [{**a.__dict__, "job": _short(a.job_id)} for a in attempts],
        ["job", "attempt", "worker_id", "started_at", "finished_at", "outcome", "abandon_reason"]))
    r.numbers = {
        "still_processing_after_kill": sum(1 for j in after_kill if j.status == "processing"),
        "succeeded": summary.succeeded, "flyers": summary.flyers,
        "killed_outcomes": sorted({a.outcome or "running" for a in attempts if a.worker_id == "w-crash"}),
        "killed_reasons": sorted({a.abandon_reason or "" for a in attempts if a.worker_id == "w-crash"}),
        "next_outcomes": sorted({a.outcome or "running" for a in attempts if a.worker_id == "w-restarted"}),
        "restarted_log_swept": len(re.findall(r"\] swept", restarted.output())),
    }
    stack.stop(restarted)
    return r


def idempotency_key(stack: Stack, p: Profile) -> Result:
    """Test 4: the same Idempotency-Key twice, one after the other and at the same moment."""
    r = Result("idempotency-key", "Test 4: the same idempotency key twice")
    api = stack.api_url or stack.start_api()
    stamp = uuid.uuid4().hex[:8]
    seq_key, par_key = f"double-submit-{stamp}", f"double-submit-parallel-{stamp}"
    first, second = post_job(api, seq_key), post_job(api, seq_key)
    r.add("one after the other", f"first:  HTTP {first.status}  id {first.job_id}\n"
                                 f"second: HTTP {second.status}  id {second.job_id}")
    barrier = threading.Barrier(2)
    both: list[Any] = [None, None]

    def go(i: int) -> None:
        barrier.wait()
        both[i] = post_job(api, par_key)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    r.add("both at the same moment", f"request A: HTTP {both[0].status}  id {both[0].job_id}\n"
                                     f"request B: HTTP {both[1].status}  id {both[1].job_id}")
    with stack.connect() as conn:
        counts = queries.jobs_per_key(conn, keys=[seq_key, par_key])
    r.add("rows in jobs per key", format_table([{"idempotency_key": k, "jobs": n} for k, n in counts.items()]))
    r.numbers = {"sequential": [(first.status, first.job_id), (second.status, second.job_id)],
                 "parallel": [(b.status, b.job_id) for b in both], "rows_per_key": counts}
    return r


def two_workers(stack: Stack, p: Profile) -> Result:
    """Test 5: two workers on one queue, 50 jobs: no job run by both at once, none succeeded twice."""
    r = Result("two-workers", "Test 5: two workers against the same queue, 50 jobs")
    api = stack.api_url or stack.start_api()
    tag = uuid.uuid4().hex[:6]
    w1 = stack.start_worker(f"w1-{tag}", concurrency=5, env=p.worker_env)
    w2 = stack.start_worker(f"w2-{tag}", concurrency=5, env=p.worker_env)
    sent = burst(api, 50, prefix=f"two-{tag}", progress=False)
    ids = [s.job_id for s in sent if s.job_id]
    summary = _wait_all_final(stack, ids, p.timeout_s)
    with stack.connect() as conn:
        conc = db.report_concurrency(conn, prefix="w")
        conc = [c for c in conc if c.worker_id.endswith(tag)]
        runs = db.report_double_runs(conn, prefix="w")
        attempts = queries.attempts_for_jobs(conn, job_ids=ids)
        dead_unlucky = _dead_after_every_attempt_failed(conn, ids)
    chains: dict[uuid.UUID, list[db.Attempt]] = {}
    for a in attempts:
        chains.setdefault(a.job_id, []).append(a)
    shared = {j: c for j, c in chains.items() if len({a.worker_id for a in c}) > 1}
    retried = [c for c in chains.values() if len(c) > 1]
    r.add("peak jobs at once per worker (from job_attempts)", format_table(conc, ["worker_id", "peak_at_once",
                                                                              "attempts_run"]))
    r.add("checks", f"jobs worked on by two workers at the same time: {runs.overlapping_jobs}\n"
                    f"jobs that succeeded more than once:             {runs.succeeded_twice}\n"
                    f"flyers produced:                                {summary.flyers}")
    r.add("retries that moved between workers", "\n".join(
        f"{_short(j)}   " + "  ->  ".join(f"{a.attempt}:{a.worker_id.split('-')[0]}:{a.outcome}" for a in c)
        for j, c in list(shared.items())[:10]) or "(none this run)")
    r.add("the 50 jobs", _summary_table(summary))
    r.numbers = {"succeeded": summary.succeeded, "dead": summary.dead, "dead_every_attempt_failed": dead_unlucky,
                 "flyers": summary.flyers, "overlapping": runs.overlapping_jobs,
                 "succeeded_twice": runs.succeeded_twice, "peaks": {c.worker_id: c.peak_at_once for c in conc},
                 "attempts_by_worker": {c.worker_id: c.attempts_run for c in conc},
                 "retried_jobs": len(retried), "shared_retries": len(shared)}
    stack.stop(w1)
    stack.stop(w2)
    return r


def idempotent_work(stack: Stack, p: Profile) -> Result:
    """Extra: the flyer work run twice for one job leaves one flyer."""
    from pgqw.config import load

    r = Result("idempotent-work", "Extra: the work itself run twice produces one output (pgqw check-idempotency)")
    check = check_idempotency(stack.database_url, load())
    r.add("output", check.text)
    r.numbers = {"sequential": check.sequential_flyers, "concurrent": check.concurrent_flyers, "ok": check.ok}
    return r


def every_status(stack: Stack, p: Profile) -> Result:
    """Extra: one job in each of the five statuses at once, made with the stored functions."""
    r = Result("every-status", "Extra: the jobs table with every status at once")
    tag = uuid.uuid4().hex[:6]
    with stack.connect() as conn:
        def new(name: str) -> db.Job:
            return db.enqueue_job(conn, type="listing_flyer", payload=EXAMPLE_LISTING,
                                  idempotency_key=f"every-status-{name}-{tag}", queue=f"demo-{tag}")

        def take() -> db.ClaimedJob:
            job = db.claim_job(conn, worker_id=f"w-demo-{tag}", queues=[f"demo-{tag}"], lease_ms=3_600_000)
            assert job is not None
            return job

        new("succeeded")
        job = take()
        db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token)
        new("failed")
        job = take()
        db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token,
                       error="printer jammed; retry in 30 minutes", base_ms=1_800_000)
        new("dead")
        job = take()
        db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token,
                       error="payload cannot be rendered", retryable=False)
        new("processing")
        take()
        new("pending")
        page = db.list_jobs(conn, limit=50)
        rows = [j for j in page.jobs if j.queue == f"demo-{tag}"]
    r.add("jobs (newest first)", format_table(
        [{**j.__dict__, "id": _short(j.id), "attempt": f"{j.attempts}/{j.max_attempts}"} for j in rows],
        ["id", "status", "attempt", "locked_by", "run_at", "last_error"]))
    r.numbers = {"statuses": sorted(j.status for j in rows)}
    return r


SCENARIOS: dict[str, Callable[[Stack, Profile], Result]] = {
    "concurrency-50-jobs": concurrency_50,
    "backoff-to-dead": backoff_to_dead,
    "stuck-job-recovery": kill_mid_job,
    "idempotency-key": idempotency_key,
    "two-workers": two_workers,
    "idempotent-work": idempotent_work,
    "every-status": every_status,
}


def header(result: Result, profile: Profile, command: str, commit: str, server: str) -> str:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (f"# produced by: {command}\n# run at {now} on commit {commit}, PostgreSQL {server}\n"
            f"# profile {profile.name}: worker settings {profile.worker_env or 'defaults'}\n\n")
