"""`./run soak` (python -m tests.lab.soak): the chaos soak run end to end at CI size (a server of its own, real worker processes,
SIGKILLs, terminated connections, a server restart), its checks shown able to say FAIL on a database
broken by hand. (A flyer saved by a worker that died before its success was recorded cannot happen:
a job's result is written only by mark_succeeded, with the success.)"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from pgqw import db, launch
from tests.helpers import enqueue
from tests.lab import ROOT
from tests.lab.soak import check_database

PDF = b"%PDF-1.4 made by hand for a soak check test"

SOAK = [sys.executable, "-m", "tests.lab.soak"]  # what ./run soak runs

DB_CHECKS = [
    "jobs succeeded or dead", "jobs processing", "jobs pending or failed", "flyers", "flyers of jobs not succeeded",
    "succeeded jobs without a flyer", "jobs run to success twice", "succeeded attempts",
    "jobs with overlapping attempts", "attempts not finished", "attempt rows", "jobs whose attempts <> attempt rows",
]


def soak_env() -> dict[str, str]:
    """The caller's environment without a database or worker settings: the soak starts its own server."""
    return launch.child_env()


def table_rows(output: str) -> dict[str, tuple[str, str, str]]:
    """The check table's rows: figure → (value, expected, OK|FAIL). Columns are 2+ spaces apart."""
    rows = {}
    for line in output.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == 4 and cells[3] in ("OK", "FAIL"):
            rows[cells[0]] = (cells[1], cells[2], cells[3])
    return rows


# ----------------------------------------------------------------------------- the soak itself

def test_soak_ci_sized_run_loses_nothing_through_kills_terminations_and_a_restart(tmp_path: Path) -> None:
    evidence = tmp_path / "soak.txt"
    started = time.monotonic()
    done = subprocess.run(
        [*SOAK, "--jobs", "300", "--workers", "3", "--kills", "2", "--terminations", "3", "--restarts", "1",
         "--seed", "7", "--timeout", "150", "--run-dir", str(tmp_path / "run"), "--evidence", str(evidence)],
        cwd=ROOT, env=soak_env(), capture_output=True, text=True, timeout=240)
    took = time.monotonic() - started
    out = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}\n{out[-6000:]}\n{done.stderr[-3000:]}"
    rows = table_rows(out)
    for figure in ["jobs", *DB_CHECKS, "run finished within --timeout", "workers that exited unasked",
                   "workers not exiting 0 on the final SIGTERM", "restarts after which every worker came back"]:
        assert rows.get(figure, ("", "", ""))[2] == "OK", (figure, rows.get(figure), out[-6000:])
    assert rows["jobs"][0] == "300"
    assert not [f for f, r in rows.items() if r[2] != "OK"]
    # The faults really happened, at least as many as asked.
    assert int(rows["SIGKILLs of workers"][0]) >= 2
    assert int(rows["backend terminations"][0]) >= 3
    assert int(rows["server restarts"][0]) >= 1
    assert rows["restarts after which every worker came back"][0].startswith("1 of 1")
    assert re.search(r"^SIGKILL of a worker \(started again after a pause\)\s+2\s+[2-9]\s*$", out, re.M)
    assert re.search(r"^pg_terminate_backend of a worker connection\s+3\s+[3-9]\s*$", out, re.M)
    assert re.search(r"^server restart \(workers left to reconnect by themselves\)\s+1\s+1\s*$", out, re.M)
    assert len(re.findall(r"^\s*\S+s\s+\d+%\s+SIGKILL w\d-\d+ \(pid \d+\)", out, re.M)) >= 2
    assert len(re.findall(r"pg_terminate_backend\(\d+\): pgqw-worker w\d-\d+ (pool|listen)", out)) >= 3
    assert "server restart: stop -m immediate" in out
    assert re.search(r"every worker reconnected [\d.]+s after the server came back", out)
    assert "result: OK: 300 jobs" in out
    # Each killed worker came back under a new id, with a log of its own.
    logs = sorted(p.name for p in (tmp_path / "run" / "workers").glob("*.log"))
    assert {"w1-1.log", "w2-1.log", "w3-1.log"} <= set(logs) and len(logs) >= 5, logs
    # The server was its own: started, and cleaned away after a run without failures.
    data = re.search(r"owned by this soak \(tests\.lab\.cluster on port \d+, data in (\S+)\), so it may restart it", out)
    assert data and not Path(data.group(1)).parent.exists()
    # --evidence wrote the same output, the command first.
    written = evidence.read_text().splitlines()
    assert written[0].startswith("# pgqw soak, ")
    assert written[1].startswith("# command: ") and "--jobs 300" in written[1] and "--seed 7" in written[1]
    assert "result: OK: 300 jobs" in "\n".join(written)
    assert took < 150, f"the CI-sized soak took {took:.0f}s"


