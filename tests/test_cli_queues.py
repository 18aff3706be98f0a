"""pgqw pause / resume / limit: one line out, and one line on stderr with a non-zero exit for bad input."""
from __future__ import annotations

import psycopg
import pytest

from tests.helpers import rows
from tests.test_cli import _pgqw


def test_cli_pause_resume_limit_change_the_queue(db_url: str) -> None:
    env = {"DATABASE_URL": db_url}
    done = _pgqw("pause", "emails", env=env)
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


@pytest.mark.parametrize("args, message", [
    (["limit", "emails", "0"], "at least 1, or none"),
    (["limit", "emails", "-2"], "at least 1, or none"),
    (["limit", "emails", "lots"], "at least 1, or none"),
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
