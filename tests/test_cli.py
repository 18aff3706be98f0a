"""The pgqw command as a user runs it: `up` brings everything up and Ctrl+C stops it cleanly;
every subcommand has --help; failures are one line and a non-zero exit."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.lab.stack import free_port, wait_for
from pgqw.tools import EXAMPLE_LISTING

ROOT = Path(__file__).resolve().parents[1]
SUBCOMMANDS = ["migrate", "api", "worker", "up", "burst", "report", "check-idempotency", "evidence", "bench",
               "soak"]


def _pgqw(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pgqw.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, **(env or {})}, timeout=timeout)


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_cli_every_subcommand_has_help(command: str) -> None:
    done = _pgqw(command, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: pgqw {command}")


@pytest.mark.parametrize(
    "args, env, message",
    [
        (["burst", "0"], {}, "must be 1 or more"),
        (["worker", "--concurrency", "x"], {}, "must be a whole number"),
        (["report", "timeline", "not-a-uuid"], {}, "not a job id"),
        (["worker"], {"WORKER_CONCURRENCY": "many"}, "WORKER_CONCURRENCY must be a whole number"),
        (["worker"], {"SIM_FAILURE_RATE": "2"}, "SIM_FAILURE_RATE must be between"),
        (["evidence", "no-such-scenario"], {}, "no scenario no-such-scenario"),
        (["soak", "--jobs", "0"], {}, "must be"),
        (["api", "--host", "0.0.0.0"], {"API_TOKENS": ""}, "refusing to listen on 0.0.0.0 without authentication"),
        (["api"], {"API_TOKENS": "short"}, "API_TOKENS: token 1 is shorter than 16 characters"),
        (["api", "--host", "no-such-host.invalid"], {"API_TOKENS": "t" * 20}, "cannot listen on no-such-host.invalid"),
        (["api", "--host", "192.0.2.1"], {"API_TOKENS": "t" * 20}, "cannot listen on 192.0.2.1"),
        (["migrate", "--no-such-flag"], {}, "unrecognized arguments"),
    ],
)
def test_cli_bad_input_is_one_line_and_nonzero(args: list[str], env: dict[str, str], message: str,
                                               db_url: str) -> None:
    done = _pgqw(*args, env={"DATABASE_URL": db_url, **env})
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_cli_report_prints_counts_and_timeline(db_url: str) -> None:
    import psycopg

    from pgqw import db

    with psycopg.connect(db_url, autocommit=True) as conn:
        job = db.enqueue_job(conn, type="listing_flyer", payload=EXAMPLE_LISTING, idempotency_key="cli-report")
        db.claim_job(conn, worker_id="w-cli")
        db.mark_failed(conn, job_id=job.id, worker_id="w-cli", attempt=1, error="boom")
    done = _pgqw("report", env={"DATABASE_URL": db_url})
    assert done.returncode == 0, done.stderr
    assert "failed      1" in done.stdout
    done = _pgqw("report", "timeline", str(job.id), env={"DATABASE_URL": db_url})
    assert done.returncode == 0, done.stderr
    assert "w-cli" in done.stdout and "boom" in done.stdout
    done = _pgqw("report", "concurrency", "w-", env={"DATABASE_URL": db_url})
    assert done.returncode == 0, done.stderr
    assert "jobs worked on by two workers at the same time: 0" in done.stdout


def test_cli_check_idempotency_counts_one_flyer(db_url: str) -> None:
    done = _pgqw("check-idempotency", env={"DATABASE_URL": db_url})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "after run 2: 1 flyer(s)" in done.stdout
    assert "after both runs: 1 flyer(s)" in done.stdout


def test_cli_up_runs_everything_and_ctrl_c_stops_it_cleanly(tmp_path: Path) -> None:
    """The README's first command: an embedded database in a data folder, migrate, the API and two
    workers; a job goes through; Ctrl+C stops every process, the database included."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update({"PGQW_DATA_DIR": str(tmp_path / "pgdata"), "PORT": str(port), "PYTHONUNBUFFERED": "1",
                "SIM_MIN_LATENCY_MS": "50", "SIM_MAX_LATENCY_MS": "100", "SIM_FAILURE_RATE": "0"})
    log = tmp_path / "up.log"
    with open(log, "w") as out:
        up = subprocess.Popen([sys.executable, "-m", "pgqw.cli", "up", "--workers", "2"], cwd=ROOT, env=env,
                              stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: log.read_text().count("worker started") == 2 and "serving on" in log.read_text(),
                 timeout=60, what="the API and two workers")
        children = psutil.Process(up.pid).children(recursive=True)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/jobs", method="POST",
            data=json.dumps({"type": "listing_flyer", "payload": EXAMPLE_LISTING}).encode(),
            headers={"Content-Type": "application/json", "Idempotency-Key": "up-test"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 202
            job_id = json.loads(response.read())["data"]["id"]

        def succeeded() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/jobs/{job_id}", timeout=5) as r:
                return json.loads(r.read())["data"]["status"] == "succeeded"

        wait_for(succeeded, timeout=30, what="the job to succeed")
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=40) == 0
    finally:
        if up.poll() is None:
            up.kill()
    text = log.read_text()
    assert "api | " in text and "w1  | " in text and "w2  | " in text
    # On the embedded server the job above went through the least-privilege logins.
    assert "logins: the API as pgqw_api, the workers as pgqw_worker" in text
    assert text.count("] stopped") == 2
    time.sleep(0.5)
    assert [c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE] == []
    assert (tmp_path / "pgdata").is_dir()


def test_cli_burst_sends_n_jobs_with_distinct_keys(db_url: str, tmp_path: Path) -> None:
    import psycopg

    from tests.lab.stack import Stack

    with Stack(db_url, tmp_path / "logs") as stack:
        url = stack.start_api()
        done = _pgqw("burst", "7", "--url", url, env={"DATABASE_URL": db_url})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sent 7 jobs" in done.stdout and "HTTP 202: 7" in done.stdout
    assert "7/7" in done.stderr  # the progress bar
    with psycopg.connect(db_url) as conn:
        assert conn.execute("select count(distinct idempotency_key) from jobs").fetchone()[0] == 7


def test_cli_burst_without_an_api_says_so(db_url: str) -> None:
    done = _pgqw("burst", "2", "--url", f"http://127.0.0.1:{free_port()}", env={"DATABASE_URL": db_url})
    assert done.returncode == 1
    assert "not reached: 2" in done.stdout
    assert "Traceback" not in done.stderr
