"""The worker's small parts: log format, backoff, defaults, command-line overrides."""
from __future__ import annotations

import argparse
import io
import re

import psycopg
import pytest

from pgqw.config import ConfigError, Settings
from pgqw.worker.main import settings_from_args
from pgqw.worker.runner import Backoff, Log, describe_database, heartbeat_interval_ms, is_transient


def test_log_line_matches_the_documented_format() -> None:
    out = io.StringIO()
    Log("w1", out)("start", "ba1b4d28 attempt 1/5  (running 5/5, peak 5)")
    line = out.getvalue()
    assert re.fullmatch(r"\d\d:\d\d:\d\d\.\d{3}Z \[w1\] start   ba1b4d28 attempt 1/5  \(running 5/5, peak 5\)\n", line)


def test_backoff_doubles_from_a_tenth_of_a_second_to_five() -> None:
    b = Backoff()
    assert [b.next() for _ in range(8)] == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    b.reset()
    assert b.next() == 0.1


def test_heartbeat_interval_defaults_to_a_third_of_the_lease() -> None:
    assert heartbeat_interval_ms(Settings()) == 20000  # the table's 60 s lease
    assert heartbeat_interval_ms(Settings(lease_ms=3000)) == 1000
    assert heartbeat_interval_ms(Settings(lease_ms=3000, heartbeat_interval_ms=250)) == 250


def test_is_transient_covers_connection_errors_only() -> None:
    assert is_transient(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert is_transient(psycopg.errors.AdminShutdown())
    assert is_transient(psycopg.errors.SerializationFailure())
    assert not is_transient(psycopg.errors.RaiseException())
    assert not is_transient(ValueError("x"))


def test_describe_database_hides_the_password() -> None:
    text = describe_database("postgresql://u:secret@db.example:6432/jobs")
    assert text == "db.example:6432/jobs" and "secret" not in text


def test_settings_from_args_overrides_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKER_ID", "from-env")
    monkeypatch.setenv("WORKER_CONCURRENCY", "7")
    s = settings_from_args(argparse.Namespace(worker_id=None, concurrency=None, queues=None))
    assert (s.worker_id, s.concurrency, s.queues) == ("from-env", 7, None)
    s = settings_from_args(argparse.Namespace(worker_id="w9", concurrency=2, queues="a, b"))
    assert (s.worker_id, s.concurrency, s.queues) == ("w9", 2, ("a", "b"))
    with pytest.raises(ConfigError, match="--queues"):
        settings_from_args(argparse.Namespace(worker_id=None, concurrency=None, queues=" , "))
    with pytest.raises(ConfigError, match="worker id"):
        settings_from_args(argparse.Namespace(worker_id="x" * 201, concurrency=None, queues=None))
