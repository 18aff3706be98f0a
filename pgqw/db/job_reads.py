"""Reads of jobs: one job, its attempts and result, the keyset-paged list and search, ids by prefix."""
from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import psycopg

from ._exec import _all, _column, _maybe, _maybe_async, _value
from .models import STATUSES, Attempt, Job, Page, Result

GET_JOB_SQL = "select * from pgqw.jobs where id = %(job_id)s::uuid"


GET_ATTEMPTS_SQL = "select * from pgqw.job_attempts where job_id = %(job_id)s::uuid order by attempt"


def get_job(conn: psycopg.Connection, *, job_id: uuid.UUID | str) -> Job | None:
    return _maybe(conn, Job, GET_JOB_SQL, {"job_id": job_id})


async def get_job_async(conn: psycopg.AsyncConnection, *, job_id: uuid.UUID | str) -> Job | None:
    return await _maybe_async(conn, Job, GET_JOB_SQL, {"job_id": job_id})


def get_attempts(conn: psycopg.Connection, *, job_id: uuid.UUID | str) -> list[Attempt]:
    return _all(conn, Attempt, GET_ATTEMPTS_SQL, {"job_id": job_id})


RESULT_SQL = "select * from pgqw.job_results where job_id = %(job_id)s::uuid"


# A job's status with its result, if any: pgqw.client tells a job not finished from one whose handler returned None.
JOB_RESULT_SQL = "select * from pgqw.get_job_result(%(job_id)s::uuid)"


def get_result(conn: psycopg.Connection, *, job_id: uuid.UUID | str) -> Result | None:
    return _maybe(conn, Result, RESULT_SQL, {"job_id": job_id})


def _newest_first(conditions: list[str], *, status_given: bool) -> str:
    """The statement of a job list or search: newest first, keyset pages, at most %(limit)s rows.

    Every shape reads ranges of jobs_status_created_idx (status, created_at desc, id desc): with a
    status, its one range; without, one range per status (a branch each, the statuses being fixed
    constants), each stopped after the limit and merged in the index's order (a Merge Append), so a
    page reads at most limit rows per status. The cursor is a row comparison each range starts from. No
    sort, no sequential scan, and no index of created_at alone, which every write of a job would keep."""
    where = " and ".join(conditions)
    if status_given:
        return ("select * from pgqw.jobs" + (" where " + where if where else "")  # fixed fragments only
                + " order by created_at desc, id desc limit %(limit)s::integer")
    branches = " union all ".join(
        f"(select * from pgqw.jobs where status = '{status}'" + (" and " + where if where else "")
        + " order by created_at desc, id desc limit %(limit)s::integer)"
        for status in STATUSES)
    return f"select * from ({branches}) j order by created_at desc, id desc limit %(limit)s::integer"


_AFTER = "(created_at, id) < (%(after_at)s::timestamptz, %(after_id)s::uuid)"
# The job list's four shapes (status filter?, cursor?), one statement text each.
_LIST_JOBS_SQL: dict[tuple[bool, bool], str] = {
    (by_status, paged): _newest_first((["status = %(status)s::text"] if by_status else [])
                                      + ([_AFTER] if paged else []), status_given=by_status)
    for by_status in (False, True) for paged in (False, True)
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
    found = _all(conn, Job, _LIST_JOBS_SQL[status is not None, after is not None], params)
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
    plan = _value(conn, "explain (format json) " + _LIST_JOBS_SQL[status is not None, after is not None], params)
    return plan[0]["Plan"]


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
        where.append(_AFTER)
    found = _all(conn, Job, _newest_first(where, status_given=status is not None), params)
    more = len(found) > limit
    found = found[:limit]
    return Page(jobs=found, next_cursor=(found[-1].created_at, found[-1].id) if more and found else None)


def find_job_ids_by_prefix(conn: psycopg.Connection, *, prefix: str, limit: int = 6) -> list[uuid.UUID]:
    """The ids of the jobs whose id starts with prefix (hex, dashes ignored), smallest first, at most
    limit of them. The prefix padded with 0s and with fs bounds a range of the primary key's index,
    so the lookup reads only the matching entries, never the table."""
    digits = prefix.replace("-", "").lower()
    if not 1 <= len(digits) <= 32 or any(c not in "0123456789abcdef" for c in digits):
        raise ValueError(f"a job id prefix is 1 to 32 hex digits, got {prefix!r}")
    return _column(conn, "select id from pgqw.jobs where id >= %(low)s::uuid and id <= %(high)s::uuid"
                   " order by id limit %(limit)s::integer",
                   {"low": digits.ljust(32, "0"), "high": digits.ljust(32, "f"), "limit": limit})
