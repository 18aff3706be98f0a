"""The job functions: enqueue, claim, the attempt's end (mark_*, release), heartbeat, retry,
cancel, sweep and prune."""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any, Sequence

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from ._exec import _all, _column, _maybe, _one, _q, _value
from .models import CancelledJob, ClaimedJob, EnqueuedJob, Job, Lease, NextRunAt, Recorded, RecordedJob, Swept

# The job functions answer with the job's row whole (its `job` field) beside what the call adds; a
# wrapper reads its columns flat, `(e.job).*`, into the same dataclass.
ENQUEUE_JOB_SQL = (
    "select (e.job).*, e.created from pgqw.enqueue_job(%(type)s::text, %(payload)s::jsonb, %(key)s::text,"
    " %(queue)s::text, %(priority)s::integer, coalesce(%(run_at)s::timestamptz, now() + %(delay)s::interval),"
    " %(max_attempts)s::integer, %(unique_for)s::interval, %(timeout_ms)s::integer, %(expires_at)s::timestamptz,"
    " %(expire_after_ms)s::integer, %(depends_on)s::uuid[], %(run_anyway)s::boolean, %(serial_key)s::text,"
    " %(concurrency_key)s::text, %(workflow_id)s::uuid) e"
)


def enqueue_params(type: str, payload: dict[str, Any], idempotency_key: str, queue: str | None,
                    priority: int | None, run_at: datetime | None, delay: timedelta | None,
                    max_attempts: int | None, unique_for: timedelta | None = None,
                    timeout_ms: int | None = None, expires_at: datetime | None = None,
                    expire_after_ms: int | None = None, depends_on: Sequence[uuid.UUID | str] | None = None,
                    run_anyway: bool = False, serial_key: str | None = None, concurrency_key: str | None = None,
                    workflow_id: uuid.UUID | str | None = None) -> dict[str, Any]:
    return {"type": type, "payload": Jsonb(payload), "key": idempotency_key, "queue": queue, "priority": priority,
            "run_at": run_at, "delay": delay, "max_attempts": max_attempts, "unique_for": unique_for,
            "timeout_ms": timeout_ms, "expires_at": expires_at, "expire_after_ms": expire_after_ms,
            "depends_on": None if depends_on is None else [str(d) for d in depends_on], "run_anyway": run_anyway,
            "serial_key": serial_key, "concurrency_key": concurrency_key,
            "workflow_id": None if workflow_id is None else str(workflow_id)}


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
    timeout_ms: int | None = None,
    expires_at: datetime | None = None,
    expire_after_ms: int | None = None,
    depends_on: Sequence[uuid.UUID | str] | None = None,
    run_anyway: bool = False,
    serial_key: str | None = None,
    concurrency_key: str | None = None,
    workflow_id: uuid.UUID | str | None = None,
) -> EnqueuedJob:
    """One job. Unset queue, priority and max_attempts take the task type's values, then the
    defaults ('default', 0, queue_settings). delay counts from the database's clock. unique_for: the
    key is unique only within that window of run_at (stored as `<key>@<window start>`). timeout_ms:
    each attempt's own timeout (None: the task type's at each claim, if any). expires_at, or expire_after_ms from when
    it may start (not both; None: the task type's, else never): not started by then, it ends expired.
    depends_on: blocked until each of these jobs succeeded (run_anyway: ended at all); workflow_id: its graph
    (None: its first parent's); serial_key: one job of the key at a time, in enqueue order; concurrency_key:
    counted against its queue's key_max_running."""
    return _one(conn, EnqueuedJob, ENQUEUE_JOB_SQL, enqueue_params(type, payload, idempotency_key, queue, priority,
                                                                  run_at, delay, max_attempts, unique_for, timeout_ms,
                                                                  expires_at, expire_after_ms, depends_on, run_anyway,
                                                                  serial_key, concurrency_key, workflow_id))


ENQUEUE_JOBS_SQL = "select (e.job).*, e.created from pgqw.enqueue_jobs(%(jobs)s::jsonb) e"


