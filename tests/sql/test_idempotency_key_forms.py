"""A plain idempotency key and a windowed one (unique_for) never meet: a windowed key is stored as
`<key>@<window start>`, and enqueue_job and enqueue_jobs refuse a plain key of that form (QI422), so no
plain caller can take a window's job or be handed one. A schedule's slots share the form
(`schedule:<name>@<slot>`, plain keys of enqueue_schedule_slots): a plain key starting with `schedule:`
may have it, and a windowed key may not start with `schedule:`."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from pgqw import db
from tests.helpers import rows
from tests.sql.queue_state import snapshot

HOUR = timedelta(hours=1)
START = (datetime.now(UTC) + timedelta(days=2)).replace(hour=10, minute=0, second=0, microsecond=0)
STORED = f"report-7@{START:%Y-%m-%dT%H:%M:%S}.000Z"  # what the windowed key report-7 becomes for START's hour


def windowed(conn: psycopg.Connection) -> db.EnqueuedJob:
    return db.enqueue_job(conn, type="report", payload={"customer": 7}, idempotency_key="report-7",
                          run_at=START + timedelta(minutes=5), unique_for=HOUR)


def test_idempotency_key_plain_in_the_window_form_raises_qi422_and_changes_nothing(conn: psycopg.Connection) -> None:
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        db.enqueue_job(conn, type="report", payload={"customer": 8}, idempotency_key=STORED, run_at=START)
    assert exc.value.sqlstate == "QI422"
    assert STORED in exc.value.diag.message_primary
    assert snapshot(conn) == before


def test_idempotency_key_plain_cannot_take_the_window_of_a_later_windowed_caller(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as exc:
        db.enqueue_job(conn, type="report", payload={"customer": 8}, idempotency_key=STORED, run_at=START)
    assert exc.value.sqlstate == "QI422"
    job = windowed(conn)  # before, this was QI409: the plain call had taken its key
    assert job.created and job.idempotency_key == STORED and job.payload == {"customer": 7}


def test_idempotency_key_plain_is_not_handed_the_job_of_a_window(conn: psycopg.Connection) -> None:
    made = windowed(conn)
    with pytest.raises(psycopg.Error) as exc:
        db.enqueue_job(conn, type="report", payload={"customer": 7}, idempotency_key=STORED, run_at=START)
    assert exc.value.sqlstate == "QI422"
    assert [r["id"] for r in rows(conn, "select id from jobs where idempotency_key like 'report-7@%'")] == [made.id]


def test_idempotency_key_enqueue_jobs_plain_in_the_window_form_raises_qi422(conn: psycopg.Connection) -> None:
    before = snapshot(conn)
    jobs = [{"type": "t", "payload": {}, "idempotency_key": "fine"},
            {"type": "report", "payload": {"customer": 8}, "idempotency_key": STORED, "run_at": START}]
    with pytest.raises(psycopg.Error) as exc:
        db.enqueue_jobs(conn, jobs=jobs)
    assert exc.value.sqlstate == "QI422"
    assert exc.value.diag.message_primary.startswith("job 2:")
    assert snapshot(conn) == before
    # A JSON null unique_for_ms is no window either.
    with pytest.raises(psycopg.Error) as exc:
        conn.execute("select (r.job).*, r.created from enqueue_jobs(%s::jsonb) r",
                     [f'[{{"type": "t", "payload": {{}}, "idempotency_key": "{STORED}", "unique_for_ms": null}}]'])
    assert exc.value.sqlstate == "QI422"


@pytest.mark.parametrize("key", ["ada@example.com", "k@2025-01-01", "k@2025-01-01T10:00:00Z",
                                 "k@2025-01-01T10:00:00.000Zx", "k@2025-01-01T10:00:00.000", "@",
                                 "k@2025-01-01T10:00:00.0000Z"])
def test_idempotency_key_with_an_at_sign_but_not_the_window_form_is_a_plain_key(
    conn: psycopg.Connection, key: str
) -> None:
    job = db.enqueue_job(conn, type="t", payload={}, idempotency_key=key)
    assert job.created and job.idempotency_key == key
    [made] = db.enqueue_jobs(conn, jobs=[{"type": "t", "payload": {}, "idempotency_key": key}])
    assert made.id == job.id and not made.created


def test_idempotency_key_windowed_may_itself_end_in_the_window_form(conn: psycopg.Connection) -> None:
    """With unique_for the key gets its own window start after it, so it cannot be a plain key's."""
    job = db.enqueue_job(conn, type="report", payload={}, idempotency_key=STORED, run_at=START, unique_for=HOUR)
    assert job.created and job.idempotency_key == f"{STORED}@{START:%Y-%m-%dT%H:%M:%S}.000Z"
    [again] = db.enqueue_jobs(conn, jobs=[{"type": "report", "payload": {}, "idempotency_key": STORED,
                                           "run_at": START, "unique_for": HOUR}])
    assert again.id == job.id and not again.created


def test_idempotency_key_plain_schedule_slot_form_is_a_plain_key(conn: psycopg.Connection) -> None:
    """enqueue_schedule_slots' keys: `schedule:<name>@<slot>`, with no unique_for."""
    key = f"schedule:reports.nightly@{START:%Y-%m-%dT%H:%M:%S}.000Z"
    job = db.enqueue_job(conn, type="t", payload={}, idempotency_key=key, run_at=START)
    assert job.created and job.idempotency_key == key


def test_idempotency_key_windowed_starting_with_schedule_raises_qi422(conn: psycopg.Connection) -> None:
    """Its stored form would be a schedule's slot key: schedule:nightly windowed by the day is the key of
    the nightly schedule's slot at midnight."""
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        db.enqueue_job(conn, type="t", payload={}, idempotency_key="schedule:nightly", run_at=START,
                       unique_for=timedelta(days=1))
    assert exc.value.sqlstate == "QI422"
    with pytest.raises(psycopg.Error) as exc:
        db.enqueue_jobs(conn, jobs=[{"type": "t", "payload": {}, "idempotency_key": "schedule:nightly",
                                     "run_at": START, "unique_for": timedelta(days=1)}])
    assert exc.value.sqlstate == "QI422"
    assert "starts with schedule:" in exc.value.diag.message_primary
    assert snapshot(conn) == before
