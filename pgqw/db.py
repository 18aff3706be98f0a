"""Thin wrappers over the stored functions: one Python function per SQL function, same name.

The app, the worker and the CLI call these and nothing else; no other module holds SQL.
Each takes an open psycopg connection first, so a caller can group calls in one transaction,
and keyword arguments after it. Results are typed with dataclasses through class_row.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Sequence

import psycopg
from psycopg.rows import class_row, dict_row
from psycopg.types.json import Jsonb

NOTIFY_CHANNEL = "pgqw_jobs"


@dataclass
class Job:
    id: uuid.UUID
    type: str
    payload: dict[str, Any]
    status: str
    attempts: int
    max_attempts: int
    last_error: str | None
    run_at: datetime
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    locked_by: str | None
    lease_expires_at: datetime | None
    idempotency_key: str
    queue: str
    priority: int


@dataclass
class EnqueuedJob(Job):
    created: bool


@dataclass
class Attempt:
    job_id: uuid.UUID
    attempt: int
    worker_id: str
    started_at: datetime
    finished_at: datetime | None
    outcome: str | None
    error: str | None
    abandon_reason: str | None


@dataclass
class Swept:
    job_id: uuid.UUID
    attempt: int
    worker_id: str
    status: str
    lease_expired_at: datetime


@dataclass
class Lease:
    job_id: uuid.UUID
    lease_expires_at: datetime


def enqueue_job(
    conn: psycopg.Connection,
    *,
    type: str,
    payload: dict[str, Any],
    idempotency_key: str,
    queue: str = "default",
    priority: int = 0,
    run_at: datetime | None = None,
    max_attempts: int | None = None,
) -> EnqueuedJob:
    with conn.cursor(row_factory=class_row(EnqueuedJob)) as cur:
        cur.execute(
            "select * from enqueue_job(%(type)s::text, %(payload)s::jsonb, %(key)s::text,"
            " %(queue)s::text, %(priority)s::integer, %(run_at)s::timestamptz, %(max_attempts)s::integer)",
            {
                "type": type, "payload": Jsonb(payload), "key": idempotency_key, "queue": queue,
                "priority": priority, "run_at": run_at, "max_attempts": max_attempts,
            },
        )
        row = cur.fetchone()
    assert row is not None
    return row


def claim_job(
    conn: psycopg.Connection,
    *,
    worker_id: str,
    queues: Sequence[str] | None = None,
    lease_ms: int | None = None,
) -> Job | None:
    with conn.cursor(row_factory=class_row(Job)) as cur:
        cur.execute(
            "select * from claim_job(%(worker_id)s::text, %(queues)s::text[], %(lease_ms)s::integer)",
            {"worker_id": worker_id, "queues": list(queues) if queues else None, "lease_ms": lease_ms},
        )
        return cur.fetchone()


def claim_jobs(
    conn: psycopg.Connection,
    *,
    worker_id: str,
    limit: int,
    queues: Sequence[str] | None = None,
    lease_ms: int | None = None,
) -> list[Job]:
    with conn.cursor(row_factory=class_row(Job)) as cur:
        cur.execute(
            "select * from claim_jobs(%(worker_id)s::text, %(limit)s::integer, %(queues)s::text[],"
            " %(lease_ms)s::integer)",
            {"worker_id": worker_id, "limit": limit,
             "queues": list(queues) if queues else None, "lease_ms": lease_ms},
        )
        return cur.fetchall()


def mark_succeeded(conn: psycopg.Connection, *, job_id: uuid.UUID | str, worker_id: str, attempt: int) -> Job:
    with conn.cursor(row_factory=class_row(Job)) as cur:
        cur.execute(
            "select * from mark_succeeded(%(job_id)s::uuid, %(worker_id)s::text, %(attempt)s::integer)",
            {"job_id": job_id, "worker_id": worker_id, "attempt": attempt},
        )
        row = cur.fetchone()
    assert row is not None
    return row


def mark_failed(
    conn: psycopg.Connection,
    *,
    job_id: uuid.UUID | str,
    worker_id: str,
    attempt: int,
    error: str,
    retryable: bool = True,
    base_ms: int | None = None,
    max_jitter_ms: int | None = None,
    max_delay_ms: int | None = None,
) -> Job:
    with conn.cursor(row_factory=class_row(Job)) as cur:
        cur.execute(
            "select * from mark_failed(%(job_id)s::uuid, %(worker_id)s::text, %(attempt)s::integer,"
            " %(error)s::text, %(retryable)s::boolean, %(base_ms)s::integer,"
            " %(max_jitter_ms)s::integer, %(max_delay_ms)s::integer)",
            {"job_id": job_id, "worker_id": worker_id, "attempt": attempt, "error": error,
             "retryable": retryable, "base_ms": base_ms, "max_jitter_ms": max_jitter_ms,
             "max_delay_ms": max_delay_ms},
        )
        row = cur.fetchone()
    assert row is not None
    return row


def heartbeat(
    conn: psycopg.Connection, *, worker_id: str, job_ids: Iterable[uuid.UUID | str], lease_ms: int | None = None
) -> list[Lease]:
    with conn.cursor(row_factory=class_row(Lease)) as cur:
        cur.execute(
            "select * from heartbeat(%(worker_id)s::text, %(job_ids)s::uuid[], %(lease_ms)s::integer)",
            {"worker_id": worker_id, "job_ids": list(job_ids), "lease_ms": lease_ms},
        )
        return cur.fetchall()


def sweep_stuck(conn: psycopg.Connection) -> list[Swept]:
    with conn.cursor(row_factory=class_row(Swept)) as cur:
        cur.execute("select * from sweep_stuck()")
        return cur.fetchall()


def release_job(
    conn: psycopg.Connection, *, job_id: uuid.UUID | str, worker_id: str, attempt: int, reason: str
) -> Job:
    with conn.cursor(row_factory=class_row(Job)) as cur:
        cur.execute(
            "select * from release_job(%(job_id)s::uuid, %(worker_id)s::text, %(attempt)s::integer,"
            " %(reason)s::text)",
            {"job_id": job_id, "worker_id": worker_id, "attempt": attempt, "reason": reason},
        )
        row = cur.fetchone()
    assert row is not None
    return row


def retry_dead(conn: psycopg.Connection, *, job_id: uuid.UUID | str, extra_attempts: int | None = None) -> Job:
    with conn.cursor(row_factory=class_row(Job)) as cur:
        cur.execute(
            "select * from retry_dead(%(job_id)s::uuid, %(extra)s::integer)",
            {"job_id": job_id, "extra": extra_attempts},
        )
        row = cur.fetchone()
    assert row is not None
    return row


def save_flyer(conn: psycopg.Connection, *, job_id: uuid.UUID | str, pdf: bytes) -> bool:
    """Stores a job's flyer unless one exists. True when this call stored it."""
    row = conn.execute(
        "select save_flyer(%(job_id)s::uuid, %(pdf)s::bytea)", {"job_id": job_id, "pdf": pdf}
    ).fetchone()
    assert row is not None
    return bool(row[0])