def test_soak_that_runs_out_of_time_fails_and_keeps_its_data(tmp_path: Path) -> None:
    done = subprocess.run(
        [*SOAK, "--jobs", "400", "--workers", "1", "--kills", "0", "--terminations", "0", "--restarts", "0",
         "--latency-ms", "200-300", "--timeout", "3", "--run-dir", str(tmp_path / "run")],
        cwd=ROOT, env=soak_env(), capture_output=True, text=True, timeout=120)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    rows = table_rows(out)
    assert rows["run finished within --timeout"][2] == "FAIL"
    assert rows["jobs succeeded or dead"][2] == "FAIL" and rows["jobs pending or failed"][2] == "FAIL"
    assert "TIMEOUT after 3s" in out and "result: FAIL" in out
    kept = re.search(r"^# kept: the server's data in (\S+) \(stopped\)", out, re.M)
    assert kept, out
    try:
        assert (Path(kept.group(1)) / "PG_VERSION").exists()
    finally:
        shutil.rmtree(Path(kept.group(1)).parent, ignore_errors=True)


def _soak_databases(server: str) -> set[str]:
    with psycopg.connect(server, autocommit=True) as conn:
        return {r[0] for r in conn.execute("select datname from pg_database where datname like 'pgqw_soak_%'")}


def test_soak_on_a_server_it_does_not_own_never_restarts_it_and_drops_its_database(
        pg_server: str, tmp_path: Path) -> None:
    before = _soak_databases(pg_server)
    done = subprocess.run(
        [*SOAK, "--database-url", pg_server, "--jobs", "60", "--workers", "2", "--kills", "1",
         "--terminations", "1", "--seed", "3", "--timeout", "90", "--run-dir", str(tmp_path / "run")],
        cwd=ROOT, env=soak_env(), capture_output=True, text=True, timeout=180)
    out = done.stdout
    assert done.returncode == 0, out[-6000:] + done.stderr[-3000:]
    rows = table_rows(out)
    assert {r[2] for r in rows.values()} == {"OK"} and rows["jobs"][0] == "60"
    assert "server restarts" not in rows and "restarts after which every worker came back" not in rows
    assert "NOT owned by this soak: it is never restarted" in out
    assert re.search(r"^server restart \(workers left to reconnect by themselves\)\s+-\s+"
                     r"0: the server is not owned by this soak, so it is never restarted$", out, re.M)
    assert "server restart:" not in out  # no restart event
    assert int(rows["SIGKILLs of workers"][0]) >= 1 and int(rows["backend terminations"][0]) >= 1
    assert _soak_databases(pg_server) == before  # its database was dropped after a run without failures


