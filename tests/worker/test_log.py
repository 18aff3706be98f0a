"""worker/log.py: the line format tests and operators grep."""
from __future__ import annotations

import io
import json
import re
import threading

import pytest

from pgqw.worker.log import JOB_EVENTS, Log, describe_database, short
from tests.worker.parts import AT


def test_log_line_matches_the_documented_format() -> None:
    out = io.StringIO()
    Log("w1", out)("start", "ba1b4d28 attempt 1/5  (running 5/5, peak 5)")
    assert re.fullmatch(r"\d\d:\d\d:\d\d\.\d{3}Z \[w1\] start   ba1b4d28 attempt 1/5  \(running 5/5, peak 5\)\n",
                        out.getvalue())


def test_log_line_pads_short_events_and_keeps_long_ones() -> None:
    out = io.StringIO()
    log = Log("w9", out, now=lambda: AT)
    log("lost", "x")
    log("ignored late result", "y")
    log("stopped")
    assert out.getvalue().splitlines() == [
        "16:43:07.167Z [w9] lost    x", "16:43:07.167Z [w9] ignored late result y", "16:43:07.167Z [w9] stopped"]


def test_log_survives_a_closed_stdout() -> None:
    out = io.StringIO()
    out.close()
    Log("w1", out)("start", "nothing raised")


def test_describe_database_hides_the_password() -> None:
    text = describe_database("postgresql://u:secret@db.example:6432/jobs")
    assert text == "db.example:6432/jobs" and "secret" not in text
    assert describe_database("host=/tmp/sock dbname=jobs") == "jobs via socket /tmp/sock"
    assert short("ba1b4d28-0000-4000-8000-000000000000") == "ba1b4d28"


def test_log_leaves_out_quiet_events_and_writes_the_rest() -> None:
    out = io.StringIO()
    log = Log("w1", out, now=lambda: AT, quiet=JOB_EVENTS)
    log("start", "ba1b4d28 attempt 1/5")
    log("success", "ba1b4d28 attempt 1/5 in 0.01s")
    log("failed", "ba1b4d28 attempt 1/5 in 0.01s: boom")
    log("dead", "ba1b4d28 attempt 5/5")
    assert out.getvalue().splitlines() == [
        "16:43:07.167Z [w1] failed  ba1b4d28 attempt 1/5 in 0.01s: boom", "16:43:07.167Z [w1] dead    ba1b4d28 attempt 5/5"]


class _Out:
    """A stream that records which thread wrote each piece, and how many flushes."""

    def __init__(self) -> None:
        self.parts: list[tuple[str, str]] = []
        self.flushes = 0

    def write(self, text: str) -> int:
        self.parts.append((threading.current_thread().name, text))
        return len(text)

    def flush(self) -> None:
        self.flushes += 1

    def text(self) -> str:
        return "".join(t for _, t in self.parts)


def test_started_log_writes_from_its_own_thread_in_order_and_close_writes_the_rest() -> None:
    out = _Out()
    log = Log("w1", out, now=lambda: AT)
    log.start()
    for i in range(2000):
        log("start", f"job {i}")
    log.close()
    assert out.text().splitlines() == [f"16:43:07.167Z [w1] start   job {i}" for i in range(2000)]
    assert {name for name, _ in out.parts} == {"pgqw-log"}
    assert out.flushes == len(out.parts) <= 2000  # one flush per write, lines gathered into writes


def test_log_after_close_writes_from_the_caller_again() -> None:
    out = _Out()
    log = Log("w1", out, now=lambda: AT)
    log.start()
    log("start", "a")
    log.close()
    log("stopped", "b")
    assert out.parts[-1] == (threading.current_thread().name, "16:43:07.167Z [w1] stopped b\n")
    assert out.text().splitlines() == ["16:43:07.167Z [w1] start   a", "16:43:07.167Z [w1] stopped b"]


def test_unwritten_lines_are_the_ones_the_writer_has_not_taken_yet() -> None:
    release, writing = threading.Event(), threading.Event()

    class Stuck(_Out):
        def write(self, text: str) -> int:
            writing.set()
            release.wait(5)  # the writer is held in its first write
            return super().write(text)

    out = Stuck()
    log = Log("w1", out, now=lambda: AT)
    log.start()
    log("start", "a")
    assert writing.wait(5)
    log("success", "a in 0.01s")
    log("start", "b")
    assert log.unwritten() == "16:43:07.167Z [w1] success a in 0.01s\n16:43:07.167Z [w1] start   b\n"
    release.set()
    log.close()
    assert log.unwritten() == "" and len(out.text().splitlines()) == 3


def test_log_json_line_has_time_worker_event_fields_and_message() -> None:
    out = io.StringIO()
    log = Log("w1", out, now=lambda: AT, log_format="json")
    log("failed", "ba1b4d28 attempt 1/5 in 0.01s: boom → dead", job_id="ba1b4d28-0000-4000-8000-000000000000",
        attempt=1, outcome="dead", duration_ms=10.0)
    log("worker started:", "pid 1")
    failed, started = (json.loads(line) for line in out.getvalue().splitlines())
    assert failed == {"time": "2025-01-01T16:43:07.167Z", "level": "warning", "worker": "w1", "event": "failed",
                      "job_id": "ba1b4d28-0000-4000-8000-000000000000", "attempt": 1, "outcome": "dead",
                      "duration_ms": 10.0, "message": "ba1b4d28 attempt 1/5 in 0.01s: boom → dead"}
    assert started["event"] == "worker started" and started["level"] == "info"  # the text's colon left out


def test_log_text_line_leaves_the_fields_out() -> None:
    out = io.StringIO()
    Log("w1", out, now=lambda: AT)("start", "ba1b4d28 attempt 1/5", job_id="ba1b4d28", attempt=1)
    assert out.getvalue() == "16:43:07.167Z [w1] start   ba1b4d28 attempt 1/5\n"


def test_log_json_exit_line_is_json_too() -> None:
    log = Log("w1", io.StringIO(), now=lambda: AT, log_format="json")
    assert json.loads(log.line("exit", "second SIGTERM: exiting now"))["event"] == "exit"


def test_log_refuses_an_unknown_format() -> None:
    with pytest.raises(ValueError, match="text or json"):
        Log("w1", io.StringIO(), log_format="xml")
