"""The lab: real processes and servers to break the queue on purpose (the break-it scenarios, the
chaos soak, a PostgreSQL server a test owns). It lives in the repository, not in the installed
package; `pgqw soak` and `pgqw evidence` load it from a checkout."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg

ROOT = Path(__file__).resolve().parents[2]


def new_database(admin: psycopg.Connection, name: str) -> None:
    """A new empty database for the lab whose own default search_path starts with the queue's schema, so
    the lab's SQL (its checks and stand-ins) names the queue's tables plainly, as a DBA who sets
    search_path does. The package never relies on it: it names every object with the schema."""
    from psycopg import sql

    from pgqw import schema

    admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    admin.execute(sql.SQL("alter database {} set search_path = {}, public").format(
        sql.Identifier(name), sql.Identifier(schema.name())))
