"""Thin wrappers over the stored functions: one Python function per SQL function, same name.

The app, the worker, the CLI and the client call these and nothing else: apart from the migration
runner's ledger (pgqw/migrate.py), no other module of the installed package holds SQL. The lab's own
read-only checks live with the lab (tests/lab/queries.py).
Each takes an open psycopg connection first, so a caller can group calls in one transaction,
and keyword arguments after it. Results are typed with dataclasses through class_row. Every statement
names the queue's objects with its schema (`pgqw.`, put through pgqw.schema.qualify for PGQW_SCHEMA), so
it runs on any connection, whatever that connection's search_path.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Sequence

import psycopg
from psycopg.rows import class_row, dict_row
from psycopg.types.json import Jsonb

from pgqw.schema import qualify as _q

NOTIFY_CHANNEL = "pgqw_jobs"
# A job comes due later: payload '<ms> <queue>' ('<ms>+ <queue>': and more of that queue after it), <ms> on the
# server's clock when it was sent (enqueue_job, enqueue_jobs, mark_failed). Parsed by worker/listener.py.
NOTIFY_AT_CHANNEL = "pgqw_jobs_at"
# Every status a job can have, in the order of its life (the list of the jobs_status_check constraint).
STATUSES = ("pending", "processing", "succeeded", "failed", "dead", "cancelled")


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
class RecordedJob(Job):
    """What mark_succeeded, mark_failed, mark_jobs_succeeded and release_job answer: the job, and
    already_recorded: true when an earlier call for this worker's attempt had already recorded the
    same result (a retry after a lost reply), so this call changed nothing."""
    already_recorded: bool


@dataclass
class ClaimedJob(Job):
    """A job as its claim returns it: with the lease token that alone speaks for this attempt."""
    lease_token: uuid.UUID


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
    lease_token_hash: bytes | None = None  # SHA-256 of the attempt's lease token


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
    cancel_requested: bool = False  # cancel_job asked this job to stop


@dataclass
class CancelledJob(Job):
    """What cancel_job answers: the job (cancelled, or still processing until its worker stops) and
    when the cancel was first requested."""
    cancel_requested_at: datetime


ENQUEUE_JOB_SQL = (
    "select * from pgqw.enqueue_job(%(type)s::text, %(payload)s::jsonb, %(key)s::text, %(queue)s::text,"
    " %(priority)s::integer, coalesce(%(run_at)s::timestamptz, now() + %(delay)s::interval),"
    " %(max_attempts)s::integer, %(unique_for)s::interval)"
)


def enqueue_params(type: str, payload: dict[str, Any], idempotency_key: str, queue: str | None,
                    priority: int | None, run_at: datetime | None, delay: timedelta | None,
                    max_attempts: int | None, unique_for: timedelta | None = None) -> dict[str, Any]:
    return {"type": type, "payload": Jsonb(payload), "key": idempotency_key, "queue": queue, "priority": priority,
            "run_at": run_at, "delay": delay, "max_attempts": max_attempts, "unique_for": unique_for}


def enqueue_job(
    conn: psycopg.Connection,
    *,
    type: str,
    payload: dict[str, Any],
    idempotency_key: str,
    queue: str | None = None,
    priority: int | None = None,
    run_at: datetime | None = None,
    delay: timedelta | None = None,
    max_attempts: int | None = None,
    unique_for: timedelta | None = None,
) -> EnqueuedJob:
    """One job. Unset queue, priority and max_attempts take the task type's values, then the
    defaults ('default', 0, queue_settings). delay counts from the database's clock. unique_for: the
    key is unique only within that window of run_at (stored as `<key>@<window start>`)."""
    with conn.cursor(row_factory=class_row(EnqueuedJob)) as cur:
        cur.execute(_q(ENQUEUE_JOB_SQL), enqueue_params(type, payload, idempotency_key, queue, priority, run_at,
                                                      delay, max_attempts, unique_for))
        row = cur.fetchone()
    assert row is not None
    return row




def claim_job(
    conn: psycopg.Connection,
    *,
    worker_id: str,
    queues: Sequence[str] | None = None,
    lease_ms: int | None = None,
    task_types: Sequence[str] | None = None,
) -> ClaimedJob | None:
    """The next ready job of these queues and task types (None: any) with its lease token, or None."""
    with conn.cursor(row_factory=class_row(ClaimedJob)) as cur:
        cur.execute(
            _q("select * from pgqw.claim_job(%(worker_id)s::text, %(queues)s::text[], %(lease_ms)s::integer,"
            " %(types)s::text[])"),
            {"worker_id": worker_id, "queues": list(queues) if queues else None, "lease_ms": lease_ms,
             "types": list(task_types) if task_types is not None else None},
        )
        return cur.fetchone()


@dataclass(frozen=True)
class NextRunAt:
    run_at: datetime
    due_in_ms: int


def next_run_at(
    conn: psycopg.Connection,
    *,
    queues: Sequence[str] | None = None,
    task_types: Sequence[str] | None = None,
    limit: int = 1,
) -> list[NextRunAt]:
    """The earliest limit distinct run_at times still ahead of waiting jobs of these queues and task types
    (None: any) in unpaused queues, each with how many ms ahead it is on the server's clock."""
    with conn.cursor(row_factory=class_row(NextRunAt)) as cur:
        cur.execute(
            _q("select * from pgqw.next_run_at(%(queues)s::text[], %(types)s::text[], %(limit)s::integer)"),
            {"queues": list(queues) if queues else None,
             "types": list(task_types) if task_types is not None else None, "limit": limit},
        )
        return cur.fetchall()


def claim_jobs(
    conn: psycopg.Connection,
    *,
    worker_id: str,
    limit: int,
    queues: Sequence[str] | None = None,
    lease_ms: int | None = None,
    task_types: Sequence[str] | None = None,
) -> list[ClaimedJob]:
    """Up to limit ready jobs of these queues and task types (None: any), each with its lease token."""
    with conn.cursor(row_factory=class_row(ClaimedJob)) as cur:
        cur.execute(
            _q("select * from pgqw.claim_jobs(%(worker_id)s::text, %(limit)s::integer, %(queues)s::text[],"
            " %(lease_ms)s::integer, %(types)s::text[])"),
            {"worker_id": worker_id, "limit": limit, "queues": list(queues) if queues else None,
             "lease_ms": lease_ms, "types": list(task_types) if task_types is not None else None},
        )
        return cur.fetchall()