def test_soak_refuses_to_restart_a_server_it_does_not_own(pg_server: str) -> None:
    before = _soak_databases(pg_server)
    done = subprocess.run([*SOAK, "--database-url", pg_server, "--jobs", "10", "--restarts", "1"],
                          cwd=ROOT, env=soak_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--restarts needs a server the soak owns" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert _soak_databases(pg_server) == before  # refused before anything was made


# ----------------------------------------------------------------------------- the checks can say FAIL

def _claim(conn: psycopg.Connection, job: db.Job, worker: str = "t") -> db.ClaimedJob:
    claimed = db.claim_job(conn, worker_id=worker, queues=[job.queue])
    assert claimed is not None and claimed.id == job.id
    return claimed


def _job(conn: psycopg.Connection) -> db.Job:
    """A listing job in a queue of its own, so a claim takes exactly it."""
    return enqueue(conn, queue=f"q-{uuid.uuid4().hex[:10]}")


def _succeed(conn: psycopg.Connection, job: db.Job | None = None) -> db.Job:
    job = job or _job(conn)
    claimed = _claim(conn, job)
    return db.mark_succeeded(conn, job_id=job.id, lease_token=claimed.lease_token,
                             result=("application/pdf", None, PDF))


def _fail_then_succeed(conn: psycopg.Connection) -> db.Job:
    job = _job(conn)
    claimed = _claim(conn, job)
    db.mark_failed(conn, job_id=job.id, lease_token=claimed.lease_token, error="first try failed",
                   base_ms=0, max_jitter_ms=0)
    return _succeed(conn, job)


def _pending(conn: psycopg.Connection) -> db.Job:
    return _job(conn)


def _processing(conn: psycopg.Connection) -> db.Job:
    job = _job(conn)
    _claim(conn, job)
    return job


def _dead_with_flyer(conn: psycopg.Connection) -> db.Job:
    job = _job(conn)
    claimed = _claim(conn, job)
    db.mark_failed(conn, job_id=job.id, lease_token=claimed.lease_token, error="bad", retryable=False)
    # No function writes a result for a job that did not succeed: the owner plants one by hand.
    conn.execute("insert into job_results (job_id, content_type, data) values (%s, 'application/pdf', %s)",
                 [job.id, PDF])
    return job


def _succeeded_without_flyer(conn: psycopg.Connection) -> db.Job:
    job = _job(conn)
    claimed = _claim(conn, job)
    return db.mark_succeeded(conn, job_id=job.id, lease_token=claimed.lease_token)


def _succeeded_twice(conn: psycopg.Connection) -> db.Job:
    job = _fail_then_succeed(conn)
    conn.execute("update job_attempts set outcome = 'succeeded', error = null where job_id = %s and attempt = 1",
                 [job.id])
    return job


def _overlapping(conn: psycopg.Connection) -> db.Job:
    job = _fail_then_succeed(conn)
    conn.execute("update job_attempts a1 set finished_at = a2.started_at + interval '1 second'"
                 " from job_attempts a2 where a1.job_id = %(id)s and a1.attempt = 1"
                 " and a2.job_id = %(id)s and a2.attempt = 2", {"id": job.id})
    return job


def _attempt_row_missing(conn: psycopg.Connection) -> db.Job:
    job = _fail_then_succeed(conn)
    conn.execute("delete from job_attempts where job_id = %s and attempt = 1", [job.id])
    return job


BREAKS = {
    "nothing broken": (_fail_then_succeed, set()),
    "a job never run": (_pending, {"jobs succeeded or dead", "jobs pending or failed"}),
    "a job left processing": (_processing, {"jobs succeeded or dead", "jobs processing", "attempts not finished"}),
    "a flyer on a dead job": (_dead_with_flyer, {"flyers", "flyers of jobs not succeeded"}),
    "a succeeded job without its flyer": (_succeeded_without_flyer, {"flyers", "succeeded jobs without a flyer"}),
    "a job run to success twice": (_succeeded_twice, {"jobs run to success twice", "succeeded attempts"}),
    "two attempts overlapping": (_overlapping, {"jobs with overlapping attempts"}),
    "an attempt row missing": (_attempt_row_missing, {"attempt rows", "jobs whose attempts <> attempt rows"}),
}


@pytest.mark.parametrize("case", list(BREAKS))
def test_soak_checks_fail_exactly_where_an_invariant_was_broken_by_hand(conn: psycopg.Connection, case: str) -> None:
    make, failing = BREAKS[case]
    _succeed(conn)
    _succeed(conn)
    job = make(conn)
    checks = check_database(conn, expected_jobs=3)
    assert [c.figure for c in checks] == ["jobs", *DB_CHECKS]
    assert {c.figure for c in checks if not c.ok} == failing
    for c in checks:
        if not c.ok and c.detail:
            assert str(job.id) in c.detail, c  # a failure names the job


def test_soak_checks_fail_when_a_job_is_missing(conn: psycopg.Connection) -> None:
    _succeed(conn)
    gone = _succeed(conn)
    conn.execute("delete from jobs where id = %s", [gone.id])
    checks = check_database(conn, expected_jobs=2)
    assert {c.figure for c in checks if not c.ok} == {"jobs"}


def test_soak_check_only_prints_fail_and_exits_1_on_a_broken_database(conn: psycopg.Connection, db_url: str) -> None:
    _succeed(conn)
    dead = _dead_with_flyer(conn)
    done = subprocess.run([*SOAK, "--check-only", "--database-url", db_url], cwd=ROOT, env=soak_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    rows = table_rows(done.stdout)
    assert rows["flyers of jobs not succeeded"] == ("1", "0", "FAIL")
    assert rows["flyers"] == ("2", "1 (= succeeded jobs)", "FAIL")
    assert f"-> {dead.id}" in done.stdout
    assert done.stdout.rstrip().endswith("result: FAIL")


def test_soak_check_only_prints_ok_and_exits_0_on_a_sound_database(conn: psycopg.Connection, db_url: str) -> None:
    _succeed(conn)
    _fail_then_succeed(conn)
    done = subprocess.run([*SOAK, "--check-only", "--database-url", db_url], cwd=ROOT, env=soak_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = table_rows(done.stdout)
    assert set(rows) == set(DB_CHECKS) and {r[2] for r in rows.values()} == {"OK"}
    assert rows["attempt rows"][0] == "3"
    assert done.stdout.rstrip().endswith("result: OK")
