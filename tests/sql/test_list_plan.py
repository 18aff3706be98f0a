"""The job list reads an index range at a realistic size: the plan of exactly the statement list_jobs
runs (db.explain_list_jobs), first page and later pages, with and without a status filter."""
from __future__ import annotations

from typing import Any, Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from pgqw import db

JOBS = 100_000


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


def _scans(plan: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(n["Node Type"], n.get("Index Name")) for n in _nodes(plan)]


@pytest.fixture(scope="module")
def big_conn(pg_server: str, _copies: Any) -> Iterator[psycopg.Connection]:
    """A database of this module's own with 100k jobs of every status over about a month, analyzed,
    made once for the module's tests, which only read it (one changes it inside a transaction it rolls
    back). Inserted as the owner (the test's superuser), in one statement; the table's own rules still
    hold."""
    name = _copies.take()
    with psycopg.connect(make_conninfo(pg_server, dbname=name), autocommit=True) as conn:
        yield _fill(conn)
    _copies.give_back(name)


def _fill(conn: psycopg.Connection) -> psycopg.Connection:
    conn.execute(
        """
        insert into jobs (type, payload, status, attempts, max_attempts, last_error, run_at, created_at,
                          started_at, finished_at, locked_by, lease_expires_at, idempotency_key)
        select 'listing_flyer', '{}'::jsonb, s.status,
               case when s.status = 'pending' then 0 else 1 end, 5,
               case when s.status in ('failed', 'dead') then 'boom' end,
               s.created_at, s.created_at,
               case when s.status <> 'pending' then s.created_at end,
               case when s.status in ('succeeded', 'dead') then s.created_at end,
               case when s.status = 'processing' then 'w1' end,
               case when s.status = 'processing' then s.created_at + interval '1 minute' end,
               'plan-' || s.n
          from (select n, now() - n * interval '25 seconds' as created_at,
                       (array['succeeded', 'succeeded', 'succeeded', 'succeeded', 'succeeded', 'succeeded',
                              'pending', 'processing', 'failed', 'dead'])[1 + mod(n, 10)] as status
                  from generate_series(1, %(n)s::integer) as n) as s
        """,
        {"n": JOBS},
    )
    conn.execute("analyze jobs")
    return conn


def _cursor(conn: psycopg.Connection, status: str | None) -> tuple[Any, Any]:
    """The cursor of page 3 of 20, as the API hands it on."""
    page = db.list_jobs(conn, status=status, limit=20)
    for _ in range(2):
        assert page.next_cursor is not None
        page = db.list_jobs(conn, status=status, limit=20, after=page.next_cursor)
    assert page.next_cursor is not None
    return page.next_cursor


@pytest.mark.parametrize("paged", [False, True], ids=["first_page", "later_page"])
def test_list_jobs_unfiltered_merges_a_range_of_each_status(big_conn: psycopg.Connection, paged: bool) -> None:
    after = _cursor(big_conn, None) if paged else None
    plan = db.explain_list_jobs(big_conn, limit=20, after=after)
    scans = _scans(plan)
    assert plan["Node Type"] == "Limit" and plan["Plans"][0]["Node Type"] == "Merge Append", scans
    assert [s for s in scans if s[0] not in ("Limit", "Merge Append")] == (
        [("Index Scan", "jobs_status_created_idx")] * len(db.STATUSES)), scans
    assert not {"Sort", "Incremental Sort", "Seq Scan", "Bitmap Heap Scan"} & {node for node, _ in scans}, scans


@pytest.mark.parametrize("paged", [False, True], ids=["first_page", "later_page"])
@pytest.mark.parametrize("status", ["succeeded", "dead"])
def test_list_jobs_by_status_is_a_range_of_an_index(big_conn: psycopg.Connection, paged: bool,
                                                    status: str) -> None:
    after = _cursor(big_conn, status) if paged else None
    plan = db.explain_list_jobs(big_conn, status=status, limit=20, after=after)
    scans = _scans(plan)
    assert ("Index Scan", "jobs_status_created_idx") in scans, scans
    assert not {"Sort", "Incremental Sort", "Seq Scan", "Bitmap Heap Scan"} & {node for node, _ in scans}, scans


def test_list_jobs_pages_follow_the_index_order(big_conn: psycopg.Connection) -> None:
    # The statements the plans are of return what they did before: newest first, no row twice or missed.
    seen: list[Any] = []
    after = None
    for _ in range(3):
        page = db.list_jobs(big_conn, limit=50, after=after)
        seen += [(j.created_at, j.id) for j in page.jobs]
        after = page.next_cursor
    assert seen == sorted(seen, reverse=True) and len(set(seen)) == 150
    expected = [tuple(r) for r in big_conn.execute(
        "select created_at, id from jobs order by created_at desc, id desc limit 150")]
    assert seen == expected


def test_report_latest_jobs_merges_the_statuses_into_the_newest_jobs(big_conn: psycopg.Connection) -> None:
    # One range of jobs_status_created_idx per status present, merged: the same rows as the whole table
    # sorted, at any limit; and no rows of an empty table.
    for limit in (1, 20, 1000):
        found = [r[0] for r in big_conn.execute("select id from report_latest_jobs(%s)", [limit])]
        expected = [r[0] for r in big_conn.execute(
            "select id from jobs order by created_at desc, id desc limit %s", [limit])]
        assert found == expected and len(found) == limit
    with big_conn.transaction(force_rollback=True):
        big_conn.execute("delete from jobs")
        assert big_conn.execute("select count(*) from report_latest_jobs(20)").fetchone() == (0,)