def mark_succeeded(
    conn: psycopg.Connection, *, job_id: uuid.UUID | str, lease_token: uuid.UUID | str,
    result: tuple[str, Any, bytes | None] | None = None,
) -> RecordedJob:
    """Success of the attempt this lease token holds, with its result (content type, JSON value,
    bytes) if any."""
    content_type, value, data = result if result is not None else (None, None, None)
    with conn.cursor(row_factory=class_row(RecordedJob)) as cur:
        cur.execute(
            _q("select * from pgqw.mark_succeeded(%(job_id)s::uuid, %(token)s::uuid, %(type)s::text, %(value)s::jsonb,"
            " %(data)s::bytea)"),
            {"job_id": job_id, "token": lease_token, "type": content_type,
             "value": Jsonb(value) if data is None and content_type is not None else None, "data": data},
        )
        row = cur.fetchone()
    assert row is not None
    return row


def mark_failed(
    conn: psycopg.Connection,
    *,
    job_id: uuid.UUID | str,
    lease_token: uuid.UUID | str,
    error: str,
    retryable: bool = True,
    base_ms: int | None = None,
    max_jitter_ms: int | None = None,
    max_delay_ms: int | None = None,
) -> RecordedJob:
    with conn.cursor(row_factory=class_row(RecordedJob)) as cur:
        cur.execute(
            _q("select * from pgqw.mark_failed(%(job_id)s::uuid, %(token)s::uuid,"
            " %(error)s::text, %(retryable)s::boolean, %(base_ms)s::integer,"
            " %(max_jitter_ms)s::integer, %(max_delay_ms)s::integer)"),
            {"job_id": job_id, "token": lease_token, "error": error,
             "retryable": retryable, "base_ms": base_ms, "max_jitter_ms": max_jitter_ms,
             "max_delay_ms": max_delay_ms},
        )
        row = cur.fetchone()
    assert row is not None
    return row


def heartbeat(
    conn: psycopg.Connection, *, leases: Sequence[tuple[uuid.UUID | str, uuid.UUID | str]], lease_ms: int | None = None
) -> list[Lease]:
    """Extends the lease of each (job id, lease token) that still holds its job; a job missing from
    the answer is no longer held by that token."""
    with conn.cursor(row_factory=class_row(Lease)) as cur:
        cur.execute(
            _q("select * from pgqw.heartbeat(%(job_ids)s::uuid[], %(tokens)s::uuid[], %(lease_ms)s::integer)"),
            {"job_ids": [j for j, _ in leases], "tokens": [t for _, t in leases], "lease_ms": lease_ms},
        )
        return cur.fetchall()


def sweep_stuck(conn: psycopg.Connection) -> list[Swept]:
    """Recovers the jobs whose lease expired, by the server's clock."""
    with conn.cursor(row_factory=class_row(Swept)) as cur:
        cur.execute(_q("select * from pgqw.sweep_stuck()"))
        return cur.fetchall()


def sweep_stuck_at(conn: psycopg.Connection, *, now: datetime) -> list[Swept]:
    """sweep_stuck as if it were `now`: the owner's test clock and repairs (no role may call it)."""
    with conn.cursor(row_factory=class_row(Swept)) as cur:
        cur.execute(_q("select * from pgqw.sweep_stuck_at(%(now)s::timestamptz)"), {"now": now})
        return cur.fetchall()


def prune_jobs(
    conn: psycopg.Connection, *, older_than: timedelta, statuses: Sequence[str] | None = None,
    batch: int | None = None,
) -> int:
    """Deletes one batch of finished jobs older than `older_than` (with their attempts and results);
    returns how many. Loop, committing between calls, until it returns 0. None: the SQL default."""
    args = ["p_older_than => %(older_than)s::interval"]
    if statuses is not None:
        args.append("p_statuses => %(statuses)s::text[]")
    if batch is not None:
        args.append("p_batch => %(batch)s::integer")
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            _q("select pgqw.prune_jobs(" + ", ".join(args) + ") as deleted"),  # fixed text; values are parameters
            {"older_than": older_than, "statuses": None if statuses is None else list(statuses), "batch": batch},
        )
        row = cur.fetchone()
    assert row is not None
    return row["deleted"]


def release_job(
    conn: psycopg.Connection, *, job_id: uuid.UUID | str, lease_token: uuid.UUID | str, reason: str
) -> RecordedJob:
    with conn.cursor(row_factory=class_row(RecordedJob)) as cur:
        cur.execute(
            _q("select * from pgqw.release_job(%(job_id)s::uuid, %(token)s::uuid, %(reason)s::text)"),
            {"job_id": job_id, "token": lease_token, "reason": reason},
        )
        row = cur.fetchone()
    assert row is not None
    return row


RETRY_DEAD_SQL = "select * from pgqw.retry_dead(%(job_id)s::uuid, %(extra)s::integer)"


def retry_dead(conn: psycopg.Connection, *, job_id: uuid.UUID | str, extra_attempts: int | None = None) -> Job:
    with conn.cursor(row_factory=class_row(Job)) as cur:
        cur.execute(_q(RETRY_DEAD_SQL), {"job_id": job_id, "extra": extra_attempts})
        row = cur.fetchone()
    assert row is not None
    return row


CANCEL_JOB_SQL = "select * from pgqw.cancel_job(%(job_id)s::uuid)"


def cancel_job(conn: psycopg.Connection, *, job_id: uuid.UUID | str) -> CancelledJob:
    """A waiting job ends cancelled at once; a processing one is asked to stop."""
    with conn.cursor(row_factory=class_row(CancelledJob)) as cur:
        cur.execute(_q(CANCEL_JOB_SQL), {"job_id": job_id})
        row = cur.fetchone()
    assert row is not None
    return row


def mark_cancelled(conn: psycopg.Connection, *, job_id: uuid.UUID | str, lease_token: uuid.UUID | str) -> RecordedJob:
    """Ends the token's attempt cancelled: its job was asked to cancel."""
    with conn.cursor(row_factory=class_row(RecordedJob)) as cur:
        cur.execute(
            _q("select * from pgqw.mark_cancelled(%(job_id)s::uuid, %(token)s::uuid)"), {"job_id": job_id, "token": lease_token}
        )
        row = cur.fetchone()
    assert row is not None
    return row


# Reads. One query each.

GET_JOB_SQL = "select * from pgqw.jobs where id = %(job_id)s::uuid"
GET_ATTEMPTS_SQL = "select * from pgqw.job_attempts where job_id = %(job_id)s::uuid order by attempt"