def jobs_json(jobs: Sequence[dict[str, Any]]) -> Jsonb:
    out = []
    for j in jobs:
        item = {k: v for k, v in j.items() if v is not None and k not in ("run_at", "delay", "unique_for", "expires_at")}
        if j.get("unique_for") is not None:
            u = j["unique_for"]
            item["unique_for_ms"] = round(u.total_seconds() * 1000) if isinstance(u, timedelta) else u
        if j.get("run_at") is not None:
            item["run_at"] = j["run_at"].isoformat() if isinstance(j["run_at"], datetime) else j["run_at"]
        if j.get("expires_at") is not None:
            item["expires_at"] = j["expires_at"].isoformat() if isinstance(j["expires_at"], datetime) else j["expires_at"]
        if j.get("depends_on") is not None:
            item["depends_on"] = [d if isinstance(d, int) else str(d) for d in j["depends_on"]]
        if j.get("workflow_id") is not None:
            item["workflow_id"] = str(j["workflow_id"])
        if j.get("delay") is not None:
            d = j["delay"]
            item["delay_ms"] = round(d.total_seconds() * 1000) if isinstance(d, timedelta) else d
        out.append(item)
    return Jsonb(out)


def enqueue_jobs(conn: psycopg.Connection, *, jobs: Sequence[dict[str, Any]]) -> list[EnqueuedJob]:
    """Many jobs in one call. Each dict: type, payload, idempotency_key, and optionally queue,
    priority, run_at (datetime or ISO text) or delay (timedelta), max_attempts, unique_for (timedelta),
    timeout_ms, expires_at (datetime or ISO text) or expire_after_ms, depends_on (job ids, or the 1-based
    numbers of earlier elements), run_anyway, serial_key, concurrency_key, workflow_id.
    Rows come back in input order."""
    return _all(conn, EnqueuedJob, ENQUEUE_JOBS_SQL, {"jobs": jobs_json(jobs)})


def claim_job(
    conn: psycopg.Connection,
    *,
    worker_id: str,
    queues: Sequence[str] | None = None,
    lease_ms: int | None = None,
    task_types: Sequence[str] | None = None,
) -> ClaimedJob | None:
    """The next ready job of these queues and task types (None: any) with its lease token, or None."""
    return _maybe(conn, ClaimedJob,
                  "select (c.job).*, c.lease_token from pgqw.claim_job(%(worker_id)s::text, %(queues)s::text[],"
                  " %(lease_ms)s::integer, %(types)s::text[]) c",
                  {"worker_id": worker_id, "queues": list(queues) if queues else None, "lease_ms": lease_ms,
                   "types": list(task_types) if task_types is not None else None})


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
    return _all(conn, ClaimedJob,
                "select (c.job).*, c.lease_token from pgqw.claim_jobs(%(worker_id)s::text, %(limit)s::integer,"
                " %(queues)s::text[], %(lease_ms)s::integer, %(types)s::text[]) c",
                {"worker_id": worker_id, "limit": limit, "queues": list(queues) if queues else None,
                 "lease_ms": lease_ms, "types": list(task_types) if task_types is not None else None})


def claim_job_at(
    conn: psycopg.Connection, *, worker_id: str, now: datetime, queues: Sequence[str] | None = None,
    lease_ms: int | None = None,
) -> ClaimedJob | None:
    """claim_job as if it were `now` (claim_jobs_at): the owner's test clock and repairs; no role may
    call it."""
    return _maybe(conn, ClaimedJob,
                  "select (c.job).*, c.lease_token from pgqw.claim_jobs_at(%(now)s::timestamptz,"
                  " %(worker_id)s::text, 1, %(queues)s::text[], %(lease_ms)s::integer) c",
                  {"worker_id": worker_id, "queues": list(queues) if queues else None, "now": now,
                   "lease_ms": lease_ms})


def next_run_at(
    conn: psycopg.Connection,
    *,
    queues: Sequence[str] | None = None,
    task_types: Sequence[str] | None = None,
    limit: int = 1,
) -> list[NextRunAt]:
    """The earliest limit distinct run_at times still ahead of waiting jobs of these queues and task types
    (None: any) in unpaused queues, each with how many ms ahead it is on the server's clock."""
    return _all(conn, NextRunAt,
                "select * from pgqw.next_run_at(%(queues)s::text[], %(types)s::text[], %(limit)s::integer)",
                {"queues": list(queues) if queues else None,
                 "types": list(task_types) if task_types is not None else None, "limit": limit})


