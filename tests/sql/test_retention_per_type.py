"""prune_expired_jobs by each task type's retention: a type's shorter age prunes its jobs sooner, a longer one keeps
them past the queue's, a DBA's age wins over the code's, and the batch stays bounded."""
from __future__ import annotations

import uuid
from datetime import timedelta

import psycopg
from psycopg.types.json import Jsonb

from tests.helpers import one, rows


def _finished(conn: psycopg.Connection, type: str, status: str, days_ago: float) -> uuid.UUID:
    """A finished job of this type, finished `days_ago` days ago (written as the owner: only its status,
    type and finished_at matter to a prune)."""
    return one(conn, """
        insert into jobs (type, payload, status, attempts, max_attempts, last_error, run_at, started_at,
                          finished_at, idempotency_key)
        values (%(type)s, '{}', %(status)s::text, 1, 1, case when %(status)s::text <> 'succeeded' then 'boom' end, now(), now(),
                now() - make_interval(secs => %(secs)s), %(key)s)
        returning id""", {"type": type, "status": status, "secs": days_ago * 86400, "key": f"r-{uuid.uuid4()}"})["id"]


def _left(conn: psycopg.Connection) -> set[uuid.UUID]:
    return {r["id"] for r in rows(conn, "select id from jobs")}


def _prune_all(conn: psycopg.Connection, batch: int = 1000) -> int:
    total = 0
    while (n := one(conn, "select prune_expired_jobs(%s) as n", [batch])["n"]) > 0:
        total += n
    return total


def _defaults(conn: psycopg.Connection) -> None:
    conn.execute("update queue_settings set prune_succeeded_after = interval '7 days', "
                 "prune_finished_after = interval '30 days'")


def test_retention_per_type_a_shorter_age_prunes_a_types_jobs_sooner(conn: psycopg.Connection) -> None:
    _defaults(conn)
    conn.execute("update task_types set retain_succeeded = interval '1 day', retain_failed = interval '2 days' "
                 "where name = 'report'")
    big = _finished(conn, "report", "succeeded", 3)
    dead = _finished(conn, "report", "dead", 3)
    small = _finished(conn, "t", "succeeded", 3)        # the queue's 7 days keep it
    other_dead = _finished(conn, "t", "dead", 3)
    assert _prune_all(conn) == 2
    assert _left(conn) == {small, other_dead}
    assert big not in _left(conn) and dead not in _left(conn)


def test_retention_per_type_a_longer_age_keeps_a_types_jobs(conn: psycopg.Connection) -> None:
    _defaults(conn)
    conn.execute("update task_types set retain_succeeded = interval '90 days', retain_failed = interval '90 days' "
                 "where name = 'report'")
    kept = {_finished(conn, "report", s, 60) for s in ("succeeded", "dead", "cancelled", "expired")}
    gone = {_finished(conn, "t", s, 60) for s in ("succeeded", "dead", "cancelled", "expired")}
    assert _prune_all(conn, batch=3) == len(gone)      # batches of 3: bounded, and every one comes
    assert _left(conn) == kept


def test_retention_per_type_a_dbas_age_wins_over_the_codes(conn: psycopg.Connection) -> None:
    _defaults(conn)
    conn.execute("select register_task_types(%s::jsonb)", [Jsonb([{
        "name": "report", "payload_schema": {}, "retain_succeeded_ms": 3_600_000,
        "retain_failed_ms": int(timedelta(days=365).total_seconds() * 1000)}])])
    settings = one(conn, "select retain_succeeded, retain_failed from task_type_settings where name = 'report'")
    assert settings == {"retain_succeeded": timedelta(hours=1), "retain_failed": timedelta(days=365)}
    _finished(conn, "report", "succeeded", 0.5)              # older than the code's hour: pruned
    dead = _finished(conn, "report", "dead", 60)             # the code keeps it a year
    assert _prune_all(conn) == 1 and _left(conn) == {dead}
    conn.execute("update task_types set retain_failed = interval '1 day' where name = 'report'")
    young = _finished(conn, "report", "succeeded", 0.01)
    assert _prune_all(conn) == 1 and _left(conn) == {young}
    # A registration again leaves the DBA's value alone.
    conn.execute("select register_task_types(%s::jsonb)", [Jsonb([{
        "name": "report", "payload_schema": {}, "retain_failed_ms": 1}])])
    assert one(conn, "select retain_failed from task_type_settings where name = 'report'") == {
        "retain_failed": timedelta(days=1)}


def test_retention_per_type_a_bad_code_age_raises_qv400_and_changes_nothing(conn: psycopg.Connection) -> None:
    before = rows(conn, "select * from task_types order by name")
    for bad in (-1, 10**18):
        try:
            conn.execute("select register_task_types(%s::jsonb)", [Jsonb([{
                "name": "report", "payload_schema": {}, "retain_succeeded_ms": bad}])])
        except psycopg.Error as exc:
            assert exc.sqlstate == "QV400"
        else:
            raise AssertionError(f"retain_succeeded_ms {bad} was accepted")
    assert rows(conn, "select * from task_types order by name") == before
