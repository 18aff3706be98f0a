"""The worker under faults: killed, stopped, its connections killed, its jobs outliving their lease."""
from __future__ import annotations

import signal
import time

import psycopg

from pgqw import db
from pgqw.schema import qualify
from tests.helpers import enqueue, job_row, rows
from tests.worker.conftest import wait_for

SLOW = {"SIM_MIN_LATENCY_MS": "20000", "SIM_MAX_LATENCY_MS": "20000"}  # still running when we act


def held_by(conn: psycopg.Connection, worker_id: str) -> int:
    return rows(conn, "select count(*) as n from jobs where status = 'processing' and locked_by = %s",
                [worker_id])[0]["n"]


def outcomes(conn: psycopg.Connection, job_id) -> list[tuple[int, str, str | None]]:
    return [(a.attempt, a.worker_id, a.outcome) for a in db.get_attempts(conn, job_id=job_id)]


def test_worker_sigkill_mid_job_is_recovered_by_another_workers_sweep(conn, start_worker, until_all) -> None:
    lease = {"STUCK_JOB_TIMEOUT_MS": "1000", "SWEEP_INTERVAL_MS": "200"}
    doomed = start_worker("kill-a", concurrency=3, env={**SLOW, **lease})
    ids = [enqueue(conn).id for _ in range(3)]
    wait_for("3 jobs held by kill-a", lambda: held_by(conn, "kill-a") == 3)
    doomed.signal(signal.SIGKILL)
    assert doomed.wait(5) == -signal.SIGKILL
    killed_at = rows(conn, "select now() as t")[0]["t"]

    rescuer = start_worker("kill-b", env=lease)
    until_all(ids, "succeeded", timeout=15)
    for job_id in ids:
        assert outcomes(conn, job_id) == [(1, "kill-a", "abandoned"), (2, "kill-b", "succeeded")]
        first = db.get_attempts(conn, job_id=job_id)[0]
        assert "worker kill-a stopped responding" in first.error
        assert first.finished_at >= killed_at  # held (heartbeats) until the kill, swept after
        assert db.get_result(conn, job_id=job_id) is not None
    swept = rescuer.lines("swept")
    assert len(swept) == 3 and all("of worker kill-a" in line and line.endswith("→ pending") for line in swept)


def test_worker_sigterm_drains_running_jobs_and_claims_no_more(conn, start_worker, until_all) -> None:
    worker = start_worker("drain", concurrency=3, env={
        "SIM_MIN_LATENCY_MS": "700", "SIM_MAX_LATENCY_MS": "700", "SHUTDOWN_GRACE_MS": "10000"})
    for _ in range(5):
        enqueue(conn)
    worker.wait_log("start", 3)
    began = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0
    assert time.monotonic() - began < 5  # left as soon as the jobs were done, not after the grace

    by_status = {s: [r["id"] for r in rows(conn, "select id from jobs where status = %s", [s])]
                 for s in ("succeeded", "pending")}
    assert len(by_status["succeeded"]) == 3 and len(by_status["pending"]) == 2
    for job_id in by_status["succeeded"]:
        assert outcomes(conn, job_id) == [(1, "drain", "succeeded")]
    for job_id in by_status["pending"]:  # slots freed during the drain were not used
        assert job_row(conn, job_id)["attempts"] == 0
    assert len(worker.lines("start")) == 3 and len(worker.lines("success")) == 3
    assert not worker.lines("handed back")
    assert "waiting up to 10.0s for 3 running job(s)" in worker.lines("stopping")[0]
    assert worker.lines("stopped")


def test_worker_sigterm_hands_back_jobs_still_running_after_grace(conn, start_worker, until_all) -> None:
    worker = start_worker("leaver", concurrency=2, env={**SLOW, "SHUTDOWN_GRACE_MS": "500"})
    ids = [enqueue(conn).id for _ in range(2)]
    worker.wait_log("start", 2)
    began = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0
    # The grace was honoured, and the handler threads still sleeping did not hold the exit.
    assert 0.5 <= time.monotonic() - began < 4

    for job_id in ids:
        row = job_row(conn, job_id)
        assert (row["status"], row["attempts"], row["max_attempts"], row["locked_by"]) == ("pending", 1, 6, None)
        [attempt] = db.get_attempts(conn, job_id=job_id)
        assert (attempt.outcome, attempt.error) == (
            "abandoned", "handed back by worker leaver: worker leaver shutting down")
    assert len(worker.lines("handed back")) == 2
    assert "0 handed back" not in worker.lines("stopped")[0]

    # Pending again, runnable at once: the next worker takes them as attempt 2.
    start_worker("taker")
    until_all(ids, "succeeded")
    for job_id in ids:
        assert outcomes(conn, job_id) == [(1, "leaver", "abandoned"), (2, "taker", "succeeded")]


