"""The worker at work: real worker processes against a real database, one fresh database per test."""
from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
from collections import defaultdict

import psycopg
from pypdf import PdfReader

from pgqw import db
from tests.helpers import LISTING, SCHEMA, enqueue, job_row, rows
from tests.lab import ROOT
from tests.worker.conftest import SETTINGS_ENV, wait_for

RUNNING = re.compile(r"\(running (\d+)/(\d+), peak (\d+)\)")


def attempt_peaks(conn: psycopg.Connection) -> dict[str, int]:
    """Most attempts open at once per worker, from job_attempts' own timestamps: a sweep over the
    [started_at, finished_at] intervals where a finish at the same instant as a start comes first."""
    events: dict[str, list[tuple[object, int]]] = defaultdict(list)
    for a in rows(conn, "select worker_id, started_at, finished_at from job_attempts"):
        assert a["finished_at"] is not None, a
        events[a["worker_id"]] += [(a["started_at"], 1), (a["finished_at"], -1)]
    peaks = {}
    for worker, found in events.items():
        now = peak = 0
        for _, delta in sorted(found, key=lambda e: (e[0], e[1])):
            now += delta
            peak = max(peak, now)
        peaks[worker] = peak
    return peaks


def test_attempt_peaks_counts_overlap_only(conn: psycopg.Connection) -> None:
    # The measuring stick itself: two overlapping attempts count 2; back to back count 1.
    for n, (start, end) in enumerate([("10:00", "10:02"), ("10:01", "10:03"), ("10:03", "10:04")]):
        job = enqueue(conn)
        conn.execute(
            "insert into job_attempts (job_id, attempt, worker_id, started_at, finished_at, outcome, lease_token_hash)"
            " values (%s, 1, 'w', %s::timestamptz, %s::timestamptz, 'succeeded', sha256(uuid_send(gen_random_uuid())))",
            [job.id, f"2025-01-01 {start}", f"2025-01-01 {end}"],
        )
    assert attempt_peaks(conn) == {"w": 2}


def test_worker_cap_holds_under_burst_of_50(conn, start_worker, until_all) -> None:
    five = start_worker("cap-five", concurrency=5)
    three = start_worker("cap-three", concurrency=3)
    ids = [enqueue(conn).id for _ in range(50)]
    until_all(ids, "succeeded", timeout=30)

    # The database's own record: the most attempts open at once per worker is exactly its cap.
    assert attempt_peaks(conn) == {"cap-five": 5, "cap-three": 3}
    assert rows(conn, "select count(*) as n, max(attempts) as most from jobs")[0] == {"n": 50, "most": 1}
    # The worker's log agrees: running never above the cap, peak reached the cap.
    for worker, cap in ((five, 5), (three, 3)):
        counts = [tuple(map(int, RUNNING.search(line).groups())) for line in worker.lines("start")]
        assert counts, worker.text()
        assert all(running <= cap and total == cap and peak <= cap for running, total, peak in counts)
        assert max(peak for _, _, peak in counts) == cap
    assert len(five.lines("start")) + len(three.lines("start")) == 50
    # A success is logged just after its commit: the last lines may trail the database by a moment.
    wait_for("50 success lines", lambda: len(five.lines("success")) + len(three.lines("success")) == 50)


def test_worker_one_at_a_time_claims_and_marks_hold_the_cap_too(conn, start_worker, until_all) -> None:
    worker = start_worker("single", concurrency=3, env={"WORKER_BATCH_CLAIM": "0", "WORKER_BATCH_MARK": "0"})
    assert "batch claim off" in worker.lines("worker started:")[0]
    assert "batch mark off" in worker.lines("worker started:")[0]
    ids = [enqueue(conn).id for _ in range(15)]
    until_all(ids, "succeeded", timeout=20)
    assert attempt_peaks(conn) == {"single": 3}
    assert max(int(RUNNING.search(line).group(1)) for line in worker.lines("start")) == 3


def test_worker_flyer_pdf_has_title_price_and_address(conn, start_worker, until_all) -> None:
    start_worker("pdf", env={"PUBLIC_URL": "https://flyers.example"})
    job = enqueue(conn)
    until_all([job.id], "succeeded")
    result = db.get_result(conn, job_id=job.id)
    assert result is not None
    pdf = bytes(result.data or b"")
    assert pdf.startswith(b"%PDF-")
    reader = PdfReader(io.BytesIO(pdf))
    assert len(reader.pages) == 1
    text = " ".join(" ".join(page.extract_text() for page in reader.pages).split())
    assert LISTING["title"] in text
    assert "₦2,700,000" in text
    assert LISTING["address"] in text
    assert "3 bedrooms" in text
    assert f"https://flyers.example/api/jobs/{job.id}/flyer" in text


