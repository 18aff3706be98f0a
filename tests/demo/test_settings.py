"""The demo's settings (pgqw/demo/settings.py): declared like the queue's, read from the environment,
and documented in docs/demo.md's generated table."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pgqw import config
from pgqw.demo import settings

ROOT = Path(__file__).resolve().parents[2]


def test_demo_settings_defaults_are_the_fields_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for s in settings.SETTINGS:
        for name in s.names:
            monkeypatch.delenv(name, raising=False)
    assert settings.load() == settings.DemoSettings()
    assert (settings.load().sim_failure_rate, settings.load().photo_timeout_ms) == (0.2, 5000)


def test_demo_settings_are_none_of_the_queues() -> None:
    old = ("SIM_MIN_LATENCY_MS", "SIM_MAX_LATENCY_MS", "SIM_FAILURE_RATE", "FLYER_PHOTO_TIMEOUT_MS",
           "FLYER_PHOTO_MAX_BYTES")
    assert [s.names for s in settings.SETTINGS] == [(f"PGQW_{name}", name) for name in old]
    ours = {name for s in settings.SETTINGS for name in s.names}
    assert not ours & {name for s in config.SETTINGS for name in s.names}
    assert [s.field for s in settings.SETTINGS] == [f.name for f in dataclasses.fields(settings.DemoSettings)]
    assert all(s.tables == (settings.DEMO,) for s in settings.SETTINGS)


@pytest.mark.parametrize(("env", "raw", "message"), [
    ("SIM_FAILURE_RATE", "2", "SIM_FAILURE_RATE must be between 0.0 and 1.0, got 2.0"),
    ("PGQW_SIM_FAILURE_RATE", "2", "PGQW_SIM_FAILURE_RATE must be between 0.0 and 1.0, got 2.0"),
    ("SIM_MIN_LATENCY_MS", "-1", "SIM_MIN_LATENCY_MS must be at least 0, got -1"),
    ("FLYER_PHOTO_TIMEOUT_MS", "soon", "FLYER_PHOTO_TIMEOUT_MS must be a whole number, got 'soon'"),
    ("FLYER_PHOTO_MAX_BYTES", "0", "FLYER_PHOTO_MAX_BYTES must be at least 1, got 0"),
])
def test_demo_setting_bad_value_names_its_variable(monkeypatch: pytest.MonkeyPatch, env: str, raw: str,
                                                   message: str) -> None:
    monkeypatch.setenv(env, raw)
    with pytest.raises(config.ConfigError) as exc:
        settings.load()
    assert str(exc.value) == message


def test_demo_latency_bounds_must_be_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIM_MIN_LATENCY_MS", "500")
    monkeypatch.setenv("SIM_MAX_LATENCY_MS", "100")
    with pytest.raises(config.ConfigError, match=r"^SIM_MAX_LATENCY_MS \(100\) must not be below"):
        settings.load()


def test_demo_latency_bounds_error_names_the_variables_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIM_MIN_LATENCY_MS", "500")
    monkeypatch.setenv("PGQW_SIM_MAX_LATENCY_MS", "100")
    monkeypatch.setenv("SIM_MAX_LATENCY_MS", "900")  # the prefixed one wins
    with pytest.raises(config.ConfigError) as exc:
        settings.load()
    assert str(exc.value) == "PGQW_SIM_MAX_LATENCY_MS (100) must not be below SIM_MIN_LATENCY_MS (500)"


def test_demo_settings_table_is_in_docs_demo() -> None:
    text = (ROOT / "docs" / "demo.md").read_text()
    table = text.split("<!-- settings:begin demo -->")[1].split("<!-- settings:end -->")[0]
    assert all(f"| `{s.env}` (or `{s.aliases[0]}`) |" in table for s in settings.SETTINGS)


def test_flyer_url_is_under_public_url() -> None:
    s = dataclasses.replace(config.Settings(), public_url="https://queue.example.com/", port=8080)
    assert settings.flyer_url(s, "abc") == "https://queue.example.com/api/jobs/abc/flyer"
    assert settings.flyer_url(config.Settings(port=8080), "abc") == "http://127.0.0.1:8080/api/jobs/abc/flyer"
