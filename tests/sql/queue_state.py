"""Every row of the queue's tables, to prove that a refused call changed nothing.

tests.helpers.snapshot predates task types, workers and results; this one also covers job_results
(bytes as a digest), task_types and workers, the tables a result, a registration or a presence
would change.
"""
from __future__ import annotations

from typing import Any

import psycopg

from tests.helpers import rows


def snapshot(conn: psycopg.Connection) -> list[Any]:
    return [
        rows(conn, "select * from jobs order by id"),
        rows(conn, "select * from job_attempts order by job_id, attempt"),
        rows(conn, "select job_id, content_type, value, md5(data) as data_md5, created_at"
                   " from job_results order by job_id"),
        rows(conn, "select * from task_types order by name"),
        rows(conn, "select * from workers order by id"),
        rows(conn, "select * from queue_settings"),
    ]


def results_only_for_succeeded_jobs(conn: psycopg.Connection) -> None:
    """A result exists only with a success: no job_results row of a job in any other status."""
    strays = rows(conn, "select r.job_id, j.status from job_results r join jobs j on j.id = r.job_id"
                        " where j.status <> 'succeeded'")
    assert strays == [], f"results of jobs that did not succeed: {strays}"
