"""The settings' one declaration (pgqw/config.py) and what is derived from it."""
from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from pgqw import config, launch

ROOT = Path(__file__).resolve().parents[2]


def _tool():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("make_settings_doc", ROOT / "docs" / "tools" / "make_settings_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_settings_tables_are_what_the_declaration_writes() -> None:
    tool = _tool()
    stale = tool.stale()
    assert not stale, f"stale settings tables in {[str(p.relative_to(ROOT)) for p in stale]}: run {tool.COMMAND}"


def test_every_docs_table_has_its_markers() -> None:
    tool = _tool()
    found = {m.group(2) for p in tool.DOCS for m in tool.BLOCK.finditer(p.read_text())}
    named = {t for s in config.SETTINGS for t in s.tables}
    assert found == named


def test_each_field_is_one_setting_with_a_unique_variable() -> None:
    fields = [f.name for f in dataclasses.fields(config.Settings)]
    assert [s.field for s in config.SETTINGS if s.field is not None] == fields
    envs = [s.env for s in config.SETTINGS]
    assert len(envs) == len(set(envs)), envs
    assert all(s.doc.strip() and "\n" not in s.doc and "|" not in s.doc for s in config.SETTINGS)


def test_launch_strips_every_setting_but_the_schema() -> None:
    assert set(launch.SETTINGS) == {s.env for s in config.SETTINGS} - {"PGQW_SCHEMA"}


def test_defaults_are_the_fields_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for s in config.SETTINGS:
        monkeypatch.delenv(s.env, raising=False)
    loaded = dataclasses.asdict(config.load())
    default = dataclasses.asdict(config.Settings())
    assert {k: v for k, v in loaded.items() if k != "worker_id"} == {k: v for k, v in default.items() if k != "worker_id"}


@pytest.mark.parametrize(("env", "raw", "message"), [
    ("PRUNE_BATCH", "100001", "PRUNE_BATCH must be at most 100000, got 100001"),
    ("WORKER_CONCURRENCY", "0", "WORKER_CONCURRENCY must be at least 1, got 0"),
    ("PORT", "x", "PORT must be a whole number, got 'x'"),
    ("SIM_FAILURE_RATE", "2", "SIM_FAILURE_RATE must be between 0.0 and 1.0, got 2.0"),
    ("WORKER_LOG_FORMAT", "xml", "WORKER_LOG_FORMAT must be text or json, got 'xml'"),
    ("WORKER_LISTEN", "maybe", "WORKER_LISTEN must be 1/0, true/false, yes/no or on/off, got 'maybe'"),
    ("PGQW_SCHEMA", "Bad Name", "PGQW_SCHEMA must be"),
])
def test_a_bad_value_names_its_variable(monkeypatch: pytest.MonkeyPatch, env: str, raw: str, message: str) -> None:
    monkeypatch.setenv(env, raw)
    with pytest.raises(config.ConfigError, match="^" + message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        config.load()


def test_values_are_parsed_as_declared(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WORKER_QUEUES", " a, ,b ")
    monkeypatch.setenv("PGQW_TASKS", " , ")
    monkeypatch.setenv("WORKER_LOG_FORMAT", "JSON")
    monkeypatch.setenv("MAX_ATTEMPTS", " ")
    monkeypatch.setenv("PGQW_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("WORKER_BATCH_MARK", "off")
    s = config.load()
    assert (s.queues, s.task_modules, s.log_format, s.max_attempts) == (("a", "b"), ("pgqw.demo",), "json", None)
    assert (s.data_dir, s.batch_mark) == (tmp_path, False)
