"""Errors the pgqw command reports as one line (pgqw.cli catches them)."""
from __future__ import annotations

import re
from importlib import metadata

import psycopg

from . import schema

DISTRIBUTION = "pg-queue-worker"


class UsageError(RuntimeError):
    """A command was asked for something it cannot do; the message says what."""


class MissingExtra(UsageError):
    """Something needs an optional part of the package (an extra of pyproject.toml) that is not installed.

    `subject` says what needs it; "{command}" in it stands for the command that ran (pgqw.cli fills it
    in, as in "pgqw api needs the api extra: pip install 'pg-queue-worker[api]'")."""

    def __init__(self, extra: str, subject: str = "{command}", otherwise: str = "") -> None:
        self.extra, self.subject, self.otherwise = extra, subject, otherwise
        super().__init__(self.line())

    def line(self, command: str = "this command") -> str:
        text = (f"{self.subject.format(command=command)} needs the {self.extra} extra: "
                f"pip install '{DISTRIBUTION}[{self.extra}]'")
        return f"{text} ({self.otherwise})" if self.otherwise else text


def missing_from_extra(extra: str) -> list[str]:
    """The distributions the installed package's metadata lists for the extra that are not installed
    (pyproject.toml is the one declaration of the extras). Without the package's metadata (a source
    tree on the path, not installed) nothing is known missing."""
    try:
        requires = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    missing: list[str] = []
    for line in requires:
        found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?[^;]*;\s*(.*)$", line)
        if found is None or not re.search(rf"""extra\s*==\s*["']{re.escape(extra)}["']""", found.group(3)):
            continue
        name, extras = found.group(1), found.group(2)
        if re.sub(r"[-_.]+", "-", name).lower() == DISTRIBUTION:  # all = pg-queue-worker[api,embedded,demo]
            missing += [m for e in (extras or "").split(",") if e.strip() for m in missing_from_extra(e.strip())]
            continue
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    return missing


def require_extra(extra: str, subject: str = "{command}", otherwise: str = "") -> None:
    """Raises MissingExtra unless every distribution of the extra is installed."""
    if missing_from_extra(extra):
        raise MissingExtra(extra, subject, otherwise)


DEMO_MODULE = "pgqw.demo"


def require_task_extras(modules: tuple[str, ...] | list[str], otherwise: str) -> None:
    """Raises MissingExtra when the task modules name the demo's (its flyer needs reportlab) and the
    demo extra is not installed: a worker would start, then fail every flyer job."""
    if DEMO_MODULE in modules:
        require_extra("demo", "{command} running the demo's tasks (pgqw.demo)", otherwise)


# What a database without the queue (never migrated, or migrated into another schema) answers.
NO_QUEUE = (psycopg.errors.UndefinedFunction, psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName)


def no_queue_message(exc: psycopg.Error) -> str:
    return (f"the database has no queue in schema {schema.name()} ({exc.diag.message_primary}); "
            "run `pgqw migrate` first (or set PGQW_SCHEMA to the schema it was migrated into)")
