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
    named = {t for s in tool.SETTINGS for t in s.tables}
    assert found == named


def test_api_docs_settings_table_is_generated_too() -> None:
    """docs/api.md's table of the API's own settings is one of the generated ones."""
    tool = _tool()
    api_md = ROOT / "docs" / "api.md"
    assert api_md in tool.DOCS
    blocks = {m.group(2): m.group(3) for m in tool.BLOCK.finditer(api_md.read_text())}
    for env in ("API_ALLOWED_HOSTS", "METRICS_CACHE_MS", "METRICS_TOKEN"):
        assert f"| `PGQW_{env}` (or `{env}`) |" in blocks[config.API]


def test_each_field_is_one_setting_with_a_unique_variable() -> None:
    fields = [f.name for f in dataclasses.fields(config.Settings)]
    assert [s.field for s in config.SETTINGS if s.field is not None] == fields
    envs = [name for s in config.SETTINGS for name in s.names]
    assert len(envs) == len(set(envs)), envs
    assert all(s.doc.strip() and "\n" not in s.doc and "|" not in s.doc for s in config.SETTINGS)


def test_launch_strips_every_setting_but_the_schema() -> None:
    assert set(launch.SETTINGS) == {name for s in config.SETTINGS for name in s.names} - {"PGQW_SCHEMA"}


