"""queue_stats and the report functions: the numbers a DBA reads from psql and /metrics serves."""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from pgqw import db
from tests.helpers import enqueue, one


def _attempt(conn: psycopg.Connection, job_id, n: int, worker: str, start: float, end: float | None,
             outcome: str | None = "succeeded") -> None:
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    conn.execute(
        "insert into job_attempts (job_id, attempt, worker_id, started_at, finished_at, outcome, error,"
        " abandon_reason, lease_token_hash)"
        " values (%s, %s, %s, %s, %s, %s, %s, %s, sha256(uuid_send(gen_random_uuid())))",
        [job_id, n, worker, t0 + timedelta(seconds=start),
         None if end is None else t0 + timedelta(seconds=end), outcome,
         None if outcome in (None, "succeeded") else "x",
         "lease_expired" if outcome == "abandoned" else None],
    )


def _stat(stats: list[db.Stat], metric: str, label: str | None, queue: str | None = None) -> float:
    return next(s.value for s in stats if s.metric == metric and s.label == label and s.queue == queue)


def test_queue_stats_counts_jobs_attempts_and_events(conn: psycopg.Connection) -> None:
    a, b = enqueue(conn), enqueue(conn, queue="emails")
    enqueue(conn)
    claimed = db.claim_job(conn, worker_id="w1", queues=["default"])
    assert claimed is not None and claimed.id == a.id
    db.mark_succeeded(conn, job_id=a.id, lease_token=claimed.lease_token)
    db.claim_job(conn, worker_id="w1", queues=["emails"], lease_ms=1)
    conn.execute("select * from sweep_stuck_at(now() + interval '1 second')")
    stats = db.queue_stats(conn)
    assert _stat(stats, "jobs", "succeeded", "default") == 1
    assert _stat(stats, "jobs", "pending", "default") == 1
    assert _stat(stats, "jobs", "pending", "emails") == 1
    assert _stat(stats, "jobs", "dead", "emails") == 0
    assert _stat(stats, "attempts", "succeeded") == 1
    assert _stat(stats, "attempts", "abandoned") == 1
    assert _stat(stats, "worker_events", "claimed") == 2
    assert _stat(stats, "worker_events", "swept") == 1
    assert _stat(stats, "worker_events", "handed_back") == 0
    assert _stat(stats, "oldest_ready_age_seconds", None, "default") >= 0
    assert b.id


def test_queue_stats_on_empty_database_has_every_series(conn: psycopg.Connection) -> None:
    stats = db.queue_stats(conn)
    assert {s.label for s in stats if s.metric == "jobs"} == set(db.STATUSES)
    assert {s.label for s in stats if s.metric == "attempts"} == {"running", *_outcomes_allowed(conn)}
    assert all(s.value == 0 for s in stats)


def _outcomes_allowed(conn: psycopg.Connection) -> set[str]:
    """The values job_attempts.outcome may take, as the database's own constraint lists them."""
    [definition] = conn.execute("select pg_get_constraintdef(oid) from pg_constraint"
                                " where conname = 'job_attempts_outcome_check'").fetchone()
    return set(re.findall(r"'([a-z_]+)'", definition))


@pytest.mark.parametrize("estimated", [False, True], ids=["exact", "estimated"])
def test_queue_stats_counts_attempts_of_every_outcome(conn: psycopg.Connection, estimated: bool) -> None:
    outcomes = sorted(_outcomes_allowed(conn))
    # Each job with one attempt of every outcome: 3 jobs, or (estimated) 2,000, past the 10,000 attempts
    # above which the planner's figures are read, with the statistics an ANALYZE gives.
    jobs = 2000 if estimated else 3
    conn.execute(
        "insert into jobs (type, status, attempts, max_attempts, started_at, finished_at, idempotency_key, queue)"
        " select 'listing_flyer', 'succeeded', %s, 10, now(), now(), 'out-' || i, 'outcomes'"
        "   from generate_series(1, %s) i", [len(outcomes), jobs])
    conn.execute(
        "insert into job_attempts (job_id, attempt, worker_id, started_at, finished_at, outcome, error,"
        " abandon_reason, lease_token_hash)"
        " select j.id, o.n, 'w1', j.started_at, j.finished_at, o.outcome,"
        "        case when o.outcome <> 'succeeded' then 'x' end,"
        "        case when o.outcome = 'abandoned' then 'lease_expired' end, sha256(uuid_send(gen_random_uuid()))"
        "   from jobs j cross join unnest(%s::text[]) with ordinality as o(outcome, n) where j.queue = 'outcomes'",
        [outcomes])
    if estimated:
        conn.execute("analyze job_attempts")
    stats = db.queue_stats(conn)
    counts = {o: _stat(stats, "attempts", o) for o in outcomes}
    if estimated:
        assert _stat(stats, "stats_estimated", "job_attempts") == 1
        assert all(2000 * 0.8 <= n <= 2000 * 1.2 for n in counts.values()), counts
    else:
        assert _stat(stats, "stats_estimated", "job_attempts") == 0
        assert counts == {o: 3 for o in outcomes}


