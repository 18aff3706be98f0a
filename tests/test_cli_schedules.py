"""pgqw schedules / pgqw schedule set|pause|resume|delete, run in-process (pgqw.cli.main): one line out,
and one line on stderr with a non-zero exit for bad input, nothing changed."""
from __future__ import annotations

import psycopg
import pytest

from pgqw import cli
from tests.helpers import rows


def pgqw(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, db_url: str,
         *args: str) -> tuple[int, str, str]:
    monkeypatch.setenv("DATABASE_URL", db_url)
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def schedules(db_url: str) -> list[dict]:
    with psycopg.connect(db_url) as conn:
        return rows(conn, "select name, task_type, cron, payload, queue, priority, catch_up, paused from schedules"
                          " order by name")


def test_cli_schedule_set_pause_resume_list_and_delete(capsys, monkeypatch, db_url: str) -> None:
    run = lambda *args: pgqw(capsys, monkeypatch, db_url, *args)  # noqa: E731
    assert run("schedule", "set", "nightly", "noop", "0 3 * * *", "--payload", '{"n": 1}', "--queue", "night",
               "--catch-up", "all") == (0, "schedule nightly set: noop at '0 3 * * *' (UTC), catch up all\n", "")
    assert run("schedule", "pause", "nightly")[1] == (
        "schedule nightly paused: noop at '0 3 * * *' (UTC), catch up all, paused\n")
    code, out, _ = run("schedules")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["name", "task", "type", "cron", "catch", "up", "state", "last", "slot",
                                              "next", "slot", "defined", "by"]
    assert lines[2].split()[:9] == ["nightly", "noop", "0", "3", "*", "*", "*", "all", "paused"]
    assert lines[2].split()[-1] == "dba"
    assert run("schedule", "resume", "nightly")[0] == 0
    assert schedules(db_url) == [{"name": "nightly", "task_type": "noop", "cron": "0 3 * * *", "payload": {"n": 1},
                                  "queue": "night", "priority": None, "catch_up": "all", "paused": False}]
    assert "03:00:00" in run("schedules")[1]  # the next slot
    assert run("schedule", "delete", "nightly")[1].startswith("schedule nightly deleted")
    assert schedules(db_url) == []
    assert run("schedules")[1].endswith("(no rows)\n")


@pytest.mark.parametrize("args, message", [
    (["schedule", "set", "s", "noop", "* * *"], "the cron expression does not parse: a cron expression has 5 fields"),
    (["schedule", "set", "s", "noop", "0 24 * * *"], "field 2 (hour) '24': 24 is out of range 0 to 23"),
    (["schedule", "set", "s", "no_such_type", "@daily"], "no task type 'no_such_type' is registered"),
    (["schedule", "set", "a/b", "noop", "@daily"], "a schedule name is 1 to 100 letters"),
    (["schedule", "set", "s", "noop", "@daily", "--payload", "[1]"], "--payload must be a JSON object"),
    (["schedule", "set", "s", "noop", "@daily", "--payload", "{"], "--payload is not JSON"),
    (["schedule", "set", "s", "noop", "@daily", "--catch-up", "some"], "invalid choice: 'some'"),
    (["schedule", "pause", "ghost"], "no schedule is named 'ghost'"),
    (["schedule", "resume", "ghost"], "no schedule is named 'ghost'"),
    (["schedule", "delete", "ghost"], "no schedule is named 'ghost'"),
    (["schedule"], "the following arguments are required: ACTION"),
])
def test_cli_schedule_bad_input_is_one_line_nonzero_and_changes_nothing(
        capsys, monkeypatch, db_url: str, args: list[str], message: str) -> None:
    code, out, err = pgqw(capsys, monkeypatch, db_url, *args)
    assert code != 0 and out == ""
    assert message in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert schedules(db_url) == []
