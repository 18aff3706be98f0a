"""worker/main.py: the command line's overrides of the environment."""
from __future__ import annotations

import argparse

import pytest

from pgqw.config import ConfigError
from pgqw.worker.main import settings_from_args


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