def test_worker_unknown_job_type_waits_for_a_worker_that_knows_it(conn, start_worker, until_all, tmp_path) -> None:
    """A job of a type this worker does not run is not claimed (a rolling deploy: only the new
    release knows it, and its deploy registered it): it waits, visibly, until a worker that runs the type
    takes it."""
    worker = start_worker("old-release", concurrency=1)
    db.register_task_types(conn, types=[{"name": "new_type", "payload_schema": {}}])  # pgqw tasks register
    bad = enqueue(conn, type="new_type", payload={"x": 1})
    good = enqueue(conn)
    until_all([good.id], "succeeded")  # enqueued after the unknown one: the worker carried on
    row = job_row(conn, bad.id)
    assert (row["status"], row["attempts"]) == ("pending", 0)
    assert db.get_attempts(conn, job_id=bad.id) == []
    waiting = [s for s in db.queue_stats(conn) if s.metric == "waiting_without_worker"]
    assert [(s.queue, s.label, s.value) for s in waiting] == [("default", "new_type", 1.0)]
    assert worker.alive()

    (tmp_path / "new_release_tasks.py").write_text(
        "from pydantic import BaseModel\n"
        "from pgqw.tasks import task\n\n\n"
        "class X(BaseModel):\n    x: int\n\n\n"
        "@task('new_type')\n"
        "def new_type(payload: X, ctx) -> dict:\n    return {'doubled': payload.x * 2}\n")
    start_worker("new-release", env={"PGQW_TASKS": "new_release_tasks", "PYTHONPATH": str(tmp_path)})
    until_all([bad.id], "succeeded")
    assert db.get_result(conn, job_id=bad.id).value == {"doubled": 2}
    assert [s for s in db.queue_stats(conn) if s.metric == "waiting_without_worker"] == []


def test_worker_invalid_payload_goes_dead_at_once(conn, start_worker, until_all) -> None:
    # Every simulated attempt would fail: the payload check comes first, so it is dead, not failed.
    worker = start_worker("invalid", env={"SIM_FAILURE_RATE": "1"})
    job = enqueue(conn, payload={**LISTING, "priceMinor": "a lot", "bedrooms": None})
    until_all([job.id], "dead")
    row = job_row(conn, job.id)
    assert row["attempts"] == 1
    assert row["last_error"].startswith("invalid payload: ")
    assert "priceMinor: Input should be a valid integer" in row["last_error"]
    assert "bedrooms: Input should be a valid integer" in row["last_error"]
    assert db.get_result(conn, job_id=job.id) is None
    # A job's line is logged just after its commit: wait for it rather than read the log at once.
    assert len(worker.wait_log("dead")) == 1 and not worker.lines("failed")


def test_worker_transient_failures_retry_with_backoff_then_dead(conn, start_worker, until_all) -> None:
    worker = start_worker("flaky", env={"SIM_FAILURE_RATE": "1", "RETRY_BASE_DELAY_MS": "100"})
    job = enqueue(conn, max_attempts=3)
    until_all([job.id], "dead")
    tries = db.get_attempts(conn, job_id=job.id)
    assert [(a.attempt, a.outcome) for a in tries] == [(1, "failed"), (2, "failed"), (3, "failed")]
    assert all(a.error == "Simulated rendering failure (SIM_FAILURE_RATE=1)" for a in tries)
    # Backoff from the stored function: 100 ms after the first failure, 200 ms after the second.
    assert (tries[1].started_at - tries[0].finished_at).total_seconds() >= 0.1
    assert (tries[2].started_at - tries[1].finished_at).total_seconds() >= 0.2
    failed = worker.wait_log("failed", count=3)
    assert len(failed) == 3
    assert all("next run" in line for line in failed[:2]) and failed[2].endswith("(running 0/5, peak 1)")
    assert "→ dead" in failed[2]


def _start_delay(conn: psycopg.Connection, job_id) -> float:
    job = db.get_job(conn, job_id=job_id)
    [first] = db.get_attempts(conn, job_id=job_id)
    return (first.started_at - job.created_at).total_seconds()


def test_worker_listen_starts_job_long_before_poll(conn, start_worker, until_all) -> None:
    # Polling every 10 s: only the notification can start these jobs within a quarter second.
    start_worker("listen", env={"POLL_INTERVAL_MS": "10000", "SWEEP_INTERVAL_MS": "10000",
                                "SIM_MIN_LATENCY_MS": "10", "SIM_MAX_LATENCY_MS": "30"})
    # Its startup claim has found nothing once it says it waits: the first job cannot ride on it.
    wait_for("the worker waits", lambda: rows(conn, "select 1 from queue_waiters where worker_id = 'listen'") or None,
             timeout=10)
    delays = []
    for _ in range(3):
        job = enqueue(conn)
        until_all([job.id], "succeeded", timeout=5)
        delays.append(_start_delay(conn, job.id))
    assert max(delays) < 0.25, delays