def test_worker_second_signal_exits_at_once(conn, start_worker) -> None:
    worker = start_worker("impatient", env={**SLOW, "SHUTDOWN_GRACE_MS": "30000"})
    job = enqueue(conn)
    worker.wait_log("start")
    worker.signal(signal.SIGINT)
    worker.wait_log("stopping")
    began = time.monotonic()
    worker.signal(signal.SIGINT)
    assert worker.wait(5) == 128 + signal.SIGINT
    assert time.monotonic() - began < 2
    # Not handed back: still held until its lease expires and a sweep takes it.
    row = job_row(conn, job.id)
    assert (row["status"], row["locked_by"]) == ("processing", "impatient")


def test_worker_survives_pg_terminate_backend_mid_run(conn, start_worker, until_all) -> None:
    # Polling and sweeping every 5 s: after the storm, only a re-established LISTEN starts a job at once.
    worker = start_worker("victim", concurrency=3, env={"POLL_INTERVAL_MS": "5000", "SWEEP_INTERVAL_MS": "5000"})
    ids = [enqueue(conn).id for _ in range(20)]
    worker.wait_log("start", 3)
    killed = 0
    for _ in range(6):
        killed += rows(conn, "select count(*) filter (where pg_terminate_backend(pid)) as n from pg_stat_activity"
                             " where application_name like 'pgqw-worker victim %'")[0]["n"]
        time.sleep(0.15)
    assert killed >= 6  # at least the listener every round
    until_all(ids, "succeeded", timeout=30)

    assert worker.alive()
    assert worker.lines("db error")
    # Every result was recorded by retrying on a new connection, none given up or refused.
    assert not worker.lines("error") and not worker.lines("ignored late result")
    # A lost connection never costs an attempt: none failed (a claim whose reply was lost would show
    # up as an abandoned attempt recovered by the sweep, never as a failure).
    assert rows(conn, "select count(*) as n from job_attempts where outcome = 'failed'")[0]["n"] == 0
    assert rows(conn, "select count(*) as n from job_attempts where outcome is null")[0]["n"] == 0
    assert all(db.get_result(conn, job_id=job_id) is not None for job_id in ids)

    worker.wait_log("listen")  # "listen  reconnected; …"
    time.sleep(0.5)  # idle: the claim after the last success is done, so only a NOTIFY can wake it
    job = enqueue(conn)
    until_all([job.id], "succeeded", timeout=5)
    [attempt] = db.get_attempts(conn, job_id=job.id)
    assert (attempt.started_at - db.get_job(conn, job_id=job.id).created_at).total_seconds() < 1.0


def test_worker_heartbeat_keeps_job_longer_than_lease_from_running_twice(conn, start_worker, until_all) -> None:
    lease = {"STUCK_JOB_TIMEOUT_MS": "1000", "SWEEP_INTERVAL_MS": "100"}
    slow = start_worker("beating", concurrency=1, env={
        **lease, "SIM_MIN_LATENCY_MS": "3000", "SIM_MAX_LATENCY_MS": "3000"})
    job = enqueue(conn)
    wait_for("the job held by beating", lambda: held_by(conn, "beating") == 1)
    sweeper = start_worker("sweeper", env=lease)  # sweeps every 100 ms and would take the job

    # The lease moves forward while the job runs: it is now later than claim + lease.
    wait_for("a heartbeat extending the lease", lambda: rows(
        conn, "select lease_expires_at > started_at + interval '1.2 seconds' as moved from jobs")[0]["moved"],
        timeout=3)
    until_all([job.id], "succeeded", timeout=10)
    [attempt] = db.get_attempts(conn, job_id=job.id)
    assert (attempt.attempt, attempt.worker_id, attempt.outcome) == (1, "beating", "succeeded")
    assert (attempt.finished_at - attempt.started_at).total_seconds() > 2.5  # well past the 1 s lease
    assert not sweeper.lines("swept") and not sweeper.lines("start")
    assert not slow.lines("lost") and not slow.lines("ignored late result")


