"""Reports: queue_stats (the metrics), the report_* functions, the console's throughput."""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from ._exec import _all, _one, _value
from .models import ConcurrencyRow, DoubleRuns, LatestJob, Stat, Throughput, ThroughputCount, TimelineRow


@dataclass
class _StatusCount:
    status: str
    jobs: float


@dataclass
class _Body:
    body: str
    config: list[str]


@dataclass
class _Window:
    since: datetime
    until: datetime


def queue_stats(conn: psycopg.Connection) -> list[Stat]:
    return _all(conn, Stat, "select * from pgqw.queue_stats()")


def count_by_status(conn: psycopg.Connection) -> dict[str, int]:
    """Jobs per status, every status present (zero when none): queue_stats()'s jobs summed over the
    queues (count_jobs_by_status), so it costs what the waiting and running jobs cost, and a finished
    status of a queue above 10,000 jobs is the planner's estimate (see db/functions/queue_stats.sql)."""
    return {c.status: round(c.jobs) for c in _all(conn, _StatusCount, "select * from pgqw.count_jobs_by_status()")}


def report_timeline(conn: psycopg.Connection, *, job_id: uuid.UUID | str) -> list[TimelineRow]:
    return _all(conn, TimelineRow, "select * from pgqw.report_timeline(%(job_id)s::uuid)", {"job_id": job_id})


def report_concurrency(conn: psycopg.Connection, *, prefix: str = "") -> list[ConcurrencyRow]:
    return _all(conn, ConcurrencyRow, "select * from pgqw.report_concurrency(%(prefix)s::text)", {"prefix": prefix})


def report_double_runs(conn: psycopg.Connection, *, prefix: str = "") -> DoubleRuns:
    return _one(conn, DoubleRuns, "select * from pgqw.report_double_runs(%(prefix)s::text)", {"prefix": prefix})


def report_latest_jobs(conn: psycopg.Connection, *, limit: int = 20) -> list[LatestJob]:
    return _all(conn, LatestJob, "select * from pgqw.report_latest_jobs(%(limit)s::integer)", {"limit": limit})


_THROUGHPUT_SQL = "select * from pgqw.queue_throughput(%(since)s::timestamptz, %(until)s::timestamptz, %(buckets)s::integer)"
# queue_throughput's parameters as explain_throughput writes them into the function's body.
_THROUGHPUT_PARAMS = {"p_since": "%(since)s::timestamptz", "p_until": "%(until)s::timestamptz",
                      "p_buckets": "%(buckets)s::integer"}


def _throughput_window(conn: psycopg.Connection, minutes: int) -> tuple[datetime, datetime]:
    window = _one(conn, _Window, "select now() - make_interval(mins => %(minutes)s::integer) as since, now() as until",
                  {"minutes": minutes})
    return window.since, window.until


def throughput(conn: psycopg.Connection, *, minutes: int = 60, buckets: int = 60) -> Throughput:
    """Jobs that finished (succeeded or dead) per queue over the last `minutes`, in `buckets` equal
    buckets ending now."""
    since, until = _throughput_window(conn, minutes)
    counts = _all(conn, ThroughputCount, _THROUGHPUT_SQL, {"since": since, "until": until, "buckets": buckets})
    return Throughput(since=since, until=until, buckets=buckets, counts=counts)


def explain_throughput(conn: psycopg.Connection, *, minutes: int = 60, buckets: int = 60) -> dict[str, Any]:
    """The plan (EXPLAIN (format json), its "Plan" node) of the statement throughput's function runs: an
    EXPLAIN of a function call shows only the call, so this explains queue_throughput's own body (its
    text in pg_proc) with this call's values, its tables found through the function's pinned search_path
    (set for this statement alone: the caller's is put back)."""
    since, until = _throughput_window(conn, minutes)
    fn = _one(conn, _Body, "select p.prosrc as body, p.proconfig as config from pg_proc p"
              " where p.oid = 'pgqw.queue_throughput(timestamptz, timestamptz, integer)'::regprocedure")
    statement = re.sub(r"\bp_[a-z]+\b", lambda m: _THROUGHPUT_PARAMS[m[0]],
                       fn.body.replace("%", "%%").strip().rstrip(";"))
    path = next(c.split("=", 1)[1] for c in fn.config if c.startswith("search_path="))
    with conn.transaction():
        kept = _value(conn, "select current_setting('search_path')")
        _value(conn, "select set_config('search_path', %(path)s::text, true)", {"path": path})
        plan = _value(conn, "explain (format json) " + statement, {"since": since, "until": until, "buckets": buckets})
        _value(conn, "select set_config('search_path', %(path)s::text, true)", {"path": kept})
    return plan[0]["Plan"]