def get_job(conn: psycopg.Connection, *, job_id: uuid.UUID | str) -> Job | None:
    with conn.cursor(row_factory=class_row(Job)) as cur:
        cur.execute(_q(GET_JOB_SQL), {"job_id": job_id})
        return cur.fetchone()


def get_attempts(conn: psycopg.Connection, *, job_id: uuid.UUID | str) -> list[Attempt]:
    with conn.cursor(row_factory=class_row(Attempt)) as cur:
        cur.execute(_q(GET_ATTEMPTS_SQL), {"job_id": job_id})
        return cur.fetchall()


def get_flyer(conn: psycopg.Connection, *, job_id: uuid.UUID | str) -> bytes | None:
    row = conn.execute(
        _q("select pdf from pgqw.flyers where job_id = %(job_id)s::uuid"), {"job_id": job_id}
    ).fetchone()
    return bytes(row[0]) if row else None


def count_flyers(conn: psycopg.Connection, *, job_id: uuid.UUID | str) -> int:
    row = conn.execute(
        _q("select count(*) from pgqw.flyers where job_id = %(job_id)s::uuid"), {"job_id": job_id}
    ).fetchone()
    return int(row[0]) if row else 0


@dataclass
class Page:
    jobs: list[Job]
    next_cursor: tuple[datetime, uuid.UUID] | None


# The job list's four shapes (status filter?, cursor?), one statement text each so that each reads its
# index range: without a status jobs_created_idx (created_at desc, id desc), with one
# jobs_status_created_idx (status, created_at desc, id desc); the cursor is a row comparison the index
# starts from, the order is the index's, and the scan stops after the limit. No sort, no sequential scan.
_LIST_JOBS_SQL: dict[tuple[bool, bool], str] = {
    (False, False): "select * from pgqw.jobs"
                    " order by created_at desc, id desc limit %(limit)s::integer",
    (True, False): "select * from pgqw.jobs where status = %(status)s::text"
                   " order by created_at desc, id desc limit %(limit)s::integer",
    (False, True): "select * from pgqw.jobs where (created_at, id) < (%(after_at)s::timestamptz, %(after_id)s::uuid)"
                   " order by created_at desc, id desc limit %(limit)s::integer",
    (True, True): "select * from pgqw.jobs where status = %(status)s::text"
                  " and (created_at, id) < (%(after_at)s::timestamptz, %(after_id)s::uuid)"
                  " order by created_at desc, id desc limit %(limit)s::integer",
}


def list_jobs(
    conn: psycopg.Connection,
    *,
    status: str | None = None,
    limit: int = 50,
    after: tuple[datetime, uuid.UUID] | None = None,
) -> Page:
    """Jobs newest first, optionally of one status; keyset pagination on (created_at, id).

    `after` is the (created_at, id) of the last job of the previous page. Any number of pages
    can be browsed; each page costs one index range scan (explain_list_jobs shows its plan).
    """
    params: dict[str, Any] = {"limit": limit + 1, "status": status}
    if after is not None:
        params["after_at"], params["after_id"] = after
    with conn.cursor(row_factory=class_row(Job)) as cur:
        cur.execute(_q(_LIST_JOBS_SQL[status is not None, after is not None]), params)
        found = cur.fetchall()
    more = len(found) > limit
    found = found[:limit]
    return Page(jobs=found, next_cursor=(found[-1].created_at, found[-1].id) if more and found else None)


def explain_list_jobs(
    conn: psycopg.Connection,
    *,
    status: str | None = None,
    limit: int = 50,
    after: tuple[datetime, uuid.UUID] | None = None,
) -> dict[str, Any]:
    """The plan (EXPLAIN (format json), its "Plan" node) of the statement list_jobs runs for these arguments."""
    params: dict[str, Any] = {"limit": limit + 1, "status": status}
    if after is not None:
        params["after_at"], params["after_id"] = after
    row = conn.execute(_q("explain (format json) " + _LIST_JOBS_SQL[status is not None, after is not None]),
                       params).fetchone()
    assert row is not None
    return row[0][0]["Plan"]


def count_by_status(conn: psycopg.Connection) -> dict[str, int]:
    """Jobs per status, every status present (zero when none): queue_stats()'s jobs summed over the
    queues, so it costs what the waiting and running jobs cost, and a finished status of a queue
    above 10,000 jobs is the planner's estimate (see db/functions/queue_stats.sql)."""
    found = conn.execute(
        _q("select s.status, coalesce(sum(q.value), 0) from unnest(%(statuses)s::text[])"
        " with ordinality as s(status, n) left join pgqw.queue_stats() q on q.metric = 'jobs' and q.label = s.status"
        " group by s.status, s.n order by s.n"), {"statuses": list(STATUSES)},
    ).fetchall()
    return {status: round(n) for status, n in found}


def listen(conn: psycopg.Connection) -> None:
    """Subscribes an autocommit connection to the wake-ups enqueue_job, release_job,
    retry_dead and sweep_stuck send (payload: the queue name, or '*' for any queue), and to the times
    enqueue_job(s) and mark_failed announce for later (NOTIFY_AT_CHANNEL)."""
    conn.execute(f"listen {NOTIFY_CHANNEL}")
    conn.execute(f"listen {NOTIFY_AT_CHANNEL}")


def jobs_json(jobs: Sequence[dict[str, Any]]) -> Jsonb:
    out = []
    for j in jobs:
        item = {k: v for k, v in j.items() if v is not None and k not in ("run_at", "delay", "unique_for")}
        if j.get("unique_for") is not None:
            u = j["unique_for"]
            item["unique_for_ms"] = round(u.total_seconds() * 1000) if isinstance(u, timedelta) else u
        if j.get("run_at") is not None:
            item["run_at"] = j["run_at"].isoformat() if isinstance(j["run_at"], datetime) else j["run_at"]
        if j.get("delay") is not None:
            d = j["delay"]
            item["delay_ms"] = round(d.total_seconds() * 1000) if isinstance(d, timedelta) else d
        out.append(item)
    return Jsonb(out)


ENQUEUE_JOBS_SQL = "select * from pgqw.enqueue_jobs(%(jobs)s::jsonb)"


def enqueue_jobs(conn: psycopg.Connection, *, jobs: Sequence[dict[str, Any]]) -> list[EnqueuedJob]:
    """Many jobs in one call. Each dict: type, payload, idempotency_key, and optionally queue,
    priority, run_at (datetime or ISO text) or delay (timedelta), max_attempts, unique_for (timedelta).
    Rows come back in input order."""
    with conn.cursor(row_factory=class_row(EnqueuedJob)) as cur:
        cur.execute(_q(ENQUEUE_JOBS_SQL), {"jobs": jobs_json(jobs)})
        return cur.fetchall()




