"""Errors the pgqw command reports as one line (pgqw.cli catches them)."""
from __future__ import annotations

import psycopg

from . import schema


class UsageError(RuntimeError):
    """A command was asked for something it cannot do; the message says what."""


# What a database without the queue (never migrated, or migrated into another schema) answers.
NO_QUEUE = (psycopg.errors.UndefinedFunction, psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName)


def no_queue_message(exc: psycopg.Error) -> str:
    return (f"the database has no queue in schema {schema.name()} ({exc.diag.message_primary}); "
            "run `pgqw migrate` first (or set PGQW_SCHEMA to the schema it was migrated into)")
