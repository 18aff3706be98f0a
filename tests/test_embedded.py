"""The embedded PostgreSQL: only `pgqw up` starts one. Every other command without DATABASE_URL joins
the server `pgqw up` runs in PGQW_DATA_DIR (default ./.pgdata), or says in one line how to get one, and
leaves nothing behind: no data folder, no postgres process."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import psutil
import pytest

from pgqw import embedded

ROOT = Path(__file__).resolve().parents[1]
NO_SERVER = ("DATABASE_URL is not set and no embedded server is running in {data_dir}: set DATABASE_URL, "
             "or start one with pgqw up (PGQW_DATA_DIR picks its folder)")


def _pgqw(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """pgqw run in cwd, as a newcomer would: no DATABASE_URL, no PGQW_DATA_DIR."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "PGQW_DATA_DIR")}
    return subprocess.run([sys.executable, "-m", "pgqw.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=120)


def _postgres_under(folder: Path) -> list[psutil.Process]:
    """postgres processes whose data folder (their working folder, or -D) is in folder."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline", "cwd"]):
        if proc.info["name"] != "postgres":
            continue
        if (proc.info["cwd"] or "").startswith(str(folder)) or any(str(folder) in a for a in proc.info["cmdline"] or []):
            found.append(proc)
    return found


def _postmasters(folder: Path) -> set[int]:
    """The pids of the servers (not their backends) with their data in folder."""
    return {p.pid for p in _postgres_under(folder) if "-D" in (p.info["cmdline"] or [])}


@pytest.mark.parametrize("command", [["report"], ["worker"], ["migrate"], ["check-idempotency"],
                                     ["api", "--port", "0"]])
def test_embedded_command_without_a_server_says_how_to_get_one(tmp_path: Path, command: list[str]) -> None:
    done = _pgqw(tmp_path, *command)
    assert done.returncode != 0
    assert done.stdout == ""
    data_dir = tmp_path / ".pgdata"
    assert done.stderr == f"pgqw {command[0]}: {NO_SERVER.format(data_dir=data_dir)}\n"
    assert not data_dir.exists()
    assert list(tmp_path.iterdir()) == []
    assert _postgres_under(tmp_path) == []


@pytest.fixture
def running_server(tmp_path: Path) -> Iterator[Path]:
    """The embedded server started in tmp_path/.pgdata by this test process, as `pgqw up` would; stopped
    at the end."""
    data_dir = tmp_path / ".pgdata"
    embedded.start(data_dir)
    try:
        yield data_dir
    finally:
        embedded._pgserver().get_server(data_dir).cleanup()
        assert _postgres_under(tmp_path) == []


def test_embedded_commands_join_the_server_running_in_the_folder(running_server: Path, tmp_path: Path) -> None:
    assert embedded.running_url(running_server) is not None
    server = _postmasters(tmp_path)
    assert len(server) == 1
    done = _pgqw(tmp_path, "migrate")
    assert done.returncode == 0, done.stderr
    assert "0001_core.sql" in done.stdout
    done = _pgqw(tmp_path, "report")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("status") and "pending" in done.stdout
    # Joined, not started: the same one server, no other data folder.
    assert _postmasters(tmp_path) == server
    assert sorted(p.name for p in tmp_path.iterdir()) == [".pgdata"]


def test_embedded_up_help_names_the_data_folder() -> None:
    done = subprocess.run([sys.executable, "-m", "pgqw.cli", "up", "--help"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "PGQW_DATA_DIR (default: .pgdata in the current folder)" in text
