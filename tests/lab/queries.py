"""Queries only the lab needs (break-it scenarios, chaos soak, partition test): read-only counts
over the queue's tables. The product's SQL lives in db/ and pgqw.db; these only check it."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Sequence

import psycopg
from psycopg.rows import class_row, dict_row

from pgqw.db import Attempt, Job


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
            " (select count(*) from job_results r join j on j.id = r.job_id"
            " where j.type = 'listing_flyer' and r.content_type = 'application/pdf')::int as flyers",
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



# The chaos soak's final checks (tests/lab/soak.py): one read-only query over the whole queue.
# Each *_ids column lists up to 5 offending jobs, so a failure names them.
CHECKS_SQL = """
with per_job as (
    select j.id, j.status, j.attempts,
           count(a.attempt)::int as attempt_rows,
           coalesce(max(a.attempt), 0)::int as last_attempt,
           (count(*) filter (where a.outcome = 'succeeded'))::int as successes,
           exists (select 1 from job_results r where r.job_id = j.id and j.type = 'listing_flyer'
                                and r.content_type = 'application/pdf') as has_flyer
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
    (select count(*) from per_job where has_flyer)::int as flyers,
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

# What happened, for the report (no expectations): read-only as well. Which jobs were made invalid
# on purpose is the soak's own knowledge (their ids), never read back from an error message.
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
    (select count(*) from jobs where status = 'dead' and id = any(%(invalid_ids)s::uuid[]))::int as dead_invalid,
    (select coalesce(max(attempts), 0) from jobs)::int as most_attempts
"""


def soak_checks(conn: psycopg.Connection) -> dict[str, Any]:
    """The figures `pgqw soak` checks (CHECKS_SQL), as one row of named values."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(CHECKS_SQL)
        row = cur.fetchone()
    assert row is not None
    return row


def soak_outcomes(conn: psycopg.Connection, *, invalid_ids: Sequence[uuid.UUID | str]) -> dict[str, Any]:
    """What happened in a soak (OUTCOMES_SQL): counts by outcome, no expectations. invalid_ids: the
    jobs the soak enqueued with an invalid listing (dead_invalid counts those that went dead)."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(OUTCOMES_SQL, {"invalid_ids": list(invalid_ids)})
        row = cur.fetchone()
    assert row is not None
    return row