def _calls(conn: psycopg.Connection, *functions: str) -> int:
    """Calls of these functions in this database, as the server counts them (track_functions). A
    backend reports its counts within about a second of its last call."""
    found = rows(conn, "select coalesce(sum(calls), 0) as n from pg_stat_user_functions where funcname = any(%s)",
                 [list(functions)])
    return int(found[0]["n"])


def _claim_calls(conn: psycopg.Connection) -> int:
    return _calls(conn, "claim_job", "claim_jobs")


def test_worker_idle_and_listening_claims_only_at_start_and_while_it_settles(conn, start_worker) -> None:
    """Idle, a listening worker claims at its start and once in each round of its waiting handshake (each
    such round asks waits_settled), then no more: while six of its sweeps (every 300 ms) pass, a worker that
    polled every 100 ms would have claimed about eighteen times. A session reports its counts late while
    it is idle (up to ten seconds after its last report), and always before it leaves pg_stat_activity:
    they are read once the worker's sessions are gone."""
    conn.execute(f'alter database "{conn.info.dbname}" set track_functions = \'pl\'')  # for sessions from now on
    worker = start_worker("idle", env={"POLL_INTERVAL_MS": "100", "SWEEP_INTERVAL_MS": "300"})
    wait_for("six sweeps reported", lambda: _calls(conn, "sweep_stuck") >= 6, timeout=20)
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0
    wait_for("the worker's sessions gone", lambda: not _sessions(conn, "pgqw-worker idle %"), timeout=10)
    settles = _calls(conn, "waits_settled")
    assert settles >= 1  # it did say it waits, and settled before it slept
    assert _claim_calls(conn) == 1 + settles
    # The same measure sees a worker that polls: the count above could have moved.
    polled = _claim_calls(conn)
    start_worker("poller", env={"WORKER_LISTEN": "0", "POLL_INTERVAL_MS": "100"})
    wait_for("a polling worker's claims reported", lambda: _claim_calls(conn) >= polled + 5, timeout=15)


def test_worker_idle_and_listening_is_woken_by_a_job(conn, start_worker, until_all) -> None:
    worker = start_worker("woken", env={"POLL_INTERVAL_MS": "60000", "SWEEP_INTERVAL_MS": "60000"})
    wait_for("the worker waits", lambda: rows(conn, "select 1 from queue_waiters where worker_id = 'woken'") or None,
             timeout=10)
    job = enqueue(conn)  # the notification wakes it: no poll and no sweep for a minute
    until_all([job.id], "succeeded", timeout=5)
    assert len(worker.wait_log("success")) == 1  # logged just after the commit


def _sessions(conn: psycopg.Connection, name_like: str) -> list:
    return rows(conn, "select pid from pg_stat_activity where application_name like %s", [name_like])


def test_worker_listen_off_polls_without_listening(conn, start_worker, until_all) -> None:
    worker = start_worker("nolisten", env={"WORKER_LISTEN": "0", "POLL_INTERVAL_MS": "200"})
    assert "listen off" in worker.lines("worker started:")[0]
    ids = [enqueue(conn).id for _ in range(3)]
    until_all(ids, "succeeded", timeout=5)
    assert max(_start_delay(conn, i) for i in ids) < 1.0
    sessions = [r["application_name"] for r in rows(
        conn, "select application_name from pg_stat_activity where application_name like 'pgqw-worker nolisten%'")]
    assert sessions and all(name == "pgqw-worker nolisten pool" for name in sessions), sessions


def test_worker_queues_option_takes_only_its_queues(conn, start_worker, until_all) -> None:
    start_worker("emails-only", env={"WORKER_QUEUES": "emails"})
    other = enqueue(conn)
    mine = enqueue(conn, queue="emails")
    until_all([mine.id], "succeeded")
    # The other job is older, so any claim without the queue filter would have taken it first.
    assert job_row(conn, other.id)["status"] == "pending"


def _worker_cli(db_url: str, tmp_path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS_ENV}
    env["DATABASE_URL"] = db_url
    return subprocess.run([sys.executable, "-m", "pgqw.cli", "worker", "--id", "cli"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=30)


def test_worker_cli_unmigrated_database_is_one_line_error(empty_db_url, tmp_path) -> None:
    done = _worker_cli(empty_db_url, tmp_path)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"pgqw worker: the database has no queue in schema {SCHEMA} (")
    assert "; run `pgqw migrate` first" in line


def test_worker_cli_unreachable_database_is_one_line_error(tmp_path) -> None:
    done = _worker_cli(f"host={tmp_path / 'no-server-here'} dbname=x", tmp_path)
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("pgqw worker: cannot reach the database:")
