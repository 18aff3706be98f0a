"""Expiry: a job not started by its expires_at is never claimed and the sweep ends it expired, a final status
(not cancellable, not retryable, pruned by prune_finished_after); once started, expiry no longer applies; bad
arguments change nothing; a task type's expire_after_ms is the default; the claim keeps its index."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from pgqw import db
from tests.helpers import enqueue, extension_missing, job_row, one, rows, snapshot


def _claim_at(conn: psycopg.Connection, ahead: str, worker: str = "w1") -> list[dict[str, Any]]:
    return rows(conn, f"select (c.job).*, c.lease_token from claim_jobs_at(now() + {ahead}, %s, 10) c", [worker])


def _sweep_at(conn: psycopg.Connection, ahead: str) -> None:
    conn.execute(f"select * from sweep_stuck_at(now() + {ahead})")


def test_expiry_a_job_past_its_expiry_is_never_claimed(conn: psycopg.Connection) -> None:
    job = enqueue(conn, type="t", payload={}, expire_after_ms=60_000)
    assert job.expires_at is not None and job.expires_at == job.run_at + timedelta(minutes=1)
    assert _claim_at(conn, "interval '2 minutes'") == []          # after its expiry: skipped
    assert job_row(conn, job.id)["status"] == "pending"            # not yet swept
    [claimed] = _claim_at(conn, "interval '30 seconds'")           # before it: claimed as usual
    assert claimed["id"] == job.id


def test_expiry_the_sweep_ends_a_waiting_job_expired(conn: psycopg.Connection) -> None:
    expires = datetime.now(timezone.utc) + timedelta(minutes=5)
    job = enqueue(conn, type="t", payload={}, expires_at=expires)
    kept = enqueue(conn, type="t", payload={}, expires_at=expires + timedelta(hours=1))
    _sweep_at(conn, "interval '4 minutes'")
    assert job_row(conn, job.id)["status"] == "pending"
    _sweep_at(conn, "interval '10 minutes'")
    row = job_row(conn, job.id)
    assert row["status"] == "expired" and row["finished_at"] is not None
    assert row["last_error"].startswith("expired at ")
    assert job_row(conn, kept.id)["status"] == "pending"
    assert [c["id"] for c in _claim_at(conn, "interval '10 minutes'")] == [kept.id]


def test_expiry_no_longer_applies_once_started(conn: psycopg.Connection) -> None:
    job = enqueue(conn, type="t", payload={}, expire_after_ms=60_000, max_attempts=3)
    [claimed] = _claim_at(conn, "interval '1 second'")
    failed = db.mark_failed(conn, job_id=job.id, lease_token=claimed["lease_token"], error="boom", retryable=True,
                            base_ms=0, max_jitter_ms=0)
    assert failed.status == "failed"
    _sweep_at(conn, "interval '1 hour'")
    assert job_row(conn, job.id)["status"] == "failed"             # started: the sweep leaves it
    [again] = _claim_at(conn, "interval '1 hour'")                 # and a claim past the expiry takes it
    assert (again["id"], again["attempts"]) == (job.id, 2)


def _expired(conn: psycopg.Connection) -> Any:
    job = enqueue(conn, type="t", payload={}, expire_after_ms=1000)
    _sweep_at(conn, "interval '1 minute'")
    assert job_row(conn, job.id)["status"] == "expired"
    return job.id


def test_expiry_an_expired_job_is_final_not_cancellable_nor_retryable(conn: psycopg.Connection) -> None:
    job_id = _expired(conn)
    before = snapshot(conn)
    for call in ("select * from cancel_job(%s)", "select * from retry_dead(%s)"):
        with pytest.raises(psycopg.Error) as exc, conn.transaction():
            conn.execute(call, [job_id])
        assert exc.value.sqlstate == "QS409"
    assert snapshot(conn) == before
    assert "expired" in db.STATUSES
    counts = {r["status"]: r["jobs"] for r in rows(conn, "select * from count_jobs_by_status()")}
    assert counts["expired"] == 1


def test_expiry_expired_jobs_are_pruned_by_prune_finished_after(conn: psycopg.Connection) -> None:
    job_id = _expired(conn)
    conn.execute("update queue_settings set prune_finished_after = interval '1 day', "
                 "prune_succeeded_after = interval '100 years'")
    assert one(conn, "select prune_expired_jobs() as n")["n"] == 0     # finished just now: kept
    conn.execute("update jobs set finished_at = now() - interval '2 days' where id = %s", [job_id])
    assert one(conn, "select prune_expired_jobs() as n")["n"] == 1
    assert rows(conn, "select id from jobs where id = %s", [job_id]) == []
    assert one(conn, "select prune_jobs(interval '0', array['expired']) as n")["n"] == 0


@pytest.mark.parametrize(("args", "column"), [
    ({"expires_at": "past"}, "expires_at"),
    ({"expires_at": "before_run_at"}, "expires_at"),
    ({"expires_at": "later", "expire_after_ms": 1000}, "expire_after_ms"),
    ({"expire_after_ms": 0}, "expire_after_ms"),
])
def test_expiry_bad_arguments_raise_qv400_and_change_nothing(conn: psycopg.Connection, args: dict[str, Any],
                                                             column: str) -> None:
    now = datetime.now(timezone.utc)
    times = {"past": now - timedelta(seconds=1), "before_run_at": now + timedelta(minutes=1),
             "later": now + timedelta(hours=1)}
    extra: dict[str, Any] = {k: times.get(v, v) if isinstance(v, str) else v for k, v in args.items()}
    if args.get("expires_at") == "before_run_at":
        extra["run_at"] = now + timedelta(hours=1)
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        enqueue(conn, type="t", payload={}, **extra)
    assert exc.value.sqlstate == "QV400" and exc.value.diag.column_name == column
    assert snapshot(conn) == before


def test_expiry_enqueue_jobs_takes_each_elements_expiry(conn: psycopg.Connection) -> None:
    at = datetime.now(timezone.utc) + timedelta(hours=2)
    made = db.enqueue_jobs(conn, jobs=[
        {"type": "t", "payload": {}, "idempotency_key": "e1", "expires_at": at},
        {"type": "t", "payload": {}, "idempotency_key": "e2", "expire_after_ms": 60_000, "delay": timedelta(hours=1)},
        {"type": "t", "payload": {}, "idempotency_key": "e3"},
    ])
    assert made[0].expires_at == at
    assert made[1].expires_at == made[1].run_at + timedelta(minutes=1)
    assert made[2].expires_at is None
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        db.enqueue_jobs(conn, jobs=[{"type": "t", "payload": {}, "idempotency_key": "e4",
                                     "expires_at": datetime.now(timezone.utc) - timedelta(minutes=1)}])
    assert exc.value.sqlstate == "QV400"
    assert snapshot(conn) == before


def test_expiry_a_task_types_expire_after_ms_is_the_default_a_dbas_over_the_codes(conn: psycopg.Connection) -> None:
    conn.execute("select register_task_types(%s::jsonb)",
                 [Jsonb([{"name": "t", "payload_schema": {}, "expire_after_ms": 60_000}])])
    assert one(conn, "select expire_after_ms from task_type_settings where name = 't'")["expire_after_ms"] == 60_000
    coded = enqueue(conn, type="t", payload={})
    assert coded.expires_at == coded.run_at + timedelta(minutes=1)
    conn.execute("update task_types set expire_after_ms = 5000 where name = 't'")
    dba = enqueue(conn, type="t", payload={})
    assert dba.expires_at == dba.run_at + timedelta(seconds=5)
    own = enqueue(conn, type="t", payload={}, expire_after_ms=3_600_000)      # the job's own wins
    assert own.expires_at == own.run_at + timedelta(hours=1)
    # A registration again leaves the DBA's value alone.
    conn.execute("select register_task_types(%s::jsonb)",
                 [Jsonb([{"name": "t", "payload_schema": {}, "expire_after_ms": 60_000}])])
    assert one(conn, "select expire_after_ms from task_type_settings where name = 't'")["expire_after_ms"] == 5000


def _plans(conn: psycopg.Connection, statement: str) -> list[dict[str, Any]]:
    """The plans of the statements a call runs inside its functions (auto_explain, sent to this session)."""
    seen: list[str] = []
    conn.add_notice_handler(lambda d: seen.append(d.message_primary or ""))
    try:
        conn.execute("load 'auto_explain'")
    except psycopg.errors.UndefinedFile:
        conn.rollback()
        extension_missing("auto_explain", "the plans of the statements inside a function are read through it")
    conn.execute("set auto_explain.log_min_duration = 0; set auto_explain.log_nested_statements = on; "
                 "set auto_explain.log_analyze = on; set auto_explain.log_format = json; "
                 "set client_min_messages = log")
    conn.execute(statement)
    conn.execute("reset client_min_messages; set auto_explain.log_min_duration = -1")
    return [json.loads(m[m.index("{"):])["Plan"] for m in seen if "{" in m and '"Plan"' in m]


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(n for child in plan.get("Plans", ()) for n in _nodes(child))]


def test_expiry_the_claim_reads_the_ready_index_past_expired_jobs(conn: psycopg.Connection) -> None:
    # 100k ready jobs, the first thousand in the index's order past their expiry (not swept yet).
    conn.execute(
        """
        insert into jobs (type, payload, status, attempts, max_attempts, run_at, created_at, idempotency_key,
                          expires_at)
        select 't', '{}'::jsonb, 'pending', 0, 5, now() - n * interval '1 second', now() - interval '1 day',
               'x-' || n, case when n > 99000 then now() - interval '1 second' end
          from generate_series(1, 100000) as n
        """)
    conn.execute("analyze jobs")
    plans = _plans(conn, "select * from claim_jobs_at(now(), 'w1', 1)")
    scans = [(n["Node Type"], n.get("Index Name")) for p in plans for n in _nodes(p)
             if n.get("Relation Name") == "jobs" and "Filter" in n and "expires_at" in n["Filter"]]
    assert scans and all(s == ("Index Scan", "jobs_ready_idx") for s in scans), scans
    claimed = rows(conn, "select * from jobs where status = 'processing'")
    assert len(claimed) == 1 and claimed[0]["expires_at"] is None
