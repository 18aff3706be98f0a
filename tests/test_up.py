"""`pgqw up` as a user runs it, on this test's database (DATABASE_URL, so no embedded server): the
"API and page" line comes only once the API answers; a port already taken ends the command with one
line saying so and how to pick another, a non-zero exit, no traceback and nothing left running.
Also: the launcher knows every setting pgqw reads, so no child inherits one by accident."""
from __future__ import annotations

import os
import re
import signal
import socket
import threading
import urllib.request
from pathlib import Path
from typing import Iterator

import psycopg
import pytest

from pgqw import config, launch

FAST = {"SIM_MIN_LATENCY_MS": "50", "SIM_MAX_LATENCY_MS": "100", "SIM_FAILURE_RATE": "0",
        "SHUTDOWN_GRACE_MS": "2000"}
READY = "API and page: "


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something else listens on for the whole test."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def worker_connections(db_url: str) -> int:
    with psycopg.connect(db_url, autocommit=True) as conn:
        row = conn.execute("select count(*) from pg_stat_activity where datname = current_database()"
                           " and application_name like 'pgqw-worker %'").fetchone()
    return int(row[0]) if row else 0


def test_up_prints_the_ready_line_only_once_the_api_answers(db_url: str, tmp_path: Path) -> None:
    port = launch.free_port()
    log = tmp_path / "up.log"
    up = launch.start(["up", "--port", str(port), "--workers", "1"], name="up", env=FAST, database_url=db_url,
                      log=log)
    try:
        line = up.wait_output(rf"^up +\| {READY}(\S+)", timeout=60)
        # At the moment the line is printed the API already answers: no retry needed.
        with urllib.request.urlopen(f"{line.group(1)}/", timeout=5) as response:
            assert response.status == 200
        assert line.group(1) == f"http://127.0.0.1:{port}"
        lines = up.output().splitlines()
        serving = next(i for i, text in enumerate(lines) if re.match(r"^api +\| pgqw api: serving on ", text))
        ready = next(i for i, text in enumerate(lines) if READY in text)
        assert serving < ready, lines
        assert up.output().count(READY) == 1
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=40) == 0
    finally:
        up.stop(signal.SIGKILL, timeout=5)
    assert "Traceback" not in up.output()


def test_up_on_a_busy_port_says_so_in_one_line_and_stops_the_rest(db_url: str, busy_port: int) -> None:
    up = launch.start(["up", "--port", str(busy_port), "--workers", "2"], name="up", env=FAST,
                      database_url=db_url)
    try:
        code = up.wait(timeout=90)
    finally:
        up.stop(signal.SIGKILL, timeout=5)
    out = up.output()
    assert code != 0, out
    assert "Traceback" not in out
    assert READY not in out
    errors = [line for line in out.splitlines() if line.startswith("pgqw up: ")]
    assert len(errors) == 1, out
    assert f"127.0.0.1:{busy_port}" in errors[0] and "in use" in errors[0], errors
    assert "--port" in errors[0] and "PORT environment variable" in errors[0], errors
    assert out.rstrip().splitlines()[-1] == errors[0]  # the last word, after the rest was stopped
    assert re.search(r"^up +\| stopped$", out, re.M), out
    launch.wait_for(lambda: worker_connections(db_url) == 0, timeout=10, what="the workers' connections to close")


def test_launch_settings_name_every_setting_pgqw_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child started without inherit_settings gets no pgqw setting from its parent: the launcher's
    list must name every environment variable pgqw.config reads."""
    read: set[str] = set()
    # Only this thread's reads: a pool or a server thread another test left running may read the
    # environment (libpq's PG* variables) while os.environ is replaced.
    me = threading.get_ident()

    def note(key: str) -> None:
        if threading.get_ident() == me:
            read.add(key)

    class Recording(dict):  # the variables load() asks for, whichever way it asks
        def get(self, key, default=None):  # type: ignore[no-untyped-def]
            note(key)
            return super().get(key, default)

        def __getitem__(self, key):  # type: ignore[no-untyped-def]
            note(key)
            return super().__getitem__(key)

        def __contains__(self, key):  # type: ignore[no-untyped-def]
            note(key)
            return super().__contains__(key)

    monkeypatch.setattr(os, "environ", Recording(os.environ))
    config.load()
    inherited = {"PGQW_SCHEMA"}  # every process of one queue uses one schema: a child always inherits it
    assert read - inherited and read - inherited <= set(launch.SETTINGS), sorted(read - inherited - set(launch.SETTINGS))
    assert set(launch.SETTINGS) == {name for s in config.SETTINGS for name in s.names} - inherited
