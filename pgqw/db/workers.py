"""Workers: register (the heartbeat of presence), stop, and the lists the console shows."""
from __future__ import annotations

from datetime import datetime
from typing import NamedTuple, Sequence

import psycopg

from ._exec import _all, _maybe, _one, _value
from .models import Worker, WorkerStatus


def register_worker(conn: psycopg.Connection, *, worker_id: str, task_types: Sequence[str],
                    queues: Sequence[str] | None = None, concurrency: int | None = None,
                    hostname: str | None = None, pid: int | None = None, ttl_ms: int = 30000,
                    waits_for_jobs: bool = True) -> Worker:
    """waits_for_jobs: this worker calls wait_for_jobs before it waits (as pgqw's worker does); False: producers
    notify it of every queue while it is alive (a worker that waits without saying so)."""
    return _one(conn, Worker, "select * from pgqw.register_worker(%(id)s::text, %(types)s::text[], %(queues)s::text[],"
                " %(concurrency)s::integer, %(hostname)s::text, %(pid)s::integer, %(ttl)s::integer,"
                " %(waits)s::boolean)",
                {"id": worker_id, "types": list(task_types), "queues": list(queues) if queues else None,
                 "concurrency": concurrency, "hostname": hostname, "pid": pid, "ttl": ttl_ms,
                 "waits": waits_for_jobs})


def stop_worker(conn: psycopg.Connection, *, worker_id: str) -> Worker | None:
    return _maybe(conn, Worker, "select * from pgqw.stop_worker(%(id)s::text)", {"id": worker_id})


class Waiting(NamedTuple):
    """wait_for_jobs' answer: until when the rows hold, and the id of a transaction begun once they were
    committed (waits_settled's argument)."""

    until: datetime
    xid: str


def wait_for_jobs(conn: psycopg.Connection, *, worker_id: str, queues: Sequence[str] | None = None,
                  for_ms: int = 60_000) -> Waiting:
    """This worker waits for a notification of its queues (None: of every queue) for for_ms: producers notify
    them from now on. conn must be in autocommit mode, so that the rows are committed before the next
    transaction id is taken: claim once more after waits_settled(xid) is true (docs/worker.md, "Producers
    notify only a worker that waits")."""
    if not conn.autocommit:
        raise ValueError("wait_for_jobs needs a connection in autocommit mode (its rows must commit first)")
    until = _value(conn, "select pgqw.wait_for_jobs(%(id)s::text, %(queues)s::text[], %(for_ms)s::integer)",
                   {"id": worker_id, "queues": list(queues) if queues else None, "for_ms": for_ms})
    return Waiting(until, settle_point(conn))


def settle_point(conn: psycopg.Connection) -> str:
    """A new transaction id, taken (and committed) now on an autocommit connection: every transaction that
    began before now has a lower one (waits_settled's argument)."""
    return str(_value(conn, "select pg_current_xact_id()::text"))


def waits_settled(conn: psycopg.Connection, *, xid: str) -> bool:
    """Every transaction with an id below xid (wait_for_jobs') has ended: a claim now sees their jobs."""
    return bool(_value(conn, "select pgqw.waits_settled(%(x)s::xid8)", {"x": xid}))


def list_workers(conn: psycopg.Connection) -> list[Worker]:
    """Every worker that registered, the live ones first (alive: expires_at in the future)."""
    return _all(conn, Worker, "select * from pgqw.workers order by (expires_at > now()) desc, last_seen_at desc, id")


def list_worker_status(conn: psycopg.Connection, *, limit: int = 200) -> list[WorkerStatus]:
    """The workers, the live ones first, then the gone ones most recently seen first; at most limit."""
    return _all(conn, WorkerStatus, "select * from pgqw.list_worker_status(%(limit)s::integer)", {"limit": limit})
