"""worker/maintenance/pruner.py: one prune_expired_jobs batch per round when due, by the database's retention, with an
injected clock."""
from __future__ import annotations

import threading

import psycopg

from pgqw import db
from pgqw.worker.loop import MainLoop
from pgqw.worker.maintenance.pruner import Pruner
from tests.helpers import rows
from tests.worker.parts import Direct, claimed, log, settings


def finished(conn: psycopg.Connection, status: str, days_ago: float) -> None:
    job = claimed(conn, max_attempts=1)
    if status == "succeeded":
        db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token)
    else:
        db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token, error="boom", retryable=False)
    conn.execute("update jobs set finished_at = now() - make_interval(secs => %s) where id = %s",
                 [days_ago * 86400, job.id])


def left(conn: psycopg.Connection) -> list[tuple[str, int]]:
    return [(r["status"], r["days"]) for r in rows(
        conn, "select status, round(extract(epoch from now() - finished_at) / 86400)::int as days"
              " from jobs order by status, finished_at")]


def test_pruner_takes_succeeded_after_7_days_and_dead_after_30_by_default(conn: psycopg.Connection) -> None:
    for status, days in [("succeeded", 8), ("succeeded", 6), ("dead", 31), ("dead", 29)]:
        finished(conn, status, days)
    now = [0.0]
    worker_log, out = log()
    pruner = Pruner(settings(), worker_log, Direct(conn).once, clock=lambda: now[0])
    assert pruner.prune() == 2   # the succeeded one past 7 days, the dead one past 30
    assert left(conn) == [("dead", 29), ("succeeded", 6)]
    assert pruner.prune() == 0   # not due until the interval passed
    now[0] = 59.9
    assert pruner.prune() == 0 and pruner.next_prune == 60.0
    assert out.lines("pruned") == ["2 finished jobs past their retention"]


def test_pruner_takes_one_batch_per_round_until_a_short_one(conn: psycopg.Connection) -> None:
    for _ in range(5):
        finished(conn, "succeeded", 10)
    finished(conn, "dead", 40)
    now = [100.0]
    pruner = Pruner(settings(prune_batch=2), log()[0], Direct(conn).once, clock=lambda: now[0])
    assert [pruner.prune() for _ in range(5)] == [2, 2, 2, 0, 0]  # the succeeded first, then the dead one
    assert left(conn) == []


def test_pruner_ages_come_from_the_database(conn: psycopg.Connection) -> None:
    finished(conn, "succeeded", 2)
    finished(conn, "dead", 2)
    conn.execute("update queue_settings set prune_succeeded_after = interval '1 day',"
                 " prune_finished_after = interval '3 days'")
    pruner = Pruner(settings(), log()[0], Direct(conn).once, clock=lambda: 0.0)
    assert pruner.prune() == 1
    assert left(conn) == [("dead", 2)]


class Nothing:
    def claim(self) -> list:
        return []

    def sweep(self) -> list:
        return []


class Failing:
    def __init__(self) -> None:
        self.calls = 0

    def prune(self) -> int:
        self.calls += 1
        raise psycopg.errors.UndefinedFunction("function prune_jobs does not exist")


def test_loop_prunes_after_the_claim_and_a_failure_backs_off_once(conn: psycopg.Connection) -> None:
    worker_log, out = log()
    pruner = Failing()
    claimer = Nothing()
    loop = MainLoop(settings(), claimer, Nothing(), Direct(conn), worker_log, wake=threading.Event(),
                    stopping=threading.Event(), clock=lambda: 0.0, pruner=pruner)  # type: ignore[arg-type]
    assert loop.step() == (0.1, True)
    assert out.lines("error")[0].startswith("prune: UndefinedFunction")
    assert pruner.calls == 1


def test_loop_runs_the_pruner_each_round_and_not_while_stopping(conn: psycopg.Connection) -> None:
    finished(conn, "succeeded", 8)
    now = [0.0]
    stopping = threading.Event()
    pruner = Pruner(settings(), log()[0], Direct(conn).once, clock=lambda: now[0])
    loop = MainLoop(settings(), Nothing(), Nothing(), Direct(conn), log()[0], wake=threading.Event(),  # type: ignore[arg-type]
                    stopping=stopping, clock=lambda: now[0], pruner=pruner)
    stopping.set()
    loop.step()
    assert len(left(conn)) == 1
    stopping.clear()
    assert loop.step() == (1.0, False)
    assert left(conn) == []