def mark_succeeded(
    conn: psycopg.Connection, *, job_id: uuid.UUID | str, lease_token: uuid.UUID | str,
    result: tuple[str, Any, bytes | None] | None = None,
) -> RecordedJob:
    """Success of the attempt this lease token holds, with its result (content type, JSON value,
    bytes) if any."""
    content_type, value, data = result if result is not None else (None, None, None)
    return _one(conn, RecordedJob,
                "select (m.job).*, m.already_recorded from pgqw.mark_succeeded(%(job_id)s::uuid, %(token)s::uuid,"
                " %(type)s::text, %(value)s::jsonb, %(data)s::bytea) m",
                {"job_id": job_id, "token": lease_token, "type": content_type,
                 "value": Jsonb(value) if data is None and content_type is not None else None, "data": data})


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
    return _one(conn, RecordedJob,
                "select (m.job).*, m.already_recorded from pgqw.mark_failed(%(job_id)s::uuid, %(token)s::uuid,"
                " %(error)s::text, %(retryable)s::boolean, %(base_ms)s::integer,"
                " %(max_jitter_ms)s::integer, %(max_delay_ms)s::integer) m",
                {"job_id": job_id, "token": lease_token, "error": error,
                 "retryable": retryable, "base_ms": base_ms, "max_jitter_ms": max_jitter_ms,
                 "max_delay_ms": max_delay_ms})


def release_job(
    conn: psycopg.Connection, *, job_id: uuid.UUID | str, lease_token: uuid.UUID | str, reason: str
) -> RecordedJob:
    return _one(conn, RecordedJob,
                "select (m.job).*, m.already_recorded from pgqw.release_job(%(job_id)s::uuid, %(token)s::uuid,"
                " %(reason)s::text) m",
                {"job_id": job_id, "token": lease_token, "reason": reason})


def mark_cancelled(conn: psycopg.Connection, *, job_id: uuid.UUID | str, lease_token: uuid.UUID | str) -> RecordedJob:
    """Ends the token's attempt cancelled: its job was asked to cancel."""
    return _one(conn, RecordedJob,
                "select (m.job).*, m.already_recorded from pgqw.mark_cancelled(%(job_id)s::uuid, %(token)s::uuid) m",
                {"job_id": job_id, "token": lease_token})


def snooze_job(
    conn: psycopg.Connection, *, job_id: uuid.UUID | str, lease_token: uuid.UUID | str,
    until: datetime | None = None, delay_ms: int | None = None,
) -> RecordedJob:
    """Puts the token's job off until `until`, or `delay_ms` from now by the database's clock (exactly
    one of the two), without spending its attempt; past its snooze limit the job ends dead."""
    return _one(conn, RecordedJob,
                "select (m.job).*, m.already_recorded from pgqw.snooze_job(%(job_id)s::uuid, %(token)s::uuid,"
                " %(until)s::timestamptz, %(delay_ms)s::integer) m",
                {"job_id": job_id, "token": lease_token, "until": until, "delay_ms": delay_ms})


def mark_timed_out(
    conn: psycopg.Connection, *, job_id: uuid.UUID | str, lease_token: uuid.UUID | str,
    base_ms: int | None = None, max_jitter_ms: int | None = None, max_delay_ms: int | None = None,
) -> RecordedJob:
    """Ends the token's attempt timed out, once its deadline has passed (QS409 before): failed with the
    backoff while tries are left, else dead; cancelled if a cancel was asked."""
    return _one(conn, RecordedJob,
                "select (m.job).*, m.already_recorded from pgqw.mark_timed_out(%(job_id)s::uuid, %(token)s::uuid,"
                " %(base_ms)s::integer, %(max_jitter_ms)s::integer, %(max_delay_ms)s::integer) m",
                {"job_id": job_id, "token": lease_token, "base_ms": base_ms, "max_jitter_ms": max_jitter_ms,
                 "max_delay_ms": max_delay_ms})


def heartbeat(
    conn: psycopg.Connection, *, leases: Sequence[tuple[uuid.UUID | str, uuid.UUID | str]], lease_ms: int | None = None,
    progress: Sequence[str | None] | None = None,
) -> list[Lease]:
    """Extends the lease of each (job id, lease token) that still holds its job; a job missing from
    the answer is no longer held by that token. progress: one per lease, the job's progress as JSON
    text (None: unchanged), written only where the token holds."""
    return _all(conn, Lease,
                "select * from pgqw.heartbeat(%(job_ids)s::uuid[], %(tokens)s::uuid[], %(lease_ms)s::integer,"
                " %(progress)s::text[]::jsonb[])",
                {"job_ids": [j for j, _ in leases], "tokens": [t for _, t in leases], "lease_ms": lease_ms,
                 "progress": None if progress is None else list(progress)})


