"""The API's way of writing times (UTC with Z; app/models/ builds the answers), and the opaque
keyset cursor of the job list."""
from __future__ import annotations

import base64
import binascii
import uuid
from datetime import datetime, timezone


def iso(value: datetime | None) -> str | None:
    """2025-11-30T05:12:03.123Z: ISO 8601 in UTC, milliseconds, a Z."""
    if value is None:
        return None
    return value.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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
