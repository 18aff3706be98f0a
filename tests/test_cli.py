"""The pgqw command as a user runs it: `up` brings everything up and Ctrl+C stops it cleanly;
every subcommand has --help; failures are one line and a non-zero exit."""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import psutil
import pytest

from pgqw import launch
from pgqw.cli import build_parser
from pgqw.demo.listing import EXAMPLE_LISTING
from pgqw.launch import free_port, wait_for

ROOT = Path(__file__).resolve().parents[1]
SUBCOMMANDS = sorted(next(a for a in build_parser()._actions
                          if isinstance(a, argparse._SubParsersAction)).choices)


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


LAB = {"soak": "tests.lab.soak", "bench": "bench.run", "evidence": "tests.lab.evidence"}


def test_cli_lab_commands_are_not_installed() -> None:
    """The lab (tests/lab, bench/) is not in the package: its commands are the repository's (./run soak,
    ./run bench, ./run evidence), not the installed pgqw's."""
    done = _pgqw("--help")
    assert done.returncode == 0, done.stderr
    assert not set(LAB) & set(SUBCOMMANDS)
    assert not [w for w in LAB if re.search(rf"\b{w}\b", done.stdout)], done.stdout
    for name in LAB:
        done = _pgqw(name, "--help")
        assert done.returncode == 2
        assert f"invalid choice: '{name}'" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize("name", sorted(LAB))
