"""The raw ceiling: what PostgreSQL on this machine does with the plainest possible queue.

A bare table (id, status, run_at, payload) with a partial index on ready rows, the textbook SKIP
LOCKED claim, and completion with a plain update; one job per transaction, or 100 per statement
completed with `= any($1)`. Our queue is judged against these figures, measured in the same run.
"""
from __future__ import annotations

import time
from typing import Callable

import psycopg
from psycopg.types.json import Jsonb

from .common import connect

TABLE = "bench_raw_jobs"
CHANNEL = "bench_raw"

DDL = f"""
create table if not exists {TABLE} (
    id       bigint generated always as identity primary key,
    status   text not null default 'pending',
    run_at   timestamptz not null default now(),
    payload  jsonb not null default '{{}}'::jsonb
);
create index if not exists {TABLE}_ready_idx on {TABLE} (run_at, id) where status = 'pending';
"""

CLAIM_ONE = (
    f"update {TABLE} set status = 'running'"
    f" where id = (select id from {TABLE} where status = 'pending' and run_at <= now()"
    f"              order by run_at, id limit 1 for update skip locked)"
    f" returning id"
)
CLAIM_MANY = (
    f"update {TABLE} set status = 'running'"
    f" where id = any (array(select id from {TABLE} where status = 'pending' and run_at <= now()"
    f"                       order by run_at, id limit %s for update skip locked))"
    f" returning id"
)
COMPLETE_ONE = f"update {TABLE} set status = 'succeeded' where id = %s"
COMPLETE_MANY = f"update {TABLE} set status = 'succeeded' where id = any (%s)"
INSERT_ONE = f"insert into {TABLE} (payload) values (%s)"
INSERT_MANY = f"insert into {TABLE} (payload) select unnest(%s::jsonb[])"
# The latency baseline: an insert that wakes a listener, and a claim that says when it ran.
INSERT_NOTIFY = (
    f"with i as (insert into {TABLE} (payload) values (%s) returning id)"
    f" select pg_notify('{CHANNEL}', '') from i"
)
CLAIM_ONE_TIMED = (
    f"update {TABLE} set status = 'running'"
    f" where id = (select id from {TABLE} where status = 'pending' and run_at <= now()"
    f"              order by run_at, id limit 1 for update skip locked)"
    f" returning extract(epoch from now() - run_at) * 1000.0"
)


def create(conn: psycopg.Connection) -> None:
    conn.execute(DDL)


def reset(conn: psycopg.Connection) -> None:
    conn.execute(f"truncate {TABLE} restart identity")


def load(conn: psycopg.Connection, n: int) -> None:
    """n ready jobs, then ANALYZE (what autovacuum would do; see docs/benchmarks.md)."""
    conn.execute(f"insert into {TABLE} (payload) select '{{}}'::jsonb from generate_series(1, %s)", [n])
    conn.execute(f"analyze {TABLE}")


def load_finished(conn: psycopg.Connection, n: int) -> None:
    conn.execute(f"insert into {TABLE} (status, payload) select 'succeeded', '{{}}'::jsonb"
                 f" from generate_series(1, %s)", [n])


# ----------------------------------------------------------------------------- client processes


def claim_client(dsn: str, batch: int, limit: int | None = None) -> Callable[[], int]:
    """Claims and completes until the table has no ready job (or `limit` jobs are done)."""
    conn = connect(dsn)

    def work() -> int:
        done = 0
        with conn:
            if batch == 1:
                while limit is None or done < limit:
                    row = conn.execute(CLAIM_ONE).fetchone()
                    if row is None:
                        break
                    conn.execute(COMPLETE_ONE, [row[0]])
                    done += 1
            else:
                while limit is None or done < limit:
                    ids = [r[0] for r in conn.execute(CLAIM_MANY, [batch]).fetchall()]
                    if not ids:
                        break
                    conn.execute(COMPLETE_MANY, [ids])
                    done += len(ids)
        return done

    return work


def insert_client(dsn: str, n: int, batch: int) -> Callable[[], int]:
    conn = connect(dsn)

    def work() -> int:
        with conn:
            if batch == 1:
                for i in range(n):
                    conn.execute(INSERT_ONE, [Jsonb({"n": i})])
            else:
                for start in range(0, n, batch):
                    conn.execute(INSERT_MANY, [[Jsonb({"n": i}) for i in range(start, min(n, start + batch))]])
        return n

    return work


def empty_claim_ms(conn: psycopg.Connection, probes: int) -> list[float]:
    """Times claims that find nothing, one after the other, on one connection."""
    found = []
    for _ in range(probes):
        t0 = time.perf_counter()
        row = conn.execute(CLAIM_ONE).fetchone()
        found.append((time.perf_counter() - t0) * 1000.0)
        assert row is None, "the raw table was expected to be empty"
    return found
