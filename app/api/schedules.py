"""The schedules (periodic jobs): list, pause, resume."""
from __future__ import annotations

from datetime import datetime

from flask import Blueprint, Response

from pgqw import db
from pgqw.cron import next_slot_of

from ..errors import ApiError
from ..models import Schedule, ScheduleList
from .common import SCHEDULE_NAME_RE, ok, pool

bp = Blueprint("schedules", __name__)


def schedule_of(s: db.Schedule, now: datetime) -> Schedule:
    return Schedule.of(s, next_slot_of(s, now))


def schedule_name(name: str) -> str:
    """Any other name is no schedule's (the schedules_name_charset rule): 404, as for an unknown one."""
    if not SCHEDULE_NAME_RE.fullmatch(name):
        raise ApiError(404, "schedule_not_found", f"no schedule is named {name[:64]!r}")
    return name


@bp.get("/schedules")
def list_schedules() -> Response:
    """Every schedule by name, with its next slot (croniter, from the server's clock; null when paused)."""
    with pool().connection() as conn:
        now = db.server_now(conn)
        found = db.list_schedules(conn)
    return ok(ScheduleList(schedules=[schedule_of(s, now) for s in found]))


@bp.post("/schedules/<name>/pause")
def pause_schedule(name: str) -> Response:
    """The schedule enqueues nothing until resumed (pause_schedule). Idempotent; 404 (QR404) when unknown."""
    with pool().connection() as conn:
        row = db.pause_schedule(conn, name=schedule_name(name))
        now = db.server_now(conn)
    return ok(schedule_of(row, now))


@bp.post("/schedules/<name>/resume")
def resume_schedule(name: str) -> Response:
    """Enqueues again from the next slot after now (resume_schedule). Idempotent; 404 (QR404) when unknown."""
    with pool().connection() as conn:
        row = db.resume_schedule(conn, name=schedule_name(name))
        now = db.server_now(conn)
    return ok(schedule_of(row, now))