# Reads. One query each.

def get_job(conn: psycopg.Connection, *, job_id: uuid.UUID | str) -> Job | None:
    with conn.cursor(row_factory=class_row(Job)) as cur:
        cur.execute("select * from jobs where id = %(job_id)s::uuid", {"job_id": job_id})
        return cur.fetchone()


def get_attempts(conn: psycopg.Connection, *, job_id: uuid.UUID | str) -> list[Attempt]:
    with conn.cursor(row_factory=class_row(Attempt)) as cur:
        cur.execute(
            "select * from job_attempts where job_id = %(job_id)s::uuid order by attempt", {"job_id": job_id}
        )
        return cur.fetchall()


def flyer_exists(conn: psycopg.Connection, *, job_id: uuid.UUID | str) -> bool:
    row = conn.execute(
        "select exists (select 1 from flyers where job_id = %(job_id)s::uuid)", {"job_id": job_id}
    ).fetchone()
    return bool(row and row[0])


def get_flyer(conn: psycopg.Connection, *, job_id: uuid.UUID | str) -> bytes | None:
    row = conn.execute(
        "select pdf from flyers where job_id = %(job_id)s::uuid", {"job_id": job_id}
    ).fetchone()
    return bytes(row[0]) if row else None


def count_flyers(conn: psycopg.Connection, *, job_id: uuid.UUID | str) -> int:
    row = conn.execute(
        "select count(*) from flyers where job_id = %(job_id)s::uuid", {"job_id": job_id}
    ).fetchone()
    return int(row[0]) if row else 0


@dataclass
class Page:
    jobs: list[Job]
    next_cursor: tuple[datetime, uuid.UUID] | None


