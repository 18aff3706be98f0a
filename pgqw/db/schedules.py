"""Schedules: periodic jobs (db/functions/*schedule*.sql)."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Sequence

import psycopg
from psycopg.types.json import Jsonb

from ._exec import _all, _maybe, _one
from .models import Schedule, ScheduledJob, ScheduleTimes


def set_schedule(conn: psycopg.Connection, *, name: str, task_type: str, cron: str,
                 payload: dict[str, Any] | None = None, queue: str | None = None, priority: int | None = None,
                 catch_up: str = "latest") -> Schedule:
    """Makes or replaces a schedule as a DBA's (source sql); its pause is kept."""
    return _one(conn, Schedule, "select * from pgqw.set_schedule(%(name)s::text, %(task_type)s::text, %(cron)s::text,"
                " %(payload)s::jsonb, %(queue)s::text, %(priority)s::integer, %(catch_up)s::text)",
                {"name": name, "task_type": task_type, "cron": cron, "payload": Jsonb(payload or {}),
                 "queue": queue, "priority": priority, "catch_up": catch_up})


def pause_schedule(conn: psycopg.Connection, *, name: str) -> Schedule:
    return _one(conn, Schedule, "select * from pgqw.pause_schedule(%(name)s::text)", {"name": name})


def resume_schedule(conn: psycopg.Connection, *, name: str) -> Schedule:
    """Enqueues again from the next slot after now (the slots passed while paused are skipped)."""
    return _one(conn, Schedule, "select * from pgqw.resume_schedule(%(name)s::text)", {"name": name})


def delete_schedule(conn: psycopg.Connection, *, name: str) -> Schedule:
    return _one(conn, Schedule, "select * from pgqw.delete_schedule(%(name)s::text)", {"name": name})


def get_schedule(conn: psycopg.Connection, *, name: str) -> Schedule | None:
    return _maybe(conn, Schedule, "select * from pgqw.schedules where name = %(name)s::text", {"name": name})


def list_schedules(conn: psycopg.Connection) -> list[Schedule]:
    """Every schedule, by name."""
    return _all(conn, Schedule, "select * from pgqw.list_schedules()")


def schedule_times(conn: psycopg.Connection) -> list[ScheduleTimes]:
    """Every schedule's timing, by name (no payloads)."""
    return _all(conn, ScheduleTimes, "select * from pgqw.schedule_times()")


def register_schedules(conn: psycopg.Connection, *, task_types: Sequence[str],
                       schedules: Sequence[dict[str, Any]]) -> list[Schedule]:
    """Upserts the code's schedules (pgqw.tasks.Task.schedule_registrations()) of a worker running
    task_types; deletes its code schedules the code no longer defines. A DBA's pause and schedules stay."""
    return _all(conn, Schedule, "select * from pgqw.register_schedules(%(types)s::text[], %(schedules)s::jsonb)",
                {"types": list(task_types), "schedules": Jsonb(list(schedules))})


def enqueue_schedule_slots(conn: psycopg.Connection, *, name: str, slots: Sequence[datetime]) -> list[ScheduledJob]:
    """The due slots found for a schedule (none in the server's future); the schedule's catch_up picks
    which get a job, each once whoever calls."""
    return _all(conn, ScheduledJob, "select * from pgqw.enqueue_schedule_slots(%(name)s::text, %(slots)s::timestamptz[])",
                {"name": name, "slots": list(slots)})
