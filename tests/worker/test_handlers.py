"""The handlers called directly (no worker process): idempotent flyer work, simulated faults, registry."""
from __future__ import annotations

import dataclasses
import random
import threading

import psycopg
import pytest

from pgqw import db
from pgqw.config import Settings
from tests.helpers import LISTING, enqueue
from pgqw.worker.handlers import HANDLERS, Context, PermanentError, TransientError, listing_flyer, registry

QUIET = dataclasses.replace(Settings(), worker_id="t", sim_min_latency_ms=0, sim_max_latency_ms=0,
                            sim_failure_rate=0.0)


def a_job(conn: psycopg.Connection, **kwargs) -> db.Job:
    job = db.get_job(conn, job_id=enqueue(conn, **kwargs).id)
    assert job is not None
    return job


def test_listing_flyer_run_twice_in_sequence_leaves_one_flyer(conn, db_url) -> None:
    job = a_job(conn)
    ctx = Context.connecting(QUIET, db_url)
    assert listing_flyer(job, ctx).startswith("flyer saved")
    first = db.get_flyer(conn, job_id=job.id)
    assert listing_flyer(job, ctx) == "flyer already existed"
    assert db.count_flyers(conn, job_id=job.id) == 1
    assert db.get_flyer(conn, job_id=job.id) == first


def test_listing_flyer_run_twice_at_same_moment_leaves_one_flyer(conn, db_url) -> None:
    job = a_job(conn)
    # Each run's first database call is the existence check, its second the save. The barrier holds
    # both saves until both checks have found no flyer, so both really try to store one.
    both_checked = threading.Barrier(2, timeout=10)

    def context() -> Context:
        calls = 0

        def run(fn):
            nonlocal calls
            calls += 1
            if calls == 2:
                both_checked.wait()
            with psycopg.connect(db_url, autocommit=True) as c:
                return fn(c)

        return Context(settings=QUIET, worker_id="t", db=run)

    notes: list[str] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            notes.append(listing_flyer(job, context()))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not errors
    assert sorted(n.split(" (")[0] for n in notes) == ["flyer already saved by a concurrent run", "flyer saved"]
    assert db.count_flyers(conn, job_id=job.id) == 1


def test_listing_flyer_invalid_payload_is_permanent(conn, db_url) -> None:
    job = a_job(conn, payload={**LISTING, "currency": "XYZ"})
    with pytest.raises(PermanentError, match="currency must be one of"):
        listing_flyer(job, Context.connecting(QUIET, db_url))
    assert db.count_flyers(conn, job_id=job.id) == 0


def test_listing_flyer_simulated_latency_and_failure_follow_settings(conn, db_url) -> None:
    job = a_job(conn)
    slept: list[float] = []
    settings = dataclasses.replace(QUIET, sim_min_latency_ms=200, sim_max_latency_ms=400, sim_failure_rate=1.0)
    ctx = Context.connecting(settings, db_url, rng=random.Random(7), sleep=slept.append)
    for _ in range(20):
        with pytest.raises(TransientError, match=r"^Simulated rendering failure \(SIM_FAILURE_RATE=1\)$"):
            listing_flyer(job, ctx)
    assert len(slept) == 20 and all(0.2 <= s <= 0.4 for s in slept)
    assert max(slept) - min(slept) > 0.1  # uniform over the range, not a constant
    assert db.count_flyers(conn, job_id=job.id) == 0

    ctx = Context.connecting(dataclasses.replace(settings, sim_failure_rate=0.0), db_url, sleep=slept.append)
    assert listing_flyer(job, ctx).startswith("flyer saved")


def test_listing_flyer_failure_rate_is_a_probability(conn, db_url) -> None:
    job = a_job(conn)
    calls = {"failed": 0, "db": 0}

    def no_db(fn):
        calls["db"] += 1
        return True  # "the flyer exists": the work after the simulated fault is skipped

    ctx = Context(settings=dataclasses.replace(QUIET, sim_failure_rate=0.2), worker_id="t", db=no_db,
                  rng=random.Random(1))
    for _ in range(1000):
        try:
            listing_flyer(job, ctx)
        except TransientError:
            calls["failed"] += 1
    assert 150 <= calls["failed"] <= 250
    assert calls["db"] == 1000 - calls["failed"]


def test_registry_adds_noop_only_for_the_benchmark() -> None:
    assert set(registry({})) == set(HANDLERS) == {"listing_flyer"}
    assert set(registry({"PGQW_BENCH_NOOP": "1"})) == {"listing_flyer", "noop"}
    assert set(registry({"PGQW_BENCH_NOOP": "0"})) == {"listing_flyer"}