def test_worker_job_past_lease_without_heartbeat_is_swept_and_late_result_ignored(
        conn, start_worker, until_all) -> None:
    # The control for the test above: heartbeats too rare for the lease, so the job is swept
    # while it still runs, runs again elsewhere, and the first run's result is refused (QL409).
    lease = {"STUCK_JOB_TIMEOUT_MS": "500", "SWEEP_INTERVAL_MS": "100"}
    late = start_worker("late", concurrency=1, env={
        **lease, "HEARTBEAT_INTERVAL_MS": "1500", "SIM_MIN_LATENCY_MS": "3000", "SIM_MAX_LATENCY_MS": "3000"})
    assert late.lines("warning")  # heartbeat not shorter than the lease: it says so at start
    job = enqueue(conn)
    wait_for("the job held by late", lambda: held_by(conn, "late") == 1)
    start_worker("rescuer", env=lease)

    until_all([job.id], "succeeded", timeout=10)
    assert outcomes(conn, job.id) == [(1, "late", "abandoned"), (2, "rescuer", "succeeded")]
    late.wait_log("lost")
    late.wait_log("ignored late result", timeout=10)
    [lost] = late.lines("lost")
    [ignored] = late.lines("ignored late result")
    assert "no longer held by its lease" in lost  # the lease token speaks for the attempt, not the worker's name
    assert "attempt 1 is no longer held by its lease" in ignored
    assert outcomes(conn, job.id)[-1] == (2, "rescuer", "succeeded")  # the late result changed nothing
    assert job_row(conn, job.id)["status"] == "succeeded"
    assert db.get_result(conn, job_id=job.id) is not None


def test_worker_without_lease_setting_heartbeats_for_the_table_lease(conn, start_worker, until_all) -> None:
    """A DBA lowered queue_settings.lease_ms; a worker started without STUCK_JOB_TIMEOUT_MS gets
    that lease from its claim (the database's answer, not a copy of the table read at start),
    heartbeats every third of it, and its slow job is not swept."""
    conn.execute("update queue_settings set lease_ms = 1000")
    slow = start_worker("table-lease", concurrency=1, env={
        "STUCK_JOB_TIMEOUT_MS": "", "HEARTBEAT_INTERVAL_MS": "",
        "SIM_MIN_LATENCY_MS": "3000", "SIM_MAX_LATENCY_MS": "3000"})
    assert "lease queue_settings" in slow.lines("worker started:")[0]
    job = enqueue(conn)
    wait_for("the job held by table-lease", lambda: held_by(conn, "table-lease") == 1)
    [lease] = slow.wait_log("lease")
    assert "1000ms granted by the claim" in lease and "heartbeat every 333ms" in lease
    sweeper = start_worker("sweeper", env={"SWEEP_INTERVAL_MS": "100"})
    until_all([job.id], "succeeded", timeout=10)
    assert outcomes(conn, job.id) == [(1, "table-lease", "succeeded")]
    assert not sweeper.lines("swept")


def test_worker_frozen_past_its_lease_stores_no_flyer_for_a_job_that_went_dead(conn, start_worker) -> None:
    """The flyer is stored in the same transaction as the job's success. A worker frozen mid-job
    (SIGSTOP) loses its lease; its job, on its only attempt, is swept to dead. Thawed, the worker
    finishes the render and tries to store the flyer with the success: refused (QL409), rolled back.
    A dead job never has a flyer (found by pgqw soak: saving first, marking later, left some)."""
    lease = {"STUCK_JOB_TIMEOUT_MS": "1000", "SWEEP_INTERVAL_MS": "200"}
    frozen = start_worker("frozen", env={"SIM_MIN_LATENCY_MS": "2000", "SIM_MAX_LATENCY_MS": "2000", **lease})
    job = enqueue(conn, max_attempts=1)
    # Listed as a job that runs alone (as a sweep lists one whose worker held others): a lapsed lease of it
    # counts, so its only attempt's ends it dead.
    conn.execute(qualify("insert into pgqw.job_isolation (job_id) values (%s)"), [job.id])
    frozen.wait_log("start")
    frozen.signal(signal.SIGSTOP)
    try:
        start_worker("sweeper", env=lease)
        wait_for("the frozen worker's job to be swept to dead", lambda: job_row(conn, job.id)["status"] == "dead")
    finally:
        frozen.signal(signal.SIGCONT)
    frozen.wait_log("ignored late result", timeout=15)
    assert job_row(conn, job.id)["status"] == "dead"
    assert db.get_result(conn, job_id=job.id) is None
    assert [(a.worker_id, a.outcome, a.abandon_reason) for a in db.get_attempts(conn, job_id=job.id)] == [
        ("frozen", "abandoned", "lease_expired")]
    assert frozen.lines("success") == []