@pytest.fixture
def unset(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No setting in the environment, under any of its names."""
    for s in config.SETTINGS:
        for name in s.names:
            monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_defaults_are_the_fields_defaults(unset: pytest.MonkeyPatch) -> None:
    loaded = dataclasses.asdict(config.load())
    default = dataclasses.asdict(config.Settings())
    assert {k: v for k, v in loaded.items() if k != "worker_id"} == {k: v for k, v in default.items() if k != "worker_id"}


@pytest.mark.parametrize(("env", "raw", "message"), [
    ("PRUNE_BATCH", "100001", "PRUNE_BATCH must be at most 100000, got 100001"),
    ("PGQW_PRUNE_BATCH", "100001", "PGQW_PRUNE_BATCH must be at most 100000, got 100001"),
    ("PGQW_PORT", "x", "PGQW_PORT must be a whole number, got 'x'"),
    ("PGQW_API_TOKENS", "short", "PGQW_API_TOKENS: token 1 is shorter than 16 characters"),
    ("API_TOKENS", "short", "API_TOKENS: token 1 is shorter than 16 characters"),
    ("WORKER_CONCURRENCY", "0", "WORKER_CONCURRENCY must be at least 1, got 0"),
    ("PORT", "x", "PORT must be a whole number, got 'x'"),
    ("WORKER_LOG_FORMAT", "xml", "WORKER_LOG_FORMAT must be text or json, got 'xml'"),
    ("WORKER_LISTEN", "maybe", "WORKER_LISTEN must be 1/0, true/false, yes/no or on/off, got 'maybe'"),
    ("PGQW_SCHEMA", "Bad Name", "PGQW_SCHEMA must be"),
])
def test_a_bad_value_names_its_variable(unset: pytest.MonkeyPatch, env: str, raw: str, message: str) -> None:
    unset.setenv(env, raw)
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


UNPREFIXED_NEVER = {"PGQW_SCHEMA", "PGQW_TASKS", "PGQW_DATA_DIR", "PGQW_PGBOUNCER", "PGQW_CREATE_ROLES"}


def test_every_setting_is_named_pgqw_with_its_old_name_as_alias() -> None:
    for s in config.SETTINGS:
        assert s.env.startswith("PGQW_"), s
        assert s.aliases == (() if s.env in UNPREFIXED_NEVER else (s.env.removeprefix("PGQW_"),)), s
    assert {s.env for s in config.SETTINGS if not s.aliases} == UNPREFIXED_NEVER
    assert config.by_field("database_url").names == ("PGQW_DATABASE_URL", "DATABASE_URL")
    assert config.by_field("heartbeat_interval_ms").names == ("PGQW_HEARTBEAT_INTERVAL_MS", "HEARTBEAT_INTERVAL_MS")


def test_setting_is_read_under_its_prefixed_name(unset: pytest.MonkeyPatch) -> None:
    unset.setenv("PGQW_HEARTBEAT_INTERVAL_MS", "250")
    unset.setenv("PGQW_DATABASE_URL", "postgresql://db.example/queue")
    s = config.load()
    assert (s.heartbeat_interval_ms, s.database_url) == (250, "postgresql://db.example/queue")


def test_setting_is_read_under_its_alias(unset: pytest.MonkeyPatch) -> None:
    unset.setenv("HEARTBEAT_INTERVAL_MS", "300")
    unset.setenv("DATABASE_URL", "postgresql://db.example/old")
    s = config.load()
    assert (s.heartbeat_interval_ms, s.database_url) == (300, "postgresql://db.example/old")


def test_setting_prefixed_name_wins_over_its_alias(unset: pytest.MonkeyPatch) -> None:
    unset.setenv("PGQW_HEARTBEAT_INTERVAL_MS", "250")
    unset.setenv("HEARTBEAT_INTERVAL_MS", "not read")  # the alias is not read at all: no error for it
    unset.setenv("PGQW_DATABASE_URL", "postgresql://db.example/new")
    unset.setenv("DATABASE_URL", "postgresql://db.example/old")
    s = config.load()
    assert (s.heartbeat_interval_ms, s.database_url) == (250, "postgresql://db.example/new")
    assert config.by_field("heartbeat_interval_ms").variable() == "PGQW_HEARTBEAT_INTERVAL_MS"


def test_setting_blank_prefixed_name_counts_as_unset(unset: pytest.MonkeyPatch) -> None:
    unset.setenv("PGQW_WORKER_CONCURRENCY", " ")
    unset.setenv("WORKER_CONCURRENCY", "7")
    assert config.load().concurrency == 7


@pytest.mark.parametrize(("env", "other"), [
    ("PGQW_WORKER_CONCURRENCY", {}),
    ("WORKER_CONCURRENCY", {}),
    ("PGQW_WORKER_CONCURRENCY", {"WORKER_CONCURRENCY": "3"}),  # both set: the prefixed one is read, and named
    ("WORKER_CONCURRENCY", {"PGQW_WORKER_CONCURRENCY": ""}),   # the prefixed one blank: the alias is read
])
def test_setting_bad_value_names_the_variable_set(unset: pytest.MonkeyPatch, env: str,
                                                  other: dict[str, str]) -> None:
    unset.setenv(env, "0")
    for name, raw in other.items():
        unset.setenv(name, raw)
    with pytest.raises(config.ConfigError) as exc:
        config.load()
    assert str(exc.value) == f"{env} must be at least 1, got 0"


def test_read_one_setting_leaves_the_others_unread(unset: pytest.MonkeyPatch) -> None:
    unset.setenv("WORKER_CONCURRENCY", "0")  # bad, but not the one asked for
    unset.setenv("DATABASE_URL", "postgresql://db.example/old")
    assert config.read("database_url") == "postgresql://db.example/old"
    assert config.read("task_modules") == ("pgqw.demo",)
    assert config.read("task_modules", ()) == ()
    unset.setenv("PGQW_DATABASE_URL", "postgresql://db.example/new")
    assert config.read("database_url") == "postgresql://db.example/new"


def test_launch_strips_both_names_of_a_setting(unset: pytest.MonkeyPatch) -> None:
    for name in ("PGQW_WORKER_CONCURRENCY", "WORKER_CONCURRENCY", "PGQW_DATABASE_URL", "DATABASE_URL"):
        unset.setenv(name, "9")
    unset.setenv("PGQW_SCHEMA", "pgqw_child")
    env = launch.child_env()
    assert not {"PGQW_WORKER_CONCURRENCY", "WORKER_CONCURRENCY", "PGQW_DATABASE_URL", "DATABASE_URL"} & set(env)
    assert env["PGQW_SCHEMA"] == "pgqw_child"
    kept = launch.child_env(inherit_settings=True)
    assert (kept["PGQW_WORKER_CONCURRENCY"], kept["WORKER_CONCURRENCY"]) == ("9", "9")


def test_launch_setting_given_replaces_the_parents_under_both_names(unset: pytest.MonkeyPatch) -> None:
    unset.setenv("PGQW_WORKER_CONCURRENCY", "9")
    unset.setenv("PGQW_PORT", "4000")
    unset.setenv("DATABASE_URL", "postgresql://db.example/parent")
    env = launch.child_env({"WORKER_CONCURRENCY": "2", "PGQW_PORT": "5000"},
                           database_url="postgresql://db.example/child", inherit_settings=True)
    assert "PGQW_WORKER_CONCURRENCY" not in env and env["WORKER_CONCURRENCY"] == "2"
    assert env["PGQW_PORT"] == "5000"
    assert env["PGQW_DATABASE_URL"] == "postgresql://db.example/child" and "DATABASE_URL" not in env
