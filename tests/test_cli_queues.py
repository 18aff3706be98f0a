"""pgqw pause / resume / limit / rate: one line out, and one line on stderr with a non-zero exit for bad input."""
from __future__ import annotations

import psycopg
import pytest

from tests.helpers import rows
from tests.test_cli import _pgqw


def test_cli_pause_resume_limit_change_the_queue(db_url: str) -> None:
    env = {"DATABASE_URL": db_url}
    done = _pgqw("pause", "emails", "--create", env=env)  # no job, worker or setting has named it yet
    assert (done.returncode, done.stdout) == (0, "queue emails: paused, no limit\n"), done.stderr
    done = _pgqw("limit", "emails", "3", env=env)
    assert (done.returncode, done.stdout) == (0, "queue emails: paused, at most 3 running\n"), done.stderr
    done = _pgqw("resume", "emails", env=env)
    assert (done.returncode, done.stdout) == (0, "queue emails: running, at most 3 running\n"), done.stderr
    done = _pgqw("limit", "emails", "none", env=env)
    assert (done.returncode, done.stdout) == (0, "queue emails: running, no limit\n"), done.stderr
    with psycopg.connect(db_url) as conn:
        assert rows(conn, "select name, paused, max_running from queues") == [
            {"name": "emails", "paused": False, "max_running": None}]


def test_cli_rate_sets_and_removes_the_rate(db_url: str) -> None:
    env = {"DATABASE_URL": db_url}
    done = _pgqw("rate", "emails", "2.5", "--create", env=env)
    assert (done.returncode, done.stdout) == (0, "queue emails: running, no limit, at most 2.5 started per second\n"), \
        done.stderr
    done = _pgqw("limit", "emails", "3", env=env)  # every queue line shows a rate the queue has
    assert (done.returncode, done.stdout) == (0, "queue emails: running, at most 3 running, at most 2.5 started per "
                                                 "second\n"), done.stderr
    done = _pgqw("rate", "emails", "0.000001", env=env)
    assert (done.returncode, done.stdout) == (0, "queue emails: running, at most 3 running, at most 0.000001 "
                                                 "started per second\n"), done.stderr
    done = _pgqw("rate", "emails", "1E+3", env=env)
    assert done.stdout == "queue emails: running, at most 3 running, at most 1000 started per second\n", done.stderr
    done = _pgqw("rate", "emails", "none", env=env)
    assert (done.returncode, done.stdout) == (0, "queue emails: running, at most 3 running, no rate\n"), done.stderr
    with psycopg.connect(db_url) as conn:
        assert rows(conn, "select name, max_running, jobs_per_second, rate_tokens from queues") == [
            {"name": "emails", "max_running": 3, "jobs_per_second": None, "rate_tokens": None}]


@pytest.mark.parametrize("args, message", [
    (["rate", "emails", "0"], "jobs per second must be above 0"),
    (["rate", "emails", "-1"], "jobs per second must be above 0"),
    (["rate", "emails", "fast"], "a number of jobs per second above 0, or none"),
    (["rate", "emails", ""], "a number of jobs per second above 0, or none"),
    (["rate", "emails", "nan"], "jobs per second must be a number"),
    (["rate", "emails", "inf"], "jobs per second must be at most 1000000"),
    (["rate", "emails", "2000000"], "jobs per second must be at most 1000000"),
    (["rate", "emails", "0.0000001"], "at most 6 decimal places"),
    (["rate", "  ", "2"], "queue must be a non-empty text"),
    (["rate", "emails"], "the following arguments are required"),
    (["limit", "emails", "0"], "at least 1, or none"),
    (["limit", "emails", "-2"], "at least 1, or none"),
    (["limit", "emails", "lots"], "at least 1, or none"),
    (["limit", "emails", "²"], "at least 1, or none"),
    (["limit", "emails", "9" * 5000], "at least 1, or none"),
    (["limit", "emails", "99999999999"], "out of range"),
    (["pause", "  "], "queue must be a non-empty text"),
    (["resume", "q" * 101], "queue must be a non-empty text"),
    (["pause"], "the following arguments are required"),
])
def test_cli_queue_bad_input_is_one_line_and_nonzero(args: list[str], message: str, db_url: str) -> None:
    done = _pgqw(*args, env={"DATABASE_URL": db_url})
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    with psycopg.connect(db_url) as conn:
        assert rows(conn, "select * from queues") == []


@pytest.mark.parametrize("args", [("pause", "nosuchqueue"), ("resume", "nosuchqueue"), ("limit", "nosuchqueue", "3"),
                                  ("rate", "nosuchqueue", "1")])
def test_cli_queue_commands_refuse_a_queue_never_seen_in_one_line(db_url: str, args: tuple[str, ...]) -> None:
    done = _pgqw(*args, env={"DATABASE_URL": db_url})
    assert done.returncode != 0 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"pgqw {args[0]}: queue 'nosuchqueue' is not known") and "--create" in line
    with psycopg.connect(db_url) as conn:
        assert rows(conn, "select name from queues") == []