def mark_jobs_succeeded(
    conn: psycopg.Connection, *, done: Sequence[tuple[uuid.UUID | str, uuid.UUID | str]],
    results: Sequence[Any] | None = None,
) -> list[RecordedJob]:
    """mark_succeeded for many (job id, lease token) pairs, each with its JSON result (results[i];
    None: none); returns the jobs whose attempt succeeded (already_recorded: by an earlier call). A
    pair whose token does not hold its job is missing."""
    with conn.cursor(row_factory=class_row(RecordedJob)) as cur:
        cur.execute(
            _q("select * from pgqw.mark_jobs_succeeded(%(ids)s::uuid[], %(tokens)s::uuid[], %(results)s::jsonb)"),
            _mark_jobs_params(done, results))
        return cur.fetchall()


@dataclass
class Recorded:
    """mark_jobs_succeeded's answer for one job as the worker reads it: which job, and whether an
    earlier call had already recorded it."""
    id: uuid.UUID
    already_recorded: bool


def mark_jobs_succeeded_brief(
    conn: psycopg.Connection, *, done: Sequence[tuple[uuid.UUID | str, uuid.UUID | str]],
    results: Sequence[Any] | None = None,
) -> list[Recorded]:
    """mark_jobs_succeeded, reading back only each recorded job's id and already_recorded: the worker's
    form, which spares the server writing out, and the client parsing, every column of every job."""
    with conn.cursor(row_factory=class_row(Recorded)) as cur:
        cur.execute(
            _q("select id, already_recorded from pgqw.mark_jobs_succeeded(%(ids)s::uuid[], %(tokens)s::uuid[],"
            " %(results)s::jsonb)"), _mark_jobs_params(done, results))
        return cur.fetchall()


# The two calls in one statement: the claim's limit is read from the successes recorded (an InitPlan
# runs `recorded` first), and no claim is made when it comes to nothing (claim_jobs refuses a limit of 0).
# The FULL JOIN ON false stacks the two answers, each row one or the other.
_MARK_AND_CLAIM_SQL = """
with recorded as materialized (
    select m.id, m.already_recorded
      from pgqw.mark_jobs_succeeded(%(ids)s::uuid[], %(tokens)s::uuid[], %(results)s::jsonb) m
), claimed as materialized (
    select c.*
      from (select least(%(limit)s::integer, %(free)s::integer + (select count(*) from recorded)::integer) as n) x
     cross join lateral pgqw.claim_jobs(%(worker_id)s::text, x.n, %(queues)s::text[], %(lease_ms)s::integer,
                                   %(types)s::text[]) c
     where x.n > 0
)
select r.id as recorded_id, r.already_recorded, c.*
  from recorded r full join claimed c on false
 order by r.id is null, c.priority desc, c.run_at, c.id"""


def mark_jobs_succeeded_and_claim(
    conn: psycopg.Connection, *, done: Sequence[tuple[uuid.UUID | str, uuid.UUID | str]],
    results: Sequence[Any] | None = None, worker_id: str, limit: int, free: int,
    queues: Sequence[str] | None = None, lease_ms: int | None = None, task_types: Sequence[str] | None = None,
) -> tuple[list[Recorded], list[ClaimedJob]]:
    """mark_jobs_succeeded (read back as mark_jobs_succeeded_brief), then claim_jobs for the slots those
    successes free, as one statement: one round trip, and in autocommit one transaction and one commit. The
    claim takes up to least(limit, free + the successes recorded) jobs, none when that is below 1 (free may
    be negative: slots promised on the chance that every pair is recorded)."""
    params = {**_mark_jobs_params(done, results), "limit": limit, "free": free, "worker_id": worker_id,
              "queues": list(queues) if queues else None, "lease_ms": lease_ms,
              "types": list(task_types) if task_types is not None else None}
    recorded: list[Recorded] = []
    claimed: list[ClaimedJob] = []
    with conn.cursor(row_factory=dict_row) as cur:
        for row in cur.execute(_q(_MARK_AND_CLAIM_SQL), params):
            recorded_id, earlier = row.pop("recorded_id"), row.pop("already_recorded")
            if recorded_id is not None:
                recorded.append(Recorded(id=recorded_id, already_recorded=earlier))
            else:
                claimed.append(ClaimedJob(**row))
    return recorded, claimed


def _mark_jobs_params(done: Sequence[tuple[uuid.UUID | str, uuid.UUID | str]],
                      results: Sequence[Any] | None) -> dict[str, Any]:
    return {"ids": [j for j, _ in done], "tokens": [t for _, t in done],
            "results": Jsonb(list(results)) if results is not None and any(r is not None for r in results) else None}


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
        cur.execute(_q("select * from pgqw.queue_stats()"))
        return cur.fetchall()


def report_timeline(conn: psycopg.Connection, *, job_id: uuid.UUID | str) -> list[TimelineRow]:
    with conn.cursor(row_factory=class_row(TimelineRow)) as cur:
        cur.execute(_q("select * from pgqw.report_timeline(%(job_id)s::uuid)"), {"job_id": job_id})
        return cur.fetchall()


def report_concurrency(conn: psycopg.Connection, *, prefix: str = "") -> list[ConcurrencyRow]:
    with conn.cursor(row_factory=class_row(ConcurrencyRow)) as cur:
        cur.execute(_q("select * from pgqw.report_concurrency(%(prefix)s::text)"), {"prefix": prefix})
        return cur.fetchall()


def report_double_runs(conn: psycopg.Connection, *, prefix: str = "") -> DoubleRuns:
    with conn.cursor(row_factory=class_row(DoubleRuns)) as cur:
        cur.execute(_q("select * from pgqw.report_double_runs(%(prefix)s::text)"), {"prefix": prefix})
        row = cur.fetchone()
    assert row is not None
    return row


def report_latest_jobs(conn: psycopg.Connection, *, limit: int = 20) -> list[LatestJob]:
    with conn.cursor(row_factory=class_row(LatestJob)) as cur:
        cur.execute(_q("select * from pgqw.report_latest_jobs(%(limit)s::integer)"), {"limit": limit})
        return cur.fetchall()