def list_jobs(
    conn: psycopg.Connection,
    *,
    status: str | None = None,
    limit: int = 50,
    after: tuple[datetime, uuid.UUID] | None = None,
) -> Page:
    """Jobs newest first, optionally of one status; keyset pagination on (created_at, id).

    `after` is the (created_at, id) of the last job of the previous page. Any number of pages
    can be browsed; each page costs one index range scan.
    """
    from psycopg import sql

    where = [sql.SQL("true")]
    params: dict[str, Any] = {"limit": limit + 1}
    if status is not None:
        where.append(sql.SQL("status = %(status)s::text"))
        params["status"] = status
    if after is not None:
        where.append(sql.SQL("(created_at, id) < (%(after_at)s::timestamptz, %(after_id)s::uuid)"))
        params["after_at"], params["after_id"] = after
    query = sql.SQL("select * from jobs where {} order by created_at desc, id desc limit %(limit)s").format(
        sql.SQL(" and ").join(where)
    )
    with conn.cursor(row_factory=class_row(Job)) as cur:
        cur.execute(query, params)
        found = cur.fetchall()
    more = len(found) > limit
    found = found[:limit]
    return Page(jobs=found, next_cursor=(found[-1].created_at, found[-1].id) if more and found else None)


def count_by_status(conn: psycopg.Connection) -> dict[str, int]:
    """Jobs per status, every status present (zero when none)."""
    found = conn.execute(
        "select s.status, count(j.id) from unnest(array['pending', 'processing', 'succeeded', 'failed', 'dead'])"
        " with ordinality as s(status, n) left join jobs j on j.status = s.status group by s.status, s.n"
        " order by s.n"
    ).fetchall()
    return {status: int(n) for status, n in found}


def listen(conn: psycopg.Connection) -> None:
    """Subscribes an autocommit connection to the wake-ups enqueue_job, release_job,
    retry_dead and sweep_stuck send (payload: the queue name, or '*' for any queue)."""
    conn.execute(f"listen {NOTIFY_CHANNEL}")


def enqueue_jobs(conn: psycopg.Connection, *, jobs: Sequence[dict[str, Any]]) -> list[EnqueuedJob]:
    """Many jobs in one call. Each dict: type, payload, idempotency_key, and optionally queue,
    priority, run_at (ISO text), max_attempts. Rows come back in input order."""
    with conn.cursor(row_factory=class_row(EnqueuedJob)) as cur:
        cur.execute("select * from enqueue_jobs(%(jobs)s::jsonb)", {"jobs": Jsonb(list(jobs))})
        return cur.fetchall()


def mark_jobs_succeeded(
    conn: psycopg.Connection, *, worker_id: str, done: Sequence[tuple[uuid.UUID | str, int]]
) -> list[Job]:
    """mark_succeeded for many (job id, attempt) pairs of one worker; returns the jobs it changed."""
    with conn.cursor(row_factory=class_row(Job)) as cur:
        cur.execute(
            "select * from mark_jobs_succeeded(%(worker_id)s::text, %(ids)s::uuid[], %(attempts)s::integer[])",
            {"worker_id": worker_id, "ids": [j for j, _ in done], "attempts": [a for _, a in done]},
        )
        return cur.fetchall()


@dataclass
class Stat:
    metric: str
    queue: str | None
    label: str | None
    value: float


@dataclass
class TimelineRow:
    attempt: int
    worker_id: str
    started_at: datetime
    finished_at: datetime | None
    wait_before_s: Any
    duration_s: Any
    outcome: str
    error: str | None


@dataclass
class ConcurrencyRow:
    worker_id: str
    peak_at_once: int
    attempts_run: int


@dataclass
class DoubleRuns:
    jobs_seen: int
    attempts_seen: int
    overlapping_jobs: int
    succeeded_twice: int
    succeeded_jobs: int
    flyers: int


@dataclass
class LatestJob:
    id: uuid.UUID
    type: str
    queue: str
    status: str
    attempts: int
    max_attempts: int
    locked_by: str | None
    created_at: datetime
    run_at: datetime
    finished_at: datetime | None
    last_error: str | None


def queue_stats(conn: psycopg.Connection) -> list[Stat]:
    with conn.cursor(row_factory=class_row(Stat)) as cur:
        cur.execute("select * from queue_stats()")
        return cur.fetchall()


def report_timeline(conn: psycopg.Connection, *, job_id: uuid.UUID | str) -> list[TimelineRow]:
    with conn.cursor(row_factory=class_row(TimelineRow)) as cur:
        cur.execute("select * from report_timeline(%(job_id)s::uuid)", {"job_id": job_id})
        return cur.fetchall()


def report_concurrency(conn: psycopg.Connection, *, prefix: str = "") -> list[ConcurrencyRow]:
    with conn.cursor(row_factory=class_row(ConcurrencyRow)) as cur:
        cur.execute("select * from report_concurrency(%(prefix)s::text)", {"prefix": prefix})
        return cur.fetchall()


