"""Task types: the code registers its definitions; reads give their effective settings."""
from __future__ import annotations

from typing import Any, Sequence

import psycopg
from psycopg.types.json import Jsonb

from ._exec import _all, _column, _maybe
from .models import TaskType


def register_task_types(conn: psycopg.Connection, *, types: Sequence[dict[str, Any]]) -> list[str]:
    """Upserts the code's definitions (pgqw.tasks.Task.registration()); a DBA's values stay."""
    return _column(conn, "select name from pgqw.register_task_types(%(types)s::jsonb)", {"types": Jsonb(list(types))})


def get_task_types(conn: psycopg.Connection) -> list[TaskType]:
    """Every registered type with its effective settings (task_type_settings), by name."""
    return _all(conn, TaskType, "select * from pgqw.list_task_types()")


def get_task_type(conn: psycopg.Connection, *, name: str) -> TaskType | None:
    return _maybe(conn, TaskType, "select * from pgqw.list_task_types(%(name)s::text)", {"name": name})