def claim_job_at(
    conn: psycopg.Connection, *, worker_id: str, now: datetime, queues: Sequence[str] | None = None,
    lease_ms: int | None = None,
) -> ClaimedJob | None:
    """claim_job as if it were `now` (claim_jobs_at): the owner's test clock and repairs; no role may
    call it."""
    with conn.cursor(row_factory=class_row(ClaimedJob)) as cur:
        cur.execute(
            _q("select * from pgqw.claim_jobs_at(%(now)s::timestamptz, %(worker_id)s::text, 1, %(queues)s::text[],"
            " %(lease_ms)s::integer)"),
            {"worker_id": worker_id, "queues": list(queues) if queues else None, "now": now, "lease_ms": lease_ms},
        )
        return cur.fetchone()


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
    # Jobs of a type nobody registered are accepted (else enqueue_job(s) refuse them, QT422).
    accept_unregistered_types: bool = False
    # Retention (prune_expired_jobs): succeeded jobs, then dead and cancelled ones, are deleted this long
    # after they finished.
    prune_succeeded_after: timedelta = timedelta(days=7)
    prune_finished_after: timedelta = timedelta(days=30)


def get_queue_settings(conn: psycopg.Connection) -> QueueSettings:
    """The queue_settings row: what every function uses when its argument is left out."""
    with conn.cursor(row_factory=class_row(QueueSettings)) as cur:
        cur.execute(_q("select * from pgqw.queue_settings"))
        row = cur.fetchone()
    assert row is not None
    return row


def login_roles(conn: psycopg.Connection, names: list[str]) -> set[str]:
    """Which of the named roles exist and may log in (db/security/roles.sql makes them)."""
    return {r[0] for r in conn.execute(
        _q("select rolname::text from pg_roles where rolname = any(%(names)s::text[]) and rolcanlogin"),
        {"names": names})}


def find_job_ids_by_prefix(conn: psycopg.Connection, *, prefix: str, limit: int = 6) -> list[uuid.UUID]:
    """The ids of the jobs whose id starts with prefix (hex, dashes ignored), smallest first, at most
    limit of them. The prefix padded with 0s and with fs bounds a range of the primary key's index,
    so the lookup reads only the matching entries, never the table."""
    digits = prefix.replace("-", "").lower()
    if not 1 <= len(digits) <= 32 or any(c not in "0123456789abcdef" for c in digits):
        raise ValueError(f"a job id prefix is 1 to 32 hex digits, got {prefix!r}")
    from psycopg.rows import scalar_row

    with conn.cursor(row_factory=scalar_row) as cur:
        cur.execute(
            _q("select id from pgqw.jobs where id >= %(low)s::uuid and id <= %(high)s::uuid"
            " order by id limit %(limit)s::integer"),
            {"low": digits.ljust(32, "0"), "high": digits.ljust(32, "f"), "limit": limit},
        )
        return cur.fetchall()


# --- Task types, workers, results, and the async twins the client needs -------------------------

FINISHED_CHANNEL = "pgqw_finished"  # payload: the id of a job that reached a final state


@dataclass
class TaskType:
    name: str
    payload_schema: dict[str, Any]
    description: str | None
    queue: str
    priority: int
    max_attempts: int
    backoff_base_ms: int
    backoff_max_delay_ms: int
    backoff_max_jitter_ms: int
    lease_ms: int


@dataclass
class Result:
    job_id: uuid.UUID
    content_type: str
    value: Any
    data: bytes | None
    created_at: datetime


@dataclass
class Worker:
    id: str
    hostname: str | None
    pid: int | None
    queues: list[str] | None
    task_types: list[str]
    concurrency: int | None
    started_at: datetime
    last_seen_at: datetime
    expires_at: datetime
    stopped_at: datetime | None


def register_task_types(conn: psycopg.Connection, *, types: Sequence[dict[str, Any]]) -> list[str]:
    """Upserts the code's definitions (pgqw.tasks.Task.registration()); a DBA's values stay."""
    rows = conn.execute(_q("select name from pgqw.register_task_types(%(types)s::jsonb)"),
                        {"types": Jsonb(list(types))}).fetchall()
    return [r[0] for r in rows]


def get_task_types(conn: psycopg.Connection) -> list[TaskType]:
    """Every registered type with its effective settings (task_type_settings), by name."""
    with conn.cursor(row_factory=class_row(TaskType)) as cur:
        cur.execute(_q("select s.name, s.payload_schema, t.description, s.queue, s.priority, s.max_attempts,"
                    " s.backoff_base_ms, s.backoff_max_delay_ms, s.backoff_max_jitter_ms, s.lease_ms"
                    " from pgqw.task_type_settings s join pgqw.task_types t on t.name = s.name order by s.name"))
        return cur.fetchall()


def get_task_type(conn: psycopg.Connection, *, name: str) -> TaskType | None:
    with conn.cursor(row_factory=class_row(TaskType)) as cur:
        cur.execute(_q("select s.name, s.payload_schema, t.description, s.queue, s.priority, s.max_attempts,"
                    " s.backoff_base_ms, s.backoff_max_delay_ms, s.backoff_max_jitter_ms, s.lease_ms"
                    " from pgqw.task_type_settings s join pgqw.task_types t on t.name = s.name"
                    " where s.name = %(name)s::text"), {"name": name})
        return cur.fetchone()


def register_worker(conn: psycopg.Connection, *, worker_id: str, task_types: Sequence[str],
                    queues: Sequence[str] | None = None, concurrency: int | None = None,
                    hostname: str | None = None, pid: int | None = None, ttl_ms: int = 30000) -> Worker:
    with conn.cursor(row_factory=class_row(Worker)) as cur:
        cur.execute(_q("select * from pgqw.register_worker(%(id)s::text, %(types)s::text[], %(queues)s::text[],"
                    " %(concurrency)s::integer, %(hostname)s::text, %(pid)s::integer, %(ttl)s::integer)"),
                    {"id": worker_id, "types": list(task_types), "queues": list(queues) if queues else None,
                     "concurrency": concurrency, "hostname": hostname, "pid": pid, "ttl": ttl_ms})
        row = cur.fetchone()
    assert row is not None
    return row


def stop_worker(conn: psycopg.Connection, *, worker_id: str) -> Worker | None:
    with conn.cursor(row_factory=class_row(Worker)) as cur:
        cur.execute(_q("select * from pgqw.stop_worker(%(id)s::text)"), {"id": worker_id})
        return cur.fetchone()


