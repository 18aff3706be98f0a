"""Cron expressions read with croniter, the one way the scheduler, the CLI and the API read them: in UTC,
the five fields and macros that check_schedule_cron (db/functions) lets into the schedules table."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from croniter import croniter

from . import db

MAX_SLOTS = 100  # slots per enqueue_schedule_slots call (its limit)


def due_slots(cron: str, after: datetime, now: datetime, limit: int = MAX_SLOTS) -> list[datetime]:
    """The slots of cron in (after, now], the latest `limit` of them, oldest first."""
    found: list[datetime] = []
    # croniter's get_prev is strictly before its start: a microsecond later counts a slot at `now` itself.
    it = croniter(cron, now.astimezone(timezone.utc) + timedelta(microseconds=1))
    while len(found) < limit:
        slot = it.get_prev(datetime)
        if slot <= after:
            break
        found.append(slot)
    return found[::-1]


def next_slot(cron: str, after: datetime) -> datetime:
    """The first slot of cron after `after`."""
    return croniter(cron, after.astimezone(timezone.utc)).get_next(datetime)


def done_until(schedule: db.Schedule | db.ScheduleTimes) -> datetime:
    """No slot at or before this is enqueued any more: its last slot, or where it starts from."""
    return max(schedule.slots_after, schedule.last_slot or schedule.slots_after)


def next_slot_of(schedule: db.Schedule, now: datetime) -> datetime | None:
    """When the schedule's next job is due: its first slot after now and after the slots it has done
    (None when paused, or when the expression cannot be read)."""
    if schedule.paused:
        return None
    try:
        return next_slot(schedule.cron, max(now, done_until(schedule)))
    except (ValueError, KeyError):  # croniter's errors are ValueErrors; the database checked the text
        return None
