"""Turning the typed rows of pgqw.db into the API's JSON (camelCase, times in UTC with Z),
and the opaque keyset cursor of the job list."""
from __future__ import annotations

import base64
import binascii
import uuid
from datetime import datetime, timezone
from typing import Any

from pgqw import db

READY_STATUSES = ("pending", "failed")


def iso(value: datetime | None) -> str | None:
    """2025-11-30T05:12:03.123Z: ISO 8601 in UTC, milliseconds, a Z."""
    if value is None:
        return None
    return value.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def flyer_path(job_id: uuid.UUID | str) -> str:
    return f"/api/jobs/{job_id}/flyer"


def result_path(job: db.Job) -> str:
    """Where a succeeded job's result is served: the demo's flyers at /flyer, every other type at /result."""
    return flyer_path(job.id) if job.type == "listing_flyer" else f"/api/jobs/{job.id}/result"


def job_json(job: db.Job) -> dict[str, Any]:
    return {
        "id": str(job.id),
        "type": job.type,
        "queue": job.queue,
        "priority": job.priority,
        "status": job.status,
        "attempts": job.attempts,
        "maxAttempts": job.max_attempts,
        "lastError": job.last_error,
        "nextAttemptAt": iso(job.run_at) if job.status in READY_STATUSES else None,
        "createdAt": iso(job.created_at),
        "startedAt": iso(job.started_at),
        "finishedAt": iso(job.finished_at),
        "lockedBy": job.locked_by,
        "payload": job.payload,
        "resultUrl": result_path(job) if job.status == "succeeded" else None,
    }


def attempt_json(attempt: db.Attempt) -> dict[str, Any]:
    return {
        "attempt": attempt.attempt,
        "workerId": attempt.worker_id,
        "startedAt": iso(attempt.started_at),
        "finishedAt": iso(attempt.finished_at),
        "outcome": attempt.outcome,
        "error": attempt.error,
    }


class BadCursor(ValueError):
    """A cursor this API did not make."""


def encode_cursor(position: tuple[datetime, uuid.UUID]) -> str:
    """The (created_at, id) of a page's last job as urlsafe base64, without padding.
    The time keeps its microseconds, so the next page starts exactly after that job."""
    created_at, job_id = position
    raw = f"{created_at.astimezone(timezone.utc).isoformat(timespec='microseconds')}|{job_id}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(text: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("ascii")
        at_text, id_text = raw.split("|")
        created_at = datetime.fromisoformat(at_text)
        job_id = uuid.UUID(id_text)
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise BadCursor(str(exc)) from None
    if created_at.tzinfo is None:
        raise BadCursor("cursor time has no time zone")
    return created_at, job_id
