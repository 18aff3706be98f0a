"""The delayed-jobs section: do jobs whose run_at (or retry time) is in the future start on time?

At a steady rate, noop jobs are enqueued each with a run_at drawn uniformly 0.5–2 s ahead, and one in
ten is a bench_fail_once job (bench/delayed_tasks.py) whose first attempt fails, so it is retried at the
run_at mark_failed gives it (queue_settings' backoff: 2 s, doubling, plus up to 1 s of jitter). Real
`pgqw worker` processes at default settings (concurrency 5, poll 1000 ms, LISTEN on, batch claim on) run
them. Lateness = the attempt's started_at − the run_at it waited for, both stamped by the database's clock:
a first attempt against the run_at it was enqueued with (kept in its payload), a retry against the jobs
row's run_at (mark_failed set it; the claim leaves it). The same run with WORKER_LISTEN=0 is the control:
the poll alone, which is how every delayed job was found before pgqw_jobs_at.
"""
from __future__ import annotations

import random
import time
import uuid
from datetime import datetime, timedelta, timezone

from pgqw import db

from . import queue
from .common import (
    Context,
    calls_delta,
    connect,
    function_calls,
    percentile,
    reset_queue,
)
from .procs import Workers

# Per profile: jobs per second (the 50), seconds of enqueueing, the run_at range ahead, the share
# of retries, and whether the polling-only control runs. The tiny one (the CI smoke run) is a few seconds:
# no retries (their backoff alone is 2 s) and no control.
PLAN = {
    "full": (50.0, 20.0, (0.5, 2.0), 0.1, True),
    "quick": (50.0, 5.0, (0.5, 2.0), 0.1, True),
    "tiny": (20.0, 1.0, (0.1, 0.3), 0.0, False),
}
WORKERS = 2

LATENESS_SQL = """
select a.attempt > 1 as retry,
       extract(epoch from a.started_at - case when a.attempt = 1 then (j.payload ->> 'run_at')::timestamptz
                                              else j.run_at end) * 1000.0 as late_ms
  from job_attempts a join jobs j on j.id = a.job_id
 where j.idempotency_key like %(prefix)s and (a.attempt = 1 or a.attempt = j.attempts)
"""


def _done(conn, prefix: str) -> int:
    row = conn.execute("select count(*) from jobs where idempotency_key like %s and status = 'succeeded'",
                       [prefix]).fetchone()
    return int(row[0]) if row else 0


def _rep(ctx: Context, conn, rate: float, seconds: float, delay_s: tuple[float, float], retry_share: float,
         listen: bool, rep: int) -> None:
    mode = "listen" if listen else "poll"
    key = f"worker.delayed.{mode}"
    n = max(1, int(rate * seconds))
    tag = uuid.uuid4().hex[:6]
    rng = random.Random(rep)
    reset_queue(conn)
    workers = Workers(ctx, WORKERS, tag=f"bench-delayed-{mode}-r{rep + 1}", batch_claim=True, listen=listen,
                      concurrency=5, poll_interval_ms=1000)
    workers.env["PGQW_TASKS"] = "pgqw.demo,bench.delayed_tasks"
    with workers:
        calls0 = function_calls(conn)
        t0 = time.perf_counter()
        retries = 0
        for i in range(n):
            wait = t0 + i / rate - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            at = datetime.now(timezone.utc) + timedelta(seconds=rng.uniform(*delay_s))
            fail = rng.random() < retry_share
            retries += fail
            db.enqueue_job(conn, type="bench_fail_once" if fail else queue.NOOP, payload={"run_at": at.isoformat()},
                           idempotency_key=f"{tag}-{i}", run_at=at)
        deadline = time.monotonic() + delay_s[1] + 10
        while time.monotonic() < deadline and _done(conn, f"{tag}-%") < n:
            workers.check()
            time.sleep(0.2)
    # After the workers stopped: a backend reports its function calls at most once a second, and at exit.
    time.sleep(1.0)
    calls = calls_delta(calls0, function_calls(conn))
    found = conn.execute(LATENESS_SQL, {"prefix": f"{tag}-%"}).fetchall()
    first = [float(late) for retry, late in found if not retry]
    again = [float(late) for retry, late in found if retry]
    if len(first) != n or len(again) != retries:
        ctx.results.errors.append(f"{key} rep {rep + 1}: {len(first)} of {n} first attempts and {len(again)} of "
                                  f"{retries} retries started")
    both = first + again
    label = (f"pgqw worker × {WORKERS}, {'LISTEN' if listen else 'polling only (1000 ms)'}, {rate:g} delayed jobs/s, "
             "lateness")
    r = ctx.results
    for p in (50, 99):
        r.add(f"{key}.p{p}", "delayed", f"{label} p{p}", "ms", percentile(both, p), better="lower")
    r.add(f"{key}.max", "delayed", f"{label} max", "ms", max(both) if both else float("nan"), better="lower")
    if again:
        r.add(f"{key}.retry.p99", "delayed", f"{label} p99, retries only", "ms", percentile(again, 99),
              better="lower")
    per_job = {name: calls.get(name, {}).get("calls", 0.0) / max(1, len(both))
               for name in ("claim_jobs", "next_run_at")}
    ctx.results.profiles.setdefault(key, []).append({"jobs": len(first), "retries": len(again), **{
        f"{name}_calls_per_attempt": v for name, v in per_job.items()}})
    ctx.log(f"{key} rep {rep + 1}: {len(first)} jobs + {len(again)} retries, lateness p50 "
            f"{percentile(both, 50):.1f} ms, p99 {percentile(both, 99):.1f} ms, max {max(both):.1f} ms "
            f"(retries p50 {percentile(again, 50) if again else float('nan'):.1f} ms); per attempt "
            f"{per_job['claim_jobs']:.2f} claim_jobs, {per_job['next_run_at']:.3f} next_run_at calls")


def section_delayed(ctx: Context) -> None:
    rate, seconds, delay_s, retry_share, control = PLAN.get(ctx.sizes.name, PLAN["quick"])
    with connect(ctx.dsn) as conn:
        for rep in range(ctx.sizes.reps):
            for listen in ((True, False) if control else (True,)):
                _rep(ctx, conn, rate, seconds, delay_s, retry_share, listen, rep)
        reset_queue(conn)
