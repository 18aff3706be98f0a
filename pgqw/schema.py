"""The one schema that holds everything the queue makes: tables, views, domains, functions and the
migration ledger. `pgqw` unless PGQW_SCHEMA names another; read by migrate, the worker, the API, the
client and the CLI alike (each process reads the environment, so a worker and the API started with the
same PGQW_SCHEMA find the same queue).

Every statement the package sends names its objects with the schema (`select * from pgqw.claim_job(...)`),
so it works on any connection whatever its search_path: an application's own connection included. The
SQL text in pgqw.db is written with the default name and goes through `qualify`, which puts the configured
name in its place (once per statement text and schema: the result is cached).
"""
from __future__ import annotations

import functools
import os
import re

DEFAULT = "pgqw"
ENV = "PGQW_SCHEMA"
# A plain lower-case identifier: it is written into statements unquoted, and means the same to psql.
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
# PostgreSQL's own schemas, and the one an application's objects live in.
RESERVED = ("public", "information_schema")
_QUALIFIED = re.compile(r"(?<![\w.\"])pgqw\.(?=[a-z_])")


class SchemaNameError(ValueError):
    """PGQW_SCHEMA (or a schema argument) is not a name the queue can live in."""


def check(name: str, *, source: str = ENV) -> str:
    """The name, if the queue may live in a schema of that name; else SchemaNameError saying why."""
    if not _NAME.match(name):
        raise SchemaNameError(
            f"{source} must be a lower-case identifier (letters, digits and _, not starting with a digit, "
            f"at most 63 characters), got {name!r}")
    if name in RESERVED or name.startswith("pg_"):
        raise SchemaNameError(f"{source} must name a schema of the queue's own, not {name!r} "
                              "(the application's and PostgreSQL's schemas are never used)")
    return name


@functools.lru_cache(maxsize=8)
def _checked(raw: str) -> str:
    return check(raw)


def name() -> str:
    """The configured schema: PGQW_SCHEMA, else `pgqw`. Raises SchemaNameError for a bad name."""
    raw = os.environ.get(ENV)
    if not raw:
        return DEFAULT
    return _checked(raw.strip())


@functools.lru_cache(maxsize=4096)
def _qualified(schema: str, text: str) -> str:
    return _QUALIFIED.sub(schema + ".", text)


def qualify(text: str, schema: str | None = None) -> str:
    """SQL text written with `pgqw.` before each of the queue's objects, with the configured schema
    (or the one given) in its place."""
    schema = name() if schema is None else schema
    return text if schema == DEFAULT else _qualified(schema, text)