def list_workers(conn: psycopg.Connection) -> list[Worker]:
    """Every worker that registered, the live ones first (alive: expires_at in the future)."""
    with conn.cursor(row_factory=class_row(Worker)) as cur:
        cur.execute(_q("select * from pgqw.workers order by (expires_at > now()) desc, last_seen_at desc, id"))
        return cur.fetchall()


RESULT_SQL = "select * from pgqw.job_results where job_id = %(job_id)s::uuid"
# A job's status with its result, if any: pgqw.client tells a job not finished from one whose handler returned None.
JOB_RESULT_SQL = ("select j.status, r.content_type, r.value, r.data from pgqw.jobs j"
                  " left join pgqw.job_results r on r.job_id = j.id where j.id = %(job_id)s::uuid")


def get_result(conn: psycopg.Connection, *, job_id: uuid.UUID | str) -> Result | None:
    with conn.cursor(row_factory=class_row(Result)) as cur:
        cur.execute(_q(RESULT_SQL), {"job_id": job_id})
        return cur.fetchone()




async def get_job_async(conn: psycopg.AsyncConnection, *, job_id: uuid.UUID | str) -> Job | None:
    async with conn.cursor(row_factory=class_row(Job)) as cur:
        await cur.execute(_q(GET_JOB_SQL), {"job_id": job_id})
        return await cur.fetchone()


def listen_finished(conn: psycopg.Connection) -> None:
    """Subscribes an autocommit connection to the notice sent when a job reaches a final state."""
    conn.execute(f"listen {FINISHED_CHANNEL}")


def unlisten_finished(conn: psycopg.Connection) -> None:
    conn.execute(f"unlisten {FINISHED_CHANNEL}")


def watch_job(conn: psycopg.Connection, *, job_id: uuid.UUID | str) -> str:
    """This session waits for the job to end: its end is notified on pgqw_finished from now on (LISTEN
    first). Returns the job's status; QN404 when there is no such job."""
    row = conn.execute(_q("select pgqw.watch_job(%(job_id)s::uuid)"), {"job_id": job_id}).fetchone()
    assert row is not None
    return row[0]


def unwatch_job(conn: psycopg.Connection, *, job_id: uuid.UUID | str) -> bool:
    row = conn.execute(_q("select pgqw.unwatch_job(%(job_id)s::uuid)"), {"job_id": job_id}).fetchone()
    return bool(row and row[0])


async def listen_finished_async(conn: psycopg.AsyncConnection) -> None:
    await conn.execute(f"listen {FINISHED_CHANNEL}")


async def unlisten_finished_async(conn: psycopg.AsyncConnection) -> None:
    await conn.execute(f"unlisten {FINISHED_CHANNEL}")


async def watch_job_async(conn: psycopg.AsyncConnection, *, job_id: uuid.UUID | str) -> str:
    cur = await conn.execute(_q("select pgqw.watch_job(%(job_id)s::uuid)"), {"job_id": job_id})
    row = await cur.fetchone()
    assert row is not None
    return row[0]


async def unwatch_job_async(conn: psycopg.AsyncConnection, *, job_id: uuid.UUID | str) -> bool:
    cur = await conn.execute(_q("select pgqw.unwatch_job(%(job_id)s::uuid)"), {"job_id": job_id})
    row = await cur.fetchone()
    return bool(row and row[0])


# ---- schedules: periodic jobs (db/functions/*schedule*.sql) ----

@dataclass
class Schedule:
    """A row of schedules: a task type enqueued at each slot of a cron expression (read in UTC)."""
    name: str
    task_type: str
    cron: str
    payload: dict[str, Any]
    queue: str | None
    priority: int | None
    catch_up: str  # latest, all or none: which missed slots get a job after a stop
    paused: bool
    last_slot: datetime | None  # the latest slot a job was enqueued for
    slots_after: datetime  # no slot at or before this is enqueued
    source: str  # code (register_schedules) or sql (set_schedule)
    created_at: datetime
    updated_at: datetime


@dataclass
class ScheduledJob:
    """One slot enqueue_schedule_slots gave a job (created: false when the slot's job existed already)."""
    slot: datetime
    job_id: uuid.UUID
    created: bool


def _schedule(conn: psycopg.Connection, statement: str, params: dict[str, Any]) -> Schedule:
    with conn.cursor(row_factory=class_row(Schedule)) as cur:
        cur.execute(_q(statement), params)
        row = cur.fetchone()
    assert row is not None
    return row


def set_schedule(conn: psycopg.Connection, *, name: str, task_type: str, cron: str,
                 payload: dict[str, Any] | None = None, queue: str | None = None, priority: int | None = None,
                 catch_up: str = "latest") -> Schedule:
    """Makes or replaces a schedule as a DBA's (source sql); its pause is kept."""
    return _schedule(conn, "select * from pgqw.set_schedule(%(name)s::text, %(task_type)s::text, %(cron)s::text,"
                           " %(payload)s::jsonb, %(queue)s::text, %(priority)s::integer, %(catch_up)s::text)",
                     {"name": name, "task_type": task_type, "cron": cron, "payload": Jsonb(payload or {}),
                      "queue": queue, "priority": priority, "catch_up": catch_up})


def pause_schedule(conn: psycopg.Connection, *, name: str) -> Schedule:
    return _schedule(conn, "select * from pgqw.pause_schedule(%(name)s::text)", {"name": name})


def resume_schedule(conn: psycopg.Connection, *, name: str) -> Schedule:
    """Enqueues again from the next slot after now (the slots passed while paused are skipped)."""
    return _schedule(conn, "select * from pgqw.resume_schedule(%(name)s::text)", {"name": name})


def delete_schedule(conn: psycopg.Connection, *, name: str) -> Schedule:
    return _schedule(conn, "select * from pgqw.delete_schedule(%(name)s::text)", {"name": name})


def list_schedules(conn: psycopg.Connection) -> list[Schedule]:
    """Every schedule, by name."""
    with conn.cursor(row_factory=class_row(Schedule)) as cur:
        cur.execute(_q("select * from pgqw.list_schedules()"))
        return cur.fetchall()


@dataclass
class ScheduleTimes:
    """A schedule's timing (schedule_times): what a scheduler needs to find its due slots."""
    name: str
    task_type: str
    cron: str
    catch_up: str
    paused: bool
    last_slot: datetime | None
    slots_after: datetime


def schedule_times(conn: psycopg.Connection) -> list[ScheduleTimes]:
    """Every schedule's timing, by name (no payloads)."""
    with conn.cursor(row_factory=class_row(ScheduleTimes)) as cur:
        cur.execute(_q("select * from pgqw.schedule_times()"))
        return cur.fetchall()