def report_double_runs(conn: psycopg.Connection, *, prefix: str = "") -> DoubleRuns:
    with conn.cursor(row_factory=class_row(DoubleRuns)) as cur:
        cur.execute("select * from report_double_runs(%(prefix)s::text)", {"prefix": prefix})
        row = cur.fetchone()
    assert row is not None
    return row


def report_latest_jobs(conn: psycopg.Connection, *, limit: int = 20) -> list[LatestJob]:
    with conn.cursor(row_factory=class_row(LatestJob)) as cur:
        cur.execute("select * from report_latest_jobs(%(limit)s::integer)", {"limit": limit})
        return cur.fetchall()


def claim_job_at(
    conn: psycopg.Connection, *, worker_id: str, now: datetime, queues: Sequence[str] | None = None
) -> Job | None:
    """claim_job as if it were `now` (p_now): for operators' tools and tests, not for workers."""
    with conn.cursor(row_factory=class_row(Job)) as cur:
        cur.execute(
            "select * from claim_job(%(worker_id)s::text, %(queues)s::text[], null, %(now)s::timestamptz)",
            {"worker_id": worker_id, "queues": list(queues) if queues else None, "now": now},
        )
        return cur.fetchone()


@dataclass
class JobsSummary:
    jobs: int
    pending: int
    processing: int
    succeeded: int
    failed: int
    dead: int
    attempts: int
    failed_attempts: int
    abandoned_attempts: int
    flyers: int


def summarize_jobs(conn: psycopg.Connection, *, job_ids: Sequence[uuid.UUID | str]) -> JobsSummary:
    """Counts for a set of jobs: by status, their attempts by outcome, and their flyers."""
    with conn.cursor(row_factory=class_row(JobsSummary)) as cur:
        cur.execute(
            "with j as (select * from jobs where id = any(%(ids)s::uuid[])),"
            " a as (select a.* from job_attempts a join j on j.id = a.job_id)"
            " select (select count(*) from j)::int as jobs,"
            " (select count(*) from j where status = 'pending')::int as pending,"
            " (select count(*) from j where status = 'processing')::int as processing,"
            " (select count(*) from j where status = 'succeeded')::int as succeeded,"
            " (select count(*) from j where status = 'failed')::int as failed,"
            " (select count(*) from j where status = 'dead')::int as dead,"
            " (select count(*) from a)::int as attempts,"
            " (select count(*) from a where outcome = 'failed')::int as failed_attempts,"
            " (select count(*) from a where outcome = 'abandoned')::int as abandoned_attempts,"
            " (select count(*) from flyers f join j on j.id = f.job_id)::int as flyers",
            {"ids": list(job_ids)},
        )
        row = cur.fetchone()
    assert row is not None
    return row


def jobs_by_id(conn: psycopg.Connection, *, job_ids: Sequence[uuid.UUID | str]) -> list[Job]:
    with conn.cursor(row_factory=class_row(Job)) as cur:
        cur.execute("select * from jobs where id = any(%(ids)s::uuid[]) order by created_at, id",
                    {"ids": list(job_ids)})
        return cur.fetchall()


def attempts_for_jobs(conn: psycopg.Connection, *, job_ids: Sequence[uuid.UUID | str]) -> list[Attempt]:
    with conn.cursor(row_factory=class_row(Attempt)) as cur:
        cur.execute("select * from job_attempts where job_id = any(%(ids)s::uuid[]) order by job_id, attempt",
                    {"ids": list(job_ids)})
        return cur.fetchall()


def jobs_per_key(conn: psycopg.Connection, *, keys: Sequence[str]) -> dict[str, int]:
    """How many jobs each idempotency key has (the unique constraint keeps it at 0 or 1)."""
    found = conn.execute(
        "select k, count(j.id) from unnest(%(keys)s::text[]) as k left join jobs j on j.idempotency_key = k"
        " group by k", {"keys": list(keys)},
    ).fetchall()
    return {k: int(n) for k, n in found}


@dataclass
class QueueSettings:
    id: bool
    max_attempts: int
    backoff_base_ms: int
    backoff_max_jitter_ms: int
    backoff_max_delay_ms: int
    lease_ms: int
    retry_extra_attempts: int
    max_payload_bytes: int


def get_queue_settings(conn: psycopg.Connection) -> QueueSettings:
    """The queue_settings row: what every function uses when its argument is left out."""
    with conn.cursor(row_factory=class_row(QueueSettings)) as cur:
        cur.execute("select * from queue_settings")
        row = cur.fetchone()
    assert row is not None
    return row


