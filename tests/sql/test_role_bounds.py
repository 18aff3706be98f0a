"""What a compromised worker login can no longer do, each tried as that login on the real server:

  - make jobs: it defines no schedule (register_schedules, set_schedule refused) and enqueue_schedule_slots
    takes only due slots of the cron (an off-slot time or a future one is QV400), so catch_up 'latest'
    cannot be tricked out of the real slot
  - read other types' payloads: list_schedules is refused; schedule_times carries no payload
  - delete jobs its retention keeps: prune_jobs is refused; prune_expired_jobs deletes only what
    queue_settings' ages allow
  - set everyone's lease: a registered lease is read as 1 s to one day; a DBA's lease_ms wins
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from pgqw import db
from tests.helpers import one, rows
from tests.sql import queue_state as states


@pytest.fixture
def worker(db_url: str) -> Iterator[psycopg.Connection]:
    c = psycopg.connect(make_conninfo(db_url, user="pgqw_worker"), autocommit=True)
    yield c
    c.close()


def _exists(conn: psycopg.Connection, job_id: object) -> bool:
    return bool(one(conn, "select count(*) as n from jobs where id = %s", [job_id])["n"])


def _refused(conn: psycopg.Connection, sql: str, params: list | None = None) -> str:
    with pytest.raises(psycopg.Error) as refused:
        conn.execute(sql, params or [])
    return str(refused.value.sqlstate)


def test_role_bounds_a_worker_defines_no_schedule(worker: psycopg.Connection, conn: psycopg.Connection) -> None:
    assert _refused(worker, "select * from register_schedules(array['noop'], %s::jsonb)",
                    ['[{"name": "flood", "task_type": "noop", "cron": "* * * * *", "payload": {}}]']) == "42501"
    assert _refused(worker, "select * from set_schedule('flood', 'noop', '* * * * *')") == "42501"
    assert _refused(worker, "select * from list_schedules()") == "42501"
    assert rows(conn, "select * from schedules") == []


def test_role_bounds_slots_are_only_the_crons_own(worker: psycopg.Connection, conn: psycopg.Connection) -> None:
    conn.execute("select * from set_schedule('yearly', 'noop', '0 3 1 1 *', p_catch_up => 'latest')")
    conn.execute("update schedules set slots_after = '2020-01-01T00:00:00Z'")
    for off in ("2025-06-07T03:47:17.6Z", "2025-01-01T03:00:30Z", "2025-01-02T03:00:00Z"):
        assert _refused(worker, "select * from enqueue_schedule_slots('yearly', array[%s::timestamptz])", [off]) \
            == "QV400", off
    future = datetime.now(timezone.utc).replace(year=datetime.now(timezone.utc).year + 1, month=1, day=1, hour=3,
                                                minute=0, second=0, microsecond=0)
    assert _refused(worker, "select * from enqueue_schedule_slots('yearly', array[%s::timestamptz])", [future]) \
        == "QV400"
    assert rows(conn, "select id from jobs") == []
    # The real slots: with catch_up latest, the latest one gets its job.
    made = rows(worker, "select * from enqueue_schedule_slots('yearly', array['2024-01-01T03:00:00Z',"
                        " '2025-01-01T03:00:00Z']::timestamptz[])")
    assert [m["slot"] for m in made] == [datetime(2025, 1, 1, 3, tzinfo=timezone.utc)]
    assert one(conn, "select count(*) as n from jobs")["n"] == 1
    # A time typed by hand from psql is no more a slot for the owner than for the worker.
    assert _refused(conn, "select * from enqueue_schedule_slots('yearly', array['2025-03-03T03:00:00Z'::timestamptz])") \
        == "QV400"


@pytest.mark.parametrize("cron, at, expected", [
    ("* * * * *", "2025-05-05T10:11:00Z", True),
    ("* * * * *", "2025-05-05T10:11:01Z", False),          # not a whole minute
    ("*/15 9-17 * * mon-fri", "2025-05-05T09:45:00Z", True),  # a Monday
    ("*/15 9-17 * * mon-fri", "2025-05-04T09:45:00Z", False),  # a Sunday
    ("*/15 9-17 * * mon-fri", "2025-05-05T18:00:00Z", False),
    ("0 0 13 * 5", "2025-06-13T00:00:00Z", True),           # both day fields: either one (the 13th)
    ("0 0 13 * 5", "2025-06-06T00:00:00Z", True),           # a Friday
    ("0 0 13 * 5", "2025-06-07T00:00:00Z", False),
    ("0 0 * * 7", "2025-05-04T00:00:00Z", True),             # 7 is Sunday too
    ("@hourly", "2025-05-05T10:00:00Z", True),
    ("@hourly", "2025-05-05T10:30:00Z", False),
    ("@yearly", "2025-01-01T00:00:00Z", True),
    ("0 12 * jan,jul *", "2025-07-01T12:00:00Z", True),
    ("0 12 * jan,jul *", "2025-08-01T12:00:00Z", False),
    ("not cron", "2025-01-01T00:00:00Z", None),
])
def test_role_bounds_cron_matches_reads_cron_as_the_scheduler_does(conn: psycopg.Connection, cron: str, at: str,
                                                                   expected: bool | None) -> None:
    assert one(conn, "select cron_matches(%s, %s::timestamptz) as m", [cron, at])["m"] is expected


def test_role_bounds_cron_matches_agrees_with_croniter(conn: psycopg.Connection) -> None:
    from pgqw.cron import due_slots

    start = datetime(2025, 2, 26, 22, 0, tzinfo=timezone.utc)
    end = start + timedelta(days=5)
    for cron in ("*/7 * * * *", "5 */3 * * *", "0 0 28-31 * *", "30 6 * * 1,3,5", "0 0 1 * sun", "@daily"):
        slots = due_slots(cron, start, end)
        if len(slots) == 100:  # due_slots keeps the latest 100: compare those
            pass
        matched = [r["t"] for r in rows(
            conn, "select t from generate_series(%s::timestamptz, %s::timestamptz, interval '1 minute') t"
                  " where t > %s and cron_matches(%s, t) order by t", [start, end, start, cron])]
        assert matched[-len(slots):] == slots, cron


def test_role_bounds_a_worker_prunes_only_past_the_retention(worker: psycopg.Connection,
                                                            conn: psycopg.Connection) -> None:
    dead = states.dead(conn, errors=("a person will look",))
    done = states.succeeded(conn)
    assert _refused(worker, "select prune_jobs(interval '0', array['succeeded', 'dead'], 100000)") == "42501"
    assert one(worker, "select prune_expired_jobs(100000) as n")["n"] == 0
    assert _exists(conn, dead.id) and _exists(conn, done.id)
    conn.execute("update jobs set finished_at = now() - interval '8 days' where id = any(%s)", [[dead.id, done.id]])
    assert one(worker, "select prune_expired_jobs(100000) as n")["n"] == 1  # the success; the dead one: 30 days
    assert not _exists(conn, done.id) and _exists(conn, dead.id)
    conn.execute("update queue_settings set prune_finished_after = interval '7 days'")  # a DBA's choice
    assert one(worker, "select prune_expired_jobs(100000) as n")["n"] == 1
    assert not _exists(conn, dead.id)
    assert _refused(worker, "update queue_settings set prune_finished_after = interval '0'") == "42501"


@pytest.mark.parametrize("registered, granted", [(2147483647, 86_400_000), (1, 1000), (90_000, 90_000)])
def test_role_bounds_a_registered_lease_is_held_to_a_second_and_a_day(
    worker: psycopg.Connection, conn: psycopg.Connection, registered: int, granted: int
) -> None:
    db.register_task_types(worker, types=[{"name": "leasy", "payload_schema": {}, "lease_ms": registered}])
    states.pending(conn, type="leasy", queue="lq")
    job = db.claim_job(worker, worker_id="honest", queues=["lq"])
    assert job is not None and job.lease_expires_at - job.started_at == timedelta(milliseconds=granted)


def test_role_bounds_a_dbas_lease_wins(worker: psycopg.Connection, conn: psycopg.Connection) -> None:
    db.register_task_types(worker, types=[{"name": "leasy", "payload_schema": {}, "lease_ms": 2147483647}])
    conn.execute("update task_types set lease_ms = 500 where name = 'leasy'")
    states.pending(conn, type="leasy", queue="lq")
    job = db.claim_job(worker, worker_id="honest", queues=["lq"])
    assert job is not None and job.lease_expires_at - job.started_at == timedelta(milliseconds=500)


def test_role_bounds_the_scheduler_reads_timing_without_payloads(worker: psycopg.Connection,
                                                                conn: psycopg.Connection) -> None:
    conn.execute("select * from set_schedule('secret', 'noop', '@daily', p_payload => '{\"token\": \"s3cret\"}')")
    [row] = rows(worker, "select * from schedule_times()")
    assert row["name"] == "secret" and "payload" not in row
