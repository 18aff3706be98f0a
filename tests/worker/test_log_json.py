"""WORKER_LOG_FORMAT=json: a real worker (in process, real database) writes one JSON object a line,
with the job's fields on every job event."""
from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from pgqw import config
from pgqw.config import ConfigError
from pgqw.tasks import PermanentError, Registry
from pgqw.worker.runner import Worker
from tests.helpers import enqueue
from tests.worker.parts import registered, settings


class Out(io.StringIO):
    """The worker's output; wait(check) until its text passes check."""

    def __init__(self) -> None:
        super().__init__()
        self.cond = threading.Condition()

    def write(self, text: str) -> int:
        with self.cond:
            n = super().write(text)
            self.cond.notify_all()
            return n

    def wait(self, check: Callable[[str], bool], timeout: float = 15.0) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: check(self.getvalue()), timeout)


def _events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_log_json_lines_of_a_worker_carry_the_job_fields(db_url: str, conn: psycopg.Connection) -> None:
    tasks = Registry()
    tasks.task("echo", model=dict)(lambda payload, ctx: {"echoed": payload})

    def boom(payload: dict, ctx: object) -> None:
        raise ValueError("boom")

    def refuse(payload: dict, ctx: object) -> None:
        raise PermanentError("not this one")

    tasks.task("boom", model=dict)(boom)
    tasks.task("refuse", model=dict)(refuse)
    for name in ("echo", "boom", "refuse"):
        registered(conn, name)
    good = enqueue(conn, type="echo", payload={"a": 1}, queue="default")
    bad = enqueue(conn, type="boom", payload={}, max_attempts=2)
    never = enqueue(conn, type="refuse", payload={})
    out = Out()
    worker = Worker(settings(lease_ms=5000, poll_interval_ms=50, log_format="json"), db_url, tasks=tasks, out=out)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(worker.run()), daemon=True)
    thread.start()
    try:
        # The success, the failure retried, then dead on its last attempt, and the permanent failure.
        assert out.wait(lambda text: sum(e["event"] in ("success", "failed", "dead") for e in _events(text)) == 4), \
            out.getvalue()
    finally:
        worker.stop("test over")
        thread.join(15)
    assert result == [0]
    events = _events(out.getvalue())  # every line is a JSON object
    assert all({"time", "level", "worker", "event", "message"} <= e.keys() and e["worker"] == "w1" for e in events)
    assert events[0]["event"] == "worker started" and events[0]["tasks"] == ["boom", "echo", "refuse"]
    by_job = {job.id: [e for e in events if e.get("job_id") == str(job.id)] for job in (good, bad, never)}

    start, success = by_job[good.id]
    job_fields = {"job_id": str(good.id), "type": "echo", "queue": "default", "attempt": 1,
                  "max_attempts": good.max_attempts}
    assert start["event"] == "start" and job_fields.items() <= start.items() and "outcome" not in start
    assert success["event"] == "success" and job_fields.items() <= success.items()
    assert success["outcome"] == "succeeded" and success["duration_ms"] >= 0 and success["level"] == "info"
    assert success["message"].startswith(f"{str(good.id)[:8]} attempt 1/{good.max_attempts} in ")

    assert [(e["event"], e["attempt"], e.get("outcome")) for e in by_job[bad.id]] == [
        ("start", 1, None), ("failed", 1, "retry"), ("start", 2, None), ("failed", 2, "dead")]
    retry, dead = (e for e in by_job[bad.id] if e["event"] == "failed")
    assert retry["error"] == dead["error"] == "ValueError: boom" and retry["max_attempts"] == 2
    assert retry["retryable"] is True and retry["next_run_at"].endswith("Z") and retry["level"] == "warning"
    assert dead["duration_ms"] >= 0 and "→ dead" in dead["message"]

    [_, permanent] = by_job[never.id]
    assert (permanent["event"], permanent["outcome"], permanent["error"], permanent["retryable"], permanent["level"]) \
        == ("dead", "dead", "not this one", False, "error")
    stopped = events[-1]
    assert stopped["event"] == "stopped" and (stopped["succeeded"], stopped["failed"], stopped["dead"]) == (1, 1, 2)


def test_worker_log_format_reads_text_and_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORKER_LOG_FORMAT", raising=False)
    assert config.load().log_format == "text"
    monkeypatch.setenv("WORKER_LOG_FORMAT", " JSON ")
    assert config.load().log_format == "json"


def test_worker_log_format_bad_value_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKER_LOG_FORMAT", "yaml")
    with pytest.raises(ConfigError) as exc:
        config.load()
    assert str(exc.value) == "WORKER_LOG_FORMAT must be text or json, got 'yaml'"