def prune_expired_jobs(conn: psycopg.Connection, *, batch: int = 1000) -> int:
    """Deletes up to batch finished jobs past the database's retention (queue_settings)."""
    row = conn.execute(_q("select pgqw.prune_expired_jobs(%(batch)s::integer)"), {"batch": batch}).fetchone()
    assert row is not None
    return int(row[0])


def get_schedule(conn: psycopg.Connection, *, name: str) -> Schedule | None:
    with conn.cursor(row_factory=class_row(Schedule)) as cur:
        cur.execute(_q("select * from pgqw.schedules where name = %(name)s::text"), {"name": name})
        return cur.fetchone()


def register_schedules(conn: psycopg.Connection, *, task_types: Sequence[str],
                       schedules: Sequence[dict[str, Any]]) -> list[Schedule]:
    """Upserts the code's schedules (pgqw.tasks.Task.schedule_registrations()) of a worker running
    task_types; deletes its code schedules the code no longer defines. A DBA's pause and schedules stay."""
    with conn.cursor(row_factory=class_row(Schedule)) as cur:
        cur.execute(_q("select * from pgqw.register_schedules(%(types)s::text[], %(schedules)s::jsonb)"),
                    {"types": list(task_types), "schedules": Jsonb(list(schedules))})
        return cur.fetchall()


def enqueue_schedule_slots(conn: psycopg.Connection, *, name: str, slots: Sequence[datetime]) -> list[ScheduledJob]:
    """The due slots found for a schedule (none in the server's future); the schedule's catch_up picks
    which get a job, each once whoever calls."""
    with conn.cursor(row_factory=class_row(ScheduledJob)) as cur:
        cur.execute(_q("select * from pgqw.enqueue_schedule_slots(%(name)s::text, %(slots)s::timestamptz[])"),
                    {"name": name, "slots": list(slots)})
        return cur.fetchall()


def server_now(conn: psycopg.Connection) -> datetime:
    """The database server's clock (the one enqueue_schedule_slots checks slots against)."""
    row = conn.execute(_q("select now()")).fetchone()
    assert row is not None
    return row[0]


# ---- queues: pause, resume, a limit on running jobs, a rate (db/functions/pause_queue.sql and its neighbours) ----

@dataclass
class QueueRow:
    """A queue's row in queues: what an operator set on it."""
    name: str
    paused: bool
    max_running: int | None
    jobs_per_second: Decimal | None  # null: no rate
    updated_at: datetime
    # The rate's token bucket (claim_jobs_at keeps it): tokens as of rate_refilled_at; None without a rate.
    rate_tokens: Decimal | None = None
    rate_refilled_at: datetime | None = None


@dataclass
class QueueInfo:
    """A known queue (one with a job or a row in queues): its settings and its numbers now."""
    name: str
    paused: bool
    max_running: int | None
    jobs_per_second: Decimal | None  # at most this many jobs started per second; None: no rate
    depth: int  # ready jobs: pending or failed, due, with a try left
    running: int  # processing jobs
    oldest_ready_age_seconds: float  # 0 when none is ready


PAUSE_QUEUE_SQL = "select * from pgqw.pause_queue(%(queue)s::text, %(create)s::boolean)"
RESUME_QUEUE_SQL = "select * from pgqw.resume_queue(%(queue)s::text, %(create)s::boolean)"


def pause_queue(conn: psycopg.Connection, *, queue: str, create: bool = False) -> QueueRow:
    """A queue not known yet (no job, setting, worker, task type or schedule) is refused (QU404) unless create."""
    with conn.cursor(row_factory=class_row(QueueRow)) as cur:
        cur.execute(_q(PAUSE_QUEUE_SQL),
                    {"queue": queue, "create": create})
        row = cur.fetchone()
    assert row is not None
    return row


def resume_queue(conn: psycopg.Connection, *, queue: str, create: bool = False) -> QueueRow:
    """A queue not known yet (no job, setting, worker, task type or schedule) is refused (QU404) unless create."""
    with conn.cursor(row_factory=class_row(QueueRow)) as cur:
        cur.execute(_q(RESUME_QUEUE_SQL),
                    {"queue": queue, "create": create})
        row = cur.fetchone()
    assert row is not None
    return row


def set_queue_limit(conn: psycopg.Connection, *, queue: str, max_running: int | None,
                    create: bool = False) -> QueueRow:
    """At most max_running jobs of the queue processing at once across all workers; None: no limit. A queue
    not known yet is refused (QU404) unless create."""
    with conn.cursor(row_factory=class_row(QueueRow)) as cur:
        cur.execute(_q("select * from pgqw.set_queue_limit(%(queue)s::text, %(max_running)s::integer,"
                       " %(create)s::boolean)"),
                    {"queue": queue, "max_running": max_running, "create": create})
        row = cur.fetchone()
    assert row is not None
    return row


def set_queue_rate(conn: psycopg.Connection, *, queue: str,
                   jobs_per_second: Decimal | float | int | None, create: bool = False) -> QueueRow:
    """At most jobs_per_second of the queue's jobs started per second across all workers; None: no rate. A
    queue not known yet is refused (QU404) unless create."""
    with conn.cursor(row_factory=class_row(QueueRow)) as cur:
        cur.execute(_q("select * from pgqw.set_queue_rate(%(queue)s::text, %(jobs_per_second)s::numeric,"
                       " %(create)s::boolean)"),
                    {"queue": queue, "jobs_per_second": jobs_per_second, "create": create})
        row = cur.fetchone()
    assert row is not None
    return row


def list_queues(conn: psycopg.Connection) -> list[QueueInfo]:
    """Every known queue by name: paused, max_running, jobs_per_second, depth, running, age of the oldest ready job."""
    with conn.cursor(row_factory=class_row(QueueInfo)) as cur:
        cur.execute(
            # The queues with a job: a skip scan of jobs_queue_status_idx (one probe per queue), not a
            # read of the history; then each queue's waiting and running jobs, a range of it each.
            _q("with recursive found(name) as ("
            "  (select j.queue from pgqw.jobs j order by j.queue limit 1)"
            "  union all"
            "  select (select j.queue from pgqw.jobs j where j.queue > f.name order by j.queue limit 1)"
            "    from found f where f.name is not null"
            "), known(name) as (select f.name from found f where f.name is not null union select q.name from pgqw.queues q),"
            " ready as ("
            "  select k.name, count(j.*) as depth, min(j.run_at) as oldest"
            "    from known k left join pgqw.jobs j on j.queue = k.name and j.status in ('pending', 'failed')"
            "         and j.run_at <= now() and j.attempts < j.max_attempts"
            "   group by k.name"
            ")"
            " select r.name, coalesce(q.paused, false) as paused, q.max_running, q.jobs_per_second,"
            "        r.depth::integer as depth,"
            "        (select count(*) from pgqw.jobs j where j.queue = r.name and j.status = 'processing')::integer as running,"
            "        coalesce(extract(epoch from now() - r.oldest), 0)::double precision as oldest_ready_age_seconds"
            "   from ready r left join pgqw.queues q on q.name = r.name"
            "  order by 1"))
        return cur.fetchall()


