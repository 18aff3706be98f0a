"""db/schema.sql, the committed dump of the schema, is what a fresh migrate makes (docs/tools/dump_schema.py).

A migration or a function changed without regenerating the dump fails here with the diff, so a review
sees every change to the schema as a change to one file. pg_dump prints a catalog of another major
version differently, so the comparison runs only on a server of the dump's version (CI's first pass,
the machine's PostgreSQL 15); on any other (the embedded 18 of CI's second pass) it is skipped, saying
so. It always dumps the default schema name, `pgqw`, whatever PGQW_SCHEMA names.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers import cannot_run

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_SQL = ROOT / "db" / "schema.sql"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pgqw_dump_schema", ROOT / "docs" / "tools" / "dump_schema.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tool = _tool()


def test_schema_dump_normalise_drops_what_varies_between_runs() -> None:
    raw = ("--\n-- PostgreSQL database dump\n--\n\n"
           "\\restrict Zq3kYb8sQeW1\n\n"
           "-- Dumped from database version 15.20 (Debian 15.20-0+deb12u1)\n"
           "-- Dumped by pg_dump version 15.20 (Debian 15.20-0+deb12u1)\n\n"
           "SET statement_timeout = 0;\nSET client_encoding = 'UTF8';\n"
           "SELECT pg_catalog.set_config('search_path', '', false);\n\n\n"
           "CREATE FUNCTION pgqw.f() RETURNS integer\n    LANGUAGE sql\n    SET search_path TO 'pgqw', 'pg_temp'\n"
           "    AS $$select 1$$;\n\n"
           "\\unrestrict Zq3kYb8sQeW1\n")
    out = tool.normalise(raw)
    assert out.startswith(tool.HEADER)
    assert "restrict" not in out and "SET statement_timeout" not in out and "set_config" not in out
    assert "-- Dumped from database version 15\n-- Dumped by pg_dump version 15\n" in out
    assert "    SET search_path TO 'pgqw', 'pg_temp'\n" in out  # a function's own SET is part of the schema
    assert "\n\n\n" not in out
    assert tool.dump_major(out) == 15
    assert tool.normalise(out.removeprefix(tool.HEADER + "\n")) == out


def test_schema_dump_matches_a_fresh_migrate(pg_server: str) -> None:
    committed = SCHEMA_SQL.read_text()
    wanted = tool.dump_major(committed)
    assert wanted, f"db/schema.sql names no 'Dumped from database version'; regenerate it: {tool.COMMAND}"
    server = tool.server_major(pg_server)
    if server != wanted:
        pytest.skip(f"the test server is PostgreSQL {server} and db/schema.sql is a dump from PostgreSQL {wanted}: "
                    f"pg_dump prints another version's catalog differently, so a server of {wanted} checks it")
    pg_dump = tool.find_pg_dump(server)
    if pg_dump is None:
        cannot_run(f"no pg_dump of PostgreSQL {server} is found (/usr/lib/postgresql/{server}/bin, "
                   "pg_config --bindir, PATH)")
    fresh = tool.dump(pg_server, pg_dump=pg_dump)
    if fresh != committed:
        pytest.fail(f"db/schema.sql is not what a fresh migrate makes; regenerate it with\n"
                    f"    {tool.COMMAND} [DSN of a PostgreSQL {wanted} server]\n"
                    f"and commit it with the change.\n\n{tool.diff(committed, fresh)}", pytrace=False)