def test_cli_lab_commands_run_from_the_checkout(name: str) -> None:
    """./run NAME runs the module with the venv's python; its --help is its own."""
    run_script = (ROOT / "run").read_text()
    assert f'{name})\n' in run_script
    assert f'exec "$VENV/bin/python" -m {LAB[name]} "$@"' in run_script
    done = subprocess.run([sys.executable, "-m", LAB[name], "--help"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: ./run {name}"), done.stdout


@pytest.mark.parametrize(
    "name, args, message",
    [
        ("evidence", ["no-such-scenario"], "./run evidence: no scenario no-such-scenario"),
        ("soak", ["--jobs", "0"], "./run soak: error: argument --jobs: must be"),
        ("soak", ["--check-only"], "./run soak: --check-only needs the database to check"),
    ],
)
def test_cli_lab_bad_input_is_one_line_and_nonzero(name: str, args: list[str], message: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    done = subprocess.run([sys.executable, "-m", LAB[name], *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=60)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_cli_report_prints_counts_and_timeline(db_url: str) -> None:
    import psycopg

    from pgqw import db

    with psycopg.connect(db_url, autocommit=True) as conn:
        job = db.enqueue_job(conn, type="listing_flyer", payload=EXAMPLE_LISTING, idempotency_key="cli-report")
        claimed = db.claim_job(conn, worker_id="w-cli")
        assert claimed is not None and claimed.id == job.id
        db.mark_failed(conn, job_id=job.id, lease_token=claimed.lease_token, error="boom")
    done = _pgqw("report", env={"DATABASE_URL": db_url})
    assert done.returncode == 0, done.stderr
    assert re.search(r"^failed +1$", done.stdout, re.M), done.stdout  # the status table (drawn by rich)
    done = _pgqw("report", "timeline", str(job.id), env={"DATABASE_URL": db_url})
    assert done.returncode == 0, done.stderr
    assert "w-cli" in done.stdout and "boom" in done.stdout
    done = _pgqw("report", "concurrency", "w-", env={"DATABASE_URL": db_url})
    assert done.returncode == 0, done.stderr
    assert "jobs worked on by two workers at the same time: 0" in done.stdout
    # An attempt with a timeout shows when it times out.
    with psycopg.connect(db_url, autocommit=True) as conn:
        timed = db.enqueue_job(conn, type="listing_flyer", payload=EXAMPLE_LISTING, idempotency_key="cli-timed",
                               timeout_ms=90_000)
        claimed = db.claim_job(conn, worker_id="w-cli")
        assert claimed is not None and claimed.id == timed.id and claimed.deadline_at is not None
    done = _pgqw("report", "timeline", str(timed.id), env={"DATABASE_URL": db_url})
    assert done.returncode == 0, done.stderr
    assert "deadline_at" in done.stdout and claimed.deadline_at.strftime("%H:%M:%S") in done.stdout, done.stdout


def test_cli_check_idempotency_counts_one_flyer(db_url: str) -> None:
    done = _pgqw("check-idempotency", env={"DATABASE_URL": db_url})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "after run 2: 1 flyer(s)" in done.stdout
    assert "after both runs: 1 flyer(s)" in done.stdout
    assert "A's late result: refused (QL409" in done.stdout


def test_cli_up_runs_everything_and_ctrl_c_stops_it_cleanly(tmp_path: Path) -> None:
    """The README's first command: an embedded database in a data folder, migrate, the API and two
    workers; a job goes through; Ctrl+C stops every process, the database included."""
    port = free_port()
    env = {"PGQW_DATA_DIR": str(tmp_path / "pgdata"), "PORT": str(port),
           "SIM_MIN_LATENCY_MS": "50", "SIM_MAX_LATENCY_MS": "100", "SIM_FAILURE_RATE": "0"}
    log = tmp_path / "up.log"
    # No DATABASE_URL (the launcher passes on no setting of this environment): the embedded server.
    up = launch.start(["up", "--workers", "2"], name="up", env=env, log=log, cwd=ROOT)
    try:
        wait_for(lambda: log.read_text().count("worker started") == 2 and "API and page: " in log.read_text(),
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
        up.stop(signal.SIGKILL, timeout=5)
    text = log.read_text()
    assert "api | " in text and "w1  | " in text and "w2  | " in text
    # On the embedded server the job above went through the least-privilege logins.
    assert "logins: the API as pgqw_api, the workers as pgqw_worker" in text
    assert text.count("] stopped") == 2
    wait_for(lambda: not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE],
             timeout=10, what="every child of pgqw up to be gone")
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


def _job_with_id(conn, job_id: str):  # type: ignore[no-untyped-def]
    """A job whose id is chosen by the test, so prefixes can be made to collide."""
    from pgqw import db

    job = db.enqueue_job(conn, type="listing_flyer", payload=EXAMPLE_LISTING, idempotency_key=f"id-{job_id}",
                         queue="default", priority=0)
    conn.execute("update jobs set id = %s::uuid where id = %s", [job_id, job.id])
    return db.get_job(conn, job_id=job_id)


def test_cli_report_counts_expired_jobs(db_url: str) -> None:
    import psycopg

    from pgqw import db

    with psycopg.connect(db_url, autocommit=True) as conn:
        for n in range(2):
            db.enqueue_job(conn, type="listing_flyer", payload=EXAMPLE_LISTING, idempotency_key=f"cli-exp-{n}",
                           expire_after_ms=1)
        conn.execute("select * from sweep_stuck_at(now() + interval '1 minute')")
    done = _pgqw("report", env={"DATABASE_URL": db_url})
    assert done.returncode == 0, done.stderr
    assert re.search(r"^expired +2$", done.stdout, re.M), done.stdout


def test_cli_report_timeline_takes_a_unique_prefix_of_the_job_id(db_url: str) -> None:
    import psycopg

    with psycopg.connect(db_url, autocommit=True) as conn:
        job = _job_with_id(conn, "3f2a9c01-0000-4000-8000-000000000001")
        _job_with_id(conn, "3f2a9c02-0000-4000-8000-000000000002")
    for given in ("3f2a9c01", "3F2A9C01", "3f2a9c01-0000", "3f2a9c0100004", str(job.id)):
        done = _pgqw("report", "timeline", given, env={"DATABASE_URL": db_url})
        assert done.returncode == 0, (given, done.stderr)
        assert done.stdout.startswith(f"job {job.id}  listing_flyer  pending")


@pytest.mark.parametrize(
    "given, message",
    [
        ("3f2a9c0", "2 jobs have an id starting 3f2a9c0 (3f2a9c01-0000-4000-8000-000000000001, "
                    "3f2a9c02-0000-4000-8000-000000000002): give more of the id"),
        ("3f2a9c03", "no job with an id starting 3f2a9c03"),
        ("3f2a9c01-0000-4000-8000-0000000000019", "not a job id"),
        ("3f2a9g", "not a job id"),
    ],
)
def test_cli_report_timeline_prefix_of_several_or_no_jobs_is_one_line(db_url: str, given: str, message: str) -> None:
    import psycopg

    with psycopg.connect(db_url, autocommit=True) as conn:
        _job_with_id(conn, "3f2a9c01-0000-4000-8000-000000000001")
        _job_with_id(conn, "3f2a9c02-0000-4000-8000-000000000002")
    done = _pgqw("report", "timeline", given, env={"DATABASE_URL": db_url})
    assert done.returncode != 0
    assert done.stdout == ""
    assert done.stderr.startswith(f"pgqw report: {message}")
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_cli_report_timeline_many_matches_shows_five_and_says_more(db_url: str) -> None:
    import psycopg

    with psycopg.connect(db_url, autocommit=True) as conn:
        for n in range(7):
            _job_with_id(conn, f"77000000-0000-4000-8000-00000000000{n}")
    done = _pgqw("report", "timeline", "77", env={"DATABASE_URL": db_url})
    assert done.returncode != 0
    assert done.stderr.startswith("pgqw report: more than 5 jobs have an id starting 77 (")
    assert done.stderr.count("77000000-") == 5 and ", ...)" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_find_job_ids_by_prefix_reads_the_primary_key_index_not_the_table(db_url: str) -> None:
    import psycopg

    from pgqw import db

    with psycopg.connect(db_url, autocommit=True) as conn:
        db.enqueue_jobs(conn, jobs=[{"type": "listing_flyer", "payload": {"n": n}, "idempotency_key": f"p-{n}"}
                                    for n in range(2000)])
        conn.execute("analyze jobs")
        some = conn.execute("select id from jobs order by id offset 1000 limit 1").fetchone()[0]
    with psycopg.connect(db_url) as conn:  # one transaction: pg_stat_xact_* counts only its own scans
        found = db.find_job_ids_by_prefix(conn, prefix=str(some)[:8])
        scans = conn.execute("select seq_scan, idx_scan from pg_stat_xact_user_tables where relname = 'jobs'"
                             ).fetchone()
    assert some in found and all(str(j).startswith(str(some)[:8]) for j in found)
    assert scans == (0, 1)
    with psycopg.connect(db_url) as conn:
        assert db.find_job_ids_by_prefix(conn, prefix=str(some).upper()) == [some]
        assert db.find_job_ids_by_prefix(conn, prefix=some.hex) == [some]
        assert len(db.find_job_ids_by_prefix(conn, prefix=str(some)[0], limit=3)) == 3  # 2000 jobs: 125 per digit
        for bad in ("", "xyz", "0" * 33):
            with pytest.raises(ValueError):
                db.find_job_ids_by_prefix(conn, prefix=bad)


@pytest.mark.parametrize("args", [["report"], ["report", "concurrency"], ["report", "--help"], ["--help"]])
def test_cli_output_into_a_closed_pipe_ends_quietly(args: list[str], db_url: str) -> None:
    """`pgqw report | head -1`: the reader may go away before pgqw writes. Here it has gone before pgqw
    starts (the pipe's read end is closed first), so every write fails: pgqw must end without a
    traceback or an "Exception ignored" message."""
    import psycopg

    with psycopg.connect(db_url, autocommit=True) as conn:
        for n in range(20):
            conn.execute("select enqueue_job('listing_flyer', '{}'::jsonb, %s)", [f"pipe-{n}"])
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "pgqw.cli", *args], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, cwd=ROOT, env={**os.environ, "DATABASE_URL": db_url}, timeout=60)
    finally:
        os.close(write_end)
    assert done.stderr == ""
    assert done.returncode == (0 if "--help" in args else 1)  # argparse itself ignores a failed write


def test_cli_report_piped_into_a_reader_that_stops_after_one_line(db_url: str) -> None:
    """The same as a person sees it: a reader takes the first line and closes the pipe."""
    proc = subprocess.Popen([sys.executable, "-m", "pgqw.cli", "report"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, "DATABASE_URL": db_url})
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().split() == ["status", "jobs"]
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) in (0, 1)
    assert "Traceback" not in err and "Error" not in err, err