# ---- the operator's console (GET /api/workers, /api/throughput, the job search of GET /api/jobs) ----

@dataclass
class WorkerStatus(Worker):
    """A worker as the console shows it. alive is the database's verdict: its own heartbeat keeps
    expires_at ahead of the server's clock (register_worker) and it has not said it stopped."""
    alive: bool


def list_worker_status(conn: psycopg.Connection, *, limit: int = 200) -> list[WorkerStatus]:
    """The workers, the live ones first, then the gone ones most recently seen first; at most limit."""
    with conn.cursor(row_factory=class_row(WorkerStatus)) as cur:
        cur.execute(_q("select w.*, (w.expires_at > now() and w.stopped_at is null) as alive from pgqw.workers w"
                    " order by alive desc, w.last_seen_at desc, w.id limit %(limit)s::integer"), {"limit": limit})
        return cur.fetchall()


@dataclass
class ThroughputCount:
    queue: str
    bucket: int  # 0: the oldest bucket
    succeeded: int  # jobs that finished succeeded in the bucket
    failed: int  # jobs that went dead in the bucket (after their last attempt)


@dataclass
class Throughput:
    since: datetime
    until: datetime  # the database's now(); bucket i is [since + i·width, since + (i+1)·width)
    buckets: int
    counts: list[ThroughputCount]  # only the (queue, bucket) pairs with a finished job


# The jobs that finished in [since, until): succeeded, or dead after their last attempt. Two ranges of
# jobs_finished_idx (status, finished_at), so the cost follows the window's jobs, not the history, and
# the chart adds no index to the write path. Retried attempts are not counted; their job counts once.
_THROUGHPUT_SQL = (
    "select queue,"
    "       least(floor(extract(epoch from finished_at - %(since)s::timestamptz)"
    "                   / extract(epoch from %(until)s::timestamptz - %(since)s::timestamptz)"
    "                   * %(buckets)s::integer)::integer, %(buckets)s::integer - 1) as bucket,"
    "       count(*) filter (where status = 'succeeded')::integer as succeeded,"
    "       count(*) filter (where status = 'dead')::integer as failed"
    "  from pgqw.jobs"
    " where status in ('succeeded', 'dead')"
    "   and finished_at >= %(since)s::timestamptz and finished_at < %(until)s::timestamptz"
    " group by 1, 2 order by 1, 2"
)


def _throughput_window(conn: psycopg.Connection, minutes: int) -> tuple[datetime, datetime]:
    row = conn.execute(_q("select now() - make_interval(mins => %(minutes)s::integer), now()"),
                       {"minutes": minutes}).fetchone()
    assert row is not None
    return row[0], row[1]


def throughput(conn: psycopg.Connection, *, minutes: int = 60, buckets: int = 60) -> Throughput:
    """Jobs that finished (succeeded or dead) per queue over the last `minutes`, in `buckets` equal
    buckets ending now."""
    since, until = _throughput_window(conn, minutes)
    with conn.cursor(row_factory=class_row(ThroughputCount)) as cur:
        cur.execute(_q(_THROUGHPUT_SQL), {"since": since, "until": until, "buckets": buckets})
        counts = cur.fetchall()
    return Throughput(since=since, until=until, buckets=buckets, counts=counts)


def explain_throughput(conn: psycopg.Connection, *, minutes: int = 60, buckets: int = 60) -> dict[str, Any]:
    """The plan (EXPLAIN (format json), its "Plan" node) of the statement throughput runs."""
    since, until = _throughput_window(conn, minutes)
    row = conn.execute(_q("explain (format json) " + _THROUGHPUT_SQL),
                       {"since": since, "until": until, "buckets": buckets}).fetchone()
    assert row is not None
    return row[0][0]["Plan"]


def job_id_range(prefix: str) -> tuple[str, str]:
    """The smallest and largest job id that start with prefix (1 to 32 hex digits, dashes ignored)."""
    digits = prefix.replace("-", "").lower()
    if not 1 <= len(digits) <= 32 or any(c not in "0123456789abcdef" for c in digits):
        raise ValueError(f"a job id prefix is 1 to 32 hex digits, got {prefix[:40]!r}")
    return digits.ljust(32, "0"), digits.ljust(32, "f")


def search_jobs(
    conn: psycopg.Connection,
    *,
    status: str | None = None,
    id_prefix: str | None = None,
    type: str | None = None,
    queue: str | None = None,
    limit: int = 50,
    after: tuple[datetime, uuid.UUID] | None = None,
) -> Page:
    """list_jobs with more filters, all of them together: an id prefix (a range of the primary key),
    a task type, a queue. Newest first, the same keyset pages (pass the same filters with `after`)."""
    where: list[str] = []
    params: dict[str, Any] = {"limit": limit + 1, "status": status, "type": type, "queue": queue}
    if status is not None:
        where.append("status = %(status)s::text")
    if id_prefix is not None:
        params["id_low"], params["id_high"] = job_id_range(id_prefix)
        where.append("id between %(id_low)s::uuid and %(id_high)s::uuid")
    if type is not None:
        where.append("type = %(type)s::text")
    if queue is not None:
        where.append("queue = %(queue)s::text")
    if after is not None:
        params["after_at"], params["after_id"] = after
        where.append("(created_at, id) < (%(after_at)s::timestamptz, %(after_id)s::uuid)")
    statement = ("select * from pgqw.jobs" + (" where " + " and ".join(where) if where else "")  # fixed fragments only
                 + " order by created_at desc, id desc limit %(limit)s::integer")
    with conn.cursor(row_factory=class_row(Job)) as cur:
        cur.execute(_q(statement), params)
        found = cur.fetchall()
    more = len(found) > limit
    found = found[:limit]
    return Page(jobs=found, next_cursor=(found[-1].created_at, found[-1].id) if more and found else None)
