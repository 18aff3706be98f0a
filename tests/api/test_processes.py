"""`pgqw api --processes N`: N server processes answer on one port; a signal to the first stops them
all, and one that ends on its own takes the others down with it (exit 1)."""
from __future__ import annotations

import os
import signal

import psutil
import psycopg

from tests.api.live import Process
from tests.api.test_live import all_at_once, post_job
from tests.helpers import rows


def _servers(parent: int) -> list[psutil.Process]:
    return psutil.Process(parent).children()


def test_api_processes_share_the_port_and_stop_together(db_url: str, conn: psycopg.Connection) -> None:
    api = Process(["api", "--port", "0", "--processes", "3"], {"DATABASE_URL": db_url})
    try:
        api.child.wait_ready(timeout=30)
        assert "3 processes of" in api.wait_for(r"serving on").string
        servers = _servers(api.proc.pid)
        assert len(servers) == 3
        # 60 requests at once: every one answered (by whichever process accepted it), each made a job.
        answers = all_at_once(60, lambda i: post_job(api.child.url, f"processes-{i}"))
        assert [status for status, _ in answers] == [202] * 60, answers
        assert len(rows(conn, "select id from jobs")) == 60
    finally:
        code = api.stop()
    assert code == 0, api.output()
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in servers)


def test_api_process_that_ends_stops_the_others(db_url: str) -> None:
    api = Process(["api", "--port", "0", "--processes", "2"], {"DATABASE_URL": db_url})
    try:
        api.child.wait_ready(timeout=30)
        first, second = _servers(api.proc.pid)
        os.kill(first.pid, signal.SIGKILL)
        code = api.proc.wait(timeout=20)
    finally:
        api.stop()
    assert code == 1, api.output()
    assert f"server process {first.pid} ended" in api.output()
    second.wait(timeout=10)
