"""What the resources and the request bodies share: the database's lists (the enums), the limits of
the request bodies (each with the SQL function's own it matches), and the JSON Schema of an enum."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from pydantic import WithJsonSchema

from pgqw import db

# The database's lists (tests/api/test_openapi.py compares each with the constraint it names).
STATUSES: tuple[str, ...] = tuple(db.STATUSES)  # the job_status domain (jobs_status_check)
OUTCOMES: tuple[str, ...] = tuple(db.OUTCOMES)  # the attempt_outcome domain (job_attempts_outcome_check)
CATCH_UP = ("latest", "all", "none")  # schedules_catch_up_check
SOURCES = ("code", "sql")  # schedules_source_check
# The statuses cancel_jobs takes (its p_statuses): those a job can be cancelled from in bulk.
CANCELLABLE = ("blocked", "pending", "failed", "processing")

# Limits of the request bodies, with the SQL functions' own (each says where).
QUEUE_MAX = 100
PRIORITY_MIN, PRIORITY_MAX = -(2**31), 2**31 - 1  # the range of jobs.priority (integer)
RATE_MAX = 1_000_000  # jobs per second: what set_queue_rate accepts (with at most 6 decimal places)
MAX_ATTEMPTS_MAX = 1000
# When a job may start: from the epoch (earlier means "now" anyway) to a year ahead, whether given as
# runAt or as delayMs. enqueue_job and enqueue_jobs refuse the same over SQL (QV400), so the HTTP
# limits and the SQL limits are one rule (db/functions/enqueue_job.sql).
RUN_AT_MIN = datetime(1970, 1, 1, tzinfo=timezone.utc)
AHEAD_MAX = timedelta(days=366)
DELAY_MAX_MS = AHEAD_MAX // timedelta(milliseconds=1)
TIMEOUT_MAX_MS = 2**31 - 1  # jobs.timeout_ms is an integer (enqueue_job's p_timeout_ms)
DEPENDS_ON_MAX = 1000  # parents of one job: enqueue_job refuses more (QW422)
BATCH_MAX = 10_000  # jobs of one batch: enqueue_jobs' own limit (QV400)
KEY_MAX = 200  # a serial or concurrency key: jobs_serial_key_form, jobs_concurrency_key_form
ERROR_FILTER_MAX = 1000  # the text a bulk action looks for in lastError


def _enum(values: tuple[str, ...], nullable: bool = False, **extra: Any) -> WithJsonSchema:
    schema: dict[str, Any] = {"type": ["string", "null"] if nullable else "string",
                              "enum": [*values, None] if nullable else list(values), **extra}
    return WithJsonSchema(schema)
