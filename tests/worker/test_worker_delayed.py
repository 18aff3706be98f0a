"""Jobs for later start on time in a real worker process that polls only every 30 s: one enqueued before the
worker started (found by next_run_at), one while it runs (heard on pgqw_jobs_at) and a retry (mark_failed's)."""
from __future__ import annotations

from datetime import timedelta

from tests.helpers import enqueue, rows


def test_worker_starts_jobs_for_later_and_retries_without_waiting_for_the_poll(conn, start_worker, until_all) -> None:
    before = enqueue(conn, type="noop", payload={}, delay=timedelta(seconds=3))
    worker = start_worker("later", env={"POLL_INTERVAL_MS": "30000", "SWEEP_INTERVAL_MS": "30000",
                                        "SIM_FAILURE_RATE": "1", "SIM_MIN_LATENCY_MS": "0", "SIM_MAX_LATENCY_MS": "0",
                                        "RETRY_BASE_DELAY_MS": "1000", "RETRY_MAX_JITTER_MS": "0"})
    during = enqueue(conn, type="noop", payload={}, delay=timedelta(seconds=1))
    flaky = enqueue(conn, max_attempts=2)  # a flyer that always fails: retried once, 1 s later
    until_all([before.id, during.id], "succeeded", timeout=20)
    until_all([flaky.id], "dead", timeout=20)
    late = {r["key"]: r["late"] for r in rows(conn, """
        select j.idempotency_key as key, extract(epoch from a.started_at - j.run_at) as late
          from jobs j join job_attempts a on a.job_id = j.id and a.attempt = j.attempts""")}
    # Not a timing measurement (bench/delayed.py is): only far from the 30 s poll, and never early.
    assert all(0 <= s < 10 for s in late.values()), late
    assert len(late) == 3 and not worker.lines("error")