def mark_jobs_succeeded(
    conn: psycopg.Connection, *, done: Sequence[tuple[uuid.UUID | str, uuid.UUID | str]],
    results: Sequence[Any] | None = None,
) -> list[RecordedJob]:
    """mark_succeeded for many (job id, lease token) pairs, each with its JSON result (results[i];
    None: none); returns the jobs whose attempt succeeded (already_recorded: by an earlier call). A
    pair whose token does not hold its job is missing."""
    return _all(conn, RecordedJob,
                "select (m.job).*, m.already_recorded from pgqw.mark_jobs_succeeded(%(ids)s::uuid[],"
                " %(tokens)s::uuid[], %(results)s::jsonb) m", _mark_jobs_params(done, results))


def mark_jobs_succeeded_brief(
    conn: psycopg.Connection, *, done: Sequence[tuple[uuid.UUID | str, uuid.UUID | str]],
    results: Sequence[Any] | None = None,
) -> list[Recorded]:
    """mark_jobs_succeeded, reading back only each recorded job's id and already_recorded: the worker's
    form, which spares the server writing out, and the client parsing, every column of every job."""
    return _all(conn, Recorded,
                "select (m.job).id, m.already_recorded from pgqw.mark_jobs_succeeded(%(ids)s::uuid[],"
                " %(tokens)s::uuid[], %(results)s::jsonb) m", _mark_jobs_params(done, results))


# The two calls in one statement: the claim's limit is read from the successes recorded (an InitPlan
# runs `recorded` first), and no claim is made when it comes to nothing (claim_jobs refuses a limit of 0).
# The FULL JOIN ON false stacks the two answers, each row one or the other.
_MARK_AND_CLAIM_SQL = """
with recorded as materialized (
    select (m.job).id, m.already_recorded
      from pgqw.mark_jobs_succeeded(%(ids)s::uuid[], %(tokens)s::uuid[], %(results)s::jsonb) m
), claimed as materialized (
    select (c.job).*, c.lease_token
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


RETRY_DEAD_SQL = "select * from pgqw.retry_dead(%(job_id)s::uuid, %(extra)s::integer)"


def retry_dead(conn: psycopg.Connection, *, job_id: uuid.UUID | str, extra_attempts: int | None = None) -> Job:
    return _one(conn, Job, RETRY_DEAD_SQL, {"job_id": job_id, "extra": extra_attempts})


CANCEL_JOB_SQL = "select (c.job).*, c.cancel_requested_at from pgqw.cancel_job(%(job_id)s::uuid) c"


def cancel_job(conn: psycopg.Connection, *, job_id: uuid.UUID | str) -> CancelledJob:
    """A waiting job ends cancelled at once; a processing one is asked to stop."""
    return _one(conn, CancelledJob, CANCEL_JOB_SQL, {"job_id": job_id})


def sweep_stuck(conn: psycopg.Connection) -> list[Swept]:
    """Recovers the jobs whose lease expired, by the server's clock."""
    return _all(conn, Swept, "select * from pgqw.sweep_stuck()")


def sweep_stuck_at(conn: psycopg.Connection, *, now: datetime) -> list[Swept]:
    """sweep_stuck as if it were `now`: the owner's test clock and repairs (no role may call it)."""
    return _all(conn, Swept, "select * from pgqw.sweep_stuck_at(%(now)s::timestamptz)", {"now": now})


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
    [deleted] = _column(conn, "select pgqw.prune_jobs(" + ", ".join(args) + ") as deleted",  # fixed text only
                        {"older_than": older_than, "statuses": None if statuses is None else list(statuses),
                         "batch": batch})
    return int(deleted)


def prune_expired_jobs(conn: psycopg.Connection, *, batch: int = 1000) -> int:
    """Deletes up to batch finished jobs past the database's retention (queue_settings)."""
    return int(_value(conn, "select pgqw.prune_expired_jobs(%(batch)s::integer)", {"batch": batch}))