def login_roles(conn: psycopg.Connection, names: list[str]) -> set[str]:
    """Which of the named roles exist and may log in (db/security/roles.sql makes them)."""
    return {r[0] for r in conn.execute(
        "select rolname::text from pg_roles where rolname = any(%(names)s::text[]) and rolcanlogin",
        {"names": names})}


# The chaos soak's final checks (pgqw/soak.py): one read-only query over the whole queue.
# Each *_ids column lists up to 5 offending jobs, so a failure names them.
CHECKS_SQL = """
with per_job as (
    select j.id, j.status, j.attempts,
           count(a.attempt)::int as attempt_rows,
           coalesce(max(a.attempt), 0)::int as last_attempt,
           (count(*) filter (where a.outcome = 'succeeded'))::int as successes,
           exists (select 1 from flyers f where f.job_id = j.id) as has_flyer
      from jobs j
      left join job_attempts a on a.job_id = j.id
     group by j.id
), overlapping as (
    -- an earlier attempt that had not finished when a later one of the same job started
    select distinct a1.job_id
      from job_attempts a1
      join job_attempts a2 on a2.job_id = a1.job_id and a2.attempt > a1.attempt
     where a1.finished_at is null or a1.finished_at > a2.started_at
)
select
    (select count(*) from per_job)::int as jobs,
    (select count(*) from per_job where status = 'succeeded')::int as succeeded,
    (select count(*) from per_job where status = 'dead')::int as dead,
    (select count(*) from per_job where status = 'processing')::int as processing,
    (select count(*) from per_job where status in ('pending', 'failed'))::int as waiting,
    (select count(*) from flyers)::int as flyers,
    (select count(*) from per_job where has_flyer and status <> 'succeeded')::int as flyers_not_succeeded,
    (select count(*) from per_job where not has_flyer and status = 'succeeded')::int as succeeded_no_flyer,
    (select count(*) from per_job where successes > 1)::int as succeeded_twice,
    (select coalesce(sum(successes), 0) from per_job)::int as succeeded_attempts,
    (select count(*) from overlapping)::int as overlapping,
    (select count(*) from job_attempts where finished_at is null)::int as unfinished_attempts,
    (select count(*) from job_attempts)::int as attempt_rows,
    (select coalesce(sum(attempts), 0) from per_job)::int as attempts_counted,
    (select count(*) from per_job where attempts <> attempt_rows or last_attempt <> attempt_rows)::int
        as attempts_mismatch,
    array(select id from per_job where status not in ('succeeded', 'dead') order by id limit 5) as not_final_ids,
    array(select id from per_job where has_flyer and status <> 'succeeded' order by id limit 5)
        as flyers_not_succeeded_ids,
    array(select id from per_job where not has_flyer and status = 'succeeded' order by id limit 5)
        as succeeded_no_flyer_ids,
    array(select id from per_job where successes > 1 order by id limit 5) as succeeded_twice_ids,
    array(select job_id from overlapping order by job_id limit 5) as overlapping_ids,
    array(select distinct job_id from job_attempts where finished_at is null order by job_id limit 5)
        as unfinished_ids,
    array(select id from per_job where attempts <> attempt_rows or last_attempt <> attempt_rows
          order by id limit 5) as attempts_mismatch_ids
"""

# What happened, for the report (no expectations): read-only as well.
OUTCOMES_SQL = """
select
    (select count(*) from jobs where status = 'succeeded')::int as jobs_succeeded,
    (select count(*) from jobs where status = 'dead')::int as jobs_dead,
    (select count(*) from job_attempts where outcome = 'succeeded')::int as succeeded,
    (select count(*) from job_attempts where outcome = 'failed')::int as failed,
    (select count(*) from job_attempts where outcome = 'abandoned' and abandon_reason = 'lease_expired')::int
        as lease_expired,
    (select count(*) from job_attempts where outcome = 'abandoned' and abandon_reason = 'handed_back')::int
        as handed_back,
    (select count(*) from jobs where attempts > 1)::int as retried_jobs,
    (select count(*) from jobs where status = 'dead' and last_error like 'invalid listing payload%%')::int
        as dead_invalid,
    (select coalesce(max(attempts), 0) from jobs)::int as most_attempts
"""


def soak_checks(conn: psycopg.Connection) -> dict[str, Any]:
    """The figures `pgqw soak` checks (CHECKS_SQL), as one row of named values."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(CHECKS_SQL)
        row = cur.fetchone()
    assert row is not None
    return row


def soak_outcomes(conn: psycopg.Connection) -> dict[str, Any]:
    """What happened in a soak (OUTCOMES_SQL): counts by outcome, no expectations."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(OUTCOMES_SQL)
        row = cur.fetchone()
    assert row is not None
    return row
