"""The five break-it tests, plus the idempotent work and every status at once, with real API and
worker processes against a real Postgres. Latencies are shortened through the workers' settings
(tests.lab.scenarios.FAST); `pgqw evidence` runs the same scenarios with the demo's settings."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.lab import scenarios
from tests.lab.stack import Stack

P = scenarios.FAST


@pytest.fixture
def stack(db_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Stack]:
    s = Stack(db_url, tmp_path / "logs")
    try:
        yield s
    finally:
        s.close()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            for proc in s.procs:
                print(f"----- {proc.name} log -----\n{proc.output()[-6000:]}")


def test_break_it_concurrency_cap_holds_under_burst_of_50(stack: Stack) -> None:
    r = scenarios.concurrency_50(stack, P).numbers
    assert r["sent"] == 50 and r["accepted"] == 50
    assert r["peak_db"] == 5, "peak worked out from job_attempts timestamps"
    assert r["peak_log"] == 5, "peak the worker logged"
    # Every job ends: succeeded, or dead only after all five attempts failed (the simulated 20 %
    # failure rate makes that about one job in 3,000).
    assert r["succeeded"] + r["dead"] == 50 and r["dead"] == r["dead_every_attempt_failed"] <= 2
    assert r["attempts"] == r["succeeded"] + r["failed_attempts"] + r["abandoned_attempts"]
    assert r["flyers"] == r["succeeded"]
    assert r["overlapping"] == 0 and r["succeeded_twice"] == 0


def test_break_it_every_attempt_fails_job_goes_dead_with_doubling_waits(stack: Stack) -> None:
    r = scenarios.backoff_to_dead(stack, P).numbers
    assert r["status"] == "dead" and r["attempts"] == 5
    assert r["outcomes"] == ["failed"] * 5
    assert r["listed_dead"] is True and r["api_attempts"] == 5
    waits = r["waits"]
    assert len(waits) == 4
    slack = 0.6  # a poll interval, the worker's own latency and a busy 2-core machine
    for n, wait in enumerate(waits):
        shortest = P.retry_base_s * 2 ** n
        assert shortest <= wait <= shortest + P.retry_jitter_s + P.poll_s + slack, (n, waits)
    assert waits[3] > 2 * waits[1]  # doubling, not linear


def test_break_it_killed_worker_jobs_recovered_by_sweep(stack: Stack) -> None:
    r = scenarios.kill_mid_job(stack, P).numbers
    assert r["still_processing_after_kill"] == 3
    assert r["succeeded"] == 3 and r["flyers"] == 3
    assert r["killed_outcomes"] == ["abandoned"] and r["killed_reasons"] == ["lease_expired"]
    assert r["next_outcomes"] == ["succeeded"]
    assert r["restarted_log_swept"] == 3


def test_break_it_same_idempotency_key_twice_makes_one_job(stack: Stack) -> None:
    r = scenarios.idempotency_key(stack, P).numbers
    (s1, id1), (s2, id2) = r["sequential"]
    assert (s1, s2) == (202, 200) and id1 == id2
    statuses = sorted(s for s, _ in r["parallel"])
    assert statuses == [200, 202]
    assert len({i for _, i in r["parallel"]}) == 1
    assert set(r["rows_per_key"].values()) == {1}


def test_break_it_two_workers_never_run_one_job_at_once(stack: Stack) -> None:
    r = scenarios.two_workers(stack, P).numbers
    assert r["succeeded"] + r["dead"] == 50 and r["dead"] == r["dead_every_attempt_failed"] <= 2
    assert r["flyers"] == r["succeeded"]
    assert r["overlapping"] == 0
    assert r["succeeded_twice"] == 0
    assert len(r["peaks"]) == 2 and all(1 <= peak <= 5 for peak in r["peaks"].values())
    assert all(n > 0 for n in r["attempts_by_worker"].values()), "both workers took jobs"
    if r["retried_jobs"] >= 10:  # all ten retries staying on the worker that failed: ~1 in 1000
        assert r["shared_retries"] >= 1


def test_break_it_flyer_work_twice_leaves_one_flyer(stack: Stack) -> None:
    r = scenarios.idempotent_work(stack, P).numbers
    assert r["sequential"] == [0, 1]  # nothing after the run that died, one after the retry
    assert r["concurrent"] == 1


def test_break_it_every_status_at_once(stack: Stack) -> None:
    r = scenarios.every_status(stack, P).numbers
    assert r["statuses"] == ["dead", "failed", "pending", "processing", "succeeded"]
