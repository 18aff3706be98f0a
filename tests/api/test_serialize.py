"""Times in UTC with Z, and the opaque cursor (created_at + id) of the job list."""
from __future__ import annotations

import base64
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from pgqw.app.serialize import BadCursor, decode_cursor, encode_cursor, iso


def test_iso_is_utc_with_milliseconds_and_z() -> None:
    lagos = timezone(timedelta(hours=1))
    assert iso(datetime(2025, 11, 30, 6, 12, 3, 123456, tzinfo=lagos)) == "2025-11-30T05:12:03.123Z"
    assert iso(None) is None


def test_cursor_round_trips_with_microseconds() -> None:
    at = datetime(2025, 11, 30, 5, 12, 3, 123456, tzinfo=timezone(timedelta(hours=-5)))
    job_id = uuid.uuid4()
    cursor = encode_cursor((at, job_id))
    assert "=" not in cursor and "+" not in cursor and "/" not in cursor
    back_at, back_id = decode_cursor(cursor)
    assert back_at == at and back_id == job_id


@pytest.mark.parametrize(
    "text",
    ["", "!!!", "abc", base64.urlsafe_b64encode(b"2025-01-01T00:00:00+00:00").decode(),
     base64.urlsafe_b64encode(b"2025-01-01T00:00:00|" + str(uuid.uuid4()).encode()).decode(),
     base64.urlsafe_b64encode(b"x|y|z").decode(), base64.urlsafe_b64encode(b"\xff\xfe").decode()],
)
def test_decode_cursor_refuses_what_it_did_not_make(text: str) -> None:
    with pytest.raises(BadCursor):
        decode_cursor(text)