def test_report_concurrency_peak_from_timestamps(conn: psycopg.Connection) -> None:
    jobs = [enqueue(conn) for _ in range(4)]
    # w1 runs 0-10, 2-6, 5-8 (three at once at t=5), then 10-12 back to back with the first.
    _attempt(conn, jobs[0].id, 1, "w1", 0, 10)
    _attempt(conn, jobs[1].id, 1, "w1", 2, 6)
    _attempt(conn, jobs[2].id, 1, "w1", 5, 8)
    _attempt(conn, jobs[3].id, 1, "w1", 10, 12)
    _attempt(conn, jobs[3].id, 2, "x9", 20, 20)  # zero length still counts once
    got = {r.worker_id: r for r in db.report_concurrency(conn, prefix="")}
    assert (got["w1"].peak_at_once, got["w1"].attempts_run) == (3, 4)
    assert got["x9"].peak_at_once == 1
    assert [r.worker_id for r in db.report_concurrency(conn, prefix="w")] == ["w1"]


def test_report_concurrency_prefix_is_literal(conn: psycopg.Connection) -> None:
    job = enqueue(conn)
    _attempt(conn, job.id, 1, "w_1", 0, 1)
    _attempt(conn, job.id, 2, "wx1", 2, 3)
    assert [r.worker_id for r in db.report_concurrency(conn, prefix="w_")] == ["w_1"]


def test_report_double_runs_counts_overlaps_and_double_success(conn: psycopg.Connection) -> None:
    clean, overlapped, twice = enqueue(conn), enqueue(conn), enqueue(conn)
    _attempt(conn, clean.id, 1, "w1", 0, 5, "failed")
    _attempt(conn, clean.id, 2, "w2", 5, 9)
    _attempt(conn, overlapped.id, 1, "w1", 0, 5, "abandoned")
    _attempt(conn, overlapped.id, 2, "w2", 4, 9, "failed")
    _attempt(conn, twice.id, 1, "w1", 0, 1)
    _attempt(conn, twice.id, 2, "w2", 2, 3)
    got = db.report_double_runs(conn, prefix="w")
    assert (got.jobs_seen, got.attempts_seen) == (3, 6)
    assert got.overlapping_jobs == 1
    assert got.succeeded_twice == 1


def test_report_timeline_waits_between_attempts(conn: psycopg.Connection) -> None:
    job = enqueue(conn)
    _attempt(conn, job.id, 1, "w1", 0, 2, "failed")
    _attempt(conn, job.id, 2, "w1", 4.5, 5, "failed")
    _attempt(conn, job.id, 3, "w2", 10, None, None)
    got = db.report_timeline(conn, job_id=job.id)
    assert [(r.attempt, r.outcome) for r in got] == [(1, "failed"), (2, "failed"), (3, "running")]
    assert got[0].wait_before_s is None
    assert float(got[1].wait_before_s) == 2.5
    assert float(got[2].wait_before_s) == 5.0


@pytest.mark.parametrize(
    "call, code",
    [
        ("select * from report_timeline(null)", "QV400"),
        ("select * from report_timeline('00000000-0000-0000-0000-000000000000')", "QN404"),
        ("select * from report_latest_jobs(0)", "QV400"),
        ("select * from report_latest_jobs(null)", "QV400"),
    ],
)
def test_reports_bad_input_raises(conn: psycopg.Connection, call: str, code: str) -> None:
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(call)
    assert exc.value.sqlstate == code


def test_report_latest_jobs_newest_first(conn: psycopg.Connection) -> None:
    first = enqueue(conn)
    second = enqueue(conn)
    got = db.report_latest_jobs(conn, limit=1)
    assert len(got) == 1 and got[0].id in (first.id, second.id)
    assert one(conn, "select count(*) as n from report_latest_jobs(10)")["n"] == 2
