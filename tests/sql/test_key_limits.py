"""Per-key limits (set_queue_key_limit, enqueue_job's p_concurrency_key): at most key_max_running jobs of one
(queue, concurrency_key) processing at once, across claims racing in several sessions; a claim passes over a
saturated key to another key's job; so one tenant with a thousand jobs enqueued first does not hold up nine
tenants with ten each."""
from __future__ import annotations

import random
import threading
import time
import uuid
from collections import defaultdict
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.helpers import one, rows


def fill(conn: psycopg.Connection, queue: str, key: str | None, n: int, priority: int = 0) -> None:
    elements = [{"type": "t", "payload": {"key": key, "n": i}, "idempotency_key": f"{queue}-{key}-{i}-{uuid.uuid4()}",
                 "queue": queue, "priority": priority, **({"concurrency_key": key} if key is not None else {})}
                for i in range(n)]
    conn.execute("select count(*) from enqueue_jobs(%s::jsonb)", [Jsonb(elements)])


def key_limit(conn: psycopg.Connection, queue: str, n: int | None, create: bool = True) -> dict[str, Any]:
    return one(conn, "select * from set_queue_key_limit(%s, %s, %s)", [queue, n, create])


def claim(conn: psycopg.Connection, limit: int = 100, worker: str = "w",
          queues: list[str] | None = None) -> list[dict[str, Any]]:
    return rows(conn, "select (c.job).*, c.lease_token from claim_jobs(%s, %s, %s::text[]) c", [worker, limit, queues])


def succeed(conn: psycopg.Connection, claimed: dict[str, Any]) -> None:
    conn.execute("select * from mark_succeeded(%s, %s)", [claimed["id"], claimed["lease_token"]])


def running_by_key(conn: psycopg.Connection, queue: str) -> dict[str | None, int]:
    return {r["concurrency_key"]: r["n"] for r in rows(
        conn, "select concurrency_key, count(*) as n from jobs where status = 'processing' and queue = %s"
              " group by concurrency_key", [queue])}


def keys_of(found: list[dict[str, Any]]) -> dict[str | None, int]:
    counts: dict[str | None, int] = defaultdict(int)
    for j in found:
        counts[j["concurrency_key"]] += 1
    return dict(counts)


def attempt_peaks_by_key(conn: psycopg.Connection, queue: str) -> dict[str, int]:
    """Most attempts open at once per key, from job_attempts' own timestamps (a finish at an instant before
    a start at it). A claim's started_at is when it began, before it waited for the queue's row: only claims
    that never wait for a finish (rounds of claims between rounds of finishes) give true peaks."""
    events: dict[str, list[tuple[Any, int]]] = defaultdict(list)
    for a in rows(conn, "select j.concurrency_key, a.started_at, coalesce(a.finished_at, '9000-01-01') as finished_at"
                        " from job_attempts a join jobs j on j.id = a.job_id where j.queue = %s", [queue]):
        events[a["concurrency_key"]] += [(a["started_at"], 1), (a["finished_at"], -1)]
    peaks = {}
    for key, found in events.items():
        now = peak = 0
        for _, delta in sorted(found):
            now += delta
            peak = max(peak, now)
        peaks[key] = peak
    return peaks


def test_set_queue_key_limit_sets_and_removes_the_limit(conn: psycopg.Connection) -> None:
    got = key_limit(conn, "q", 2)
    assert (got["name"], got["key_max_running"]) == ("q", 2)
    assert got["max_running"] is None  # the queue's own limit is another setting
    assert key_limit(conn, "q", 5, create=False)["key_max_running"] == 5
    assert key_limit(conn, "q", None, create=False)["key_max_running"] is None
    assert one(conn, "select key_max_running from queues where name = 'q'")["key_max_running"] is None


@pytest.mark.parametrize("call, code", [
    ("select * from set_queue_key_limit('never-seen', 2)", "QU404"),
    ("select * from set_queue_key_limit(null, 2, true)", "QV400"),
    ("select * from set_queue_key_limit('', 2, true)", "QV400"),
    ("select * from set_queue_key_limit('  ', 2, true)", "QV400"),
    ("select * from set_queue_key_limit(repeat('q', 101), 2, true)", "QV400"),
    ("select * from set_queue_key_limit('q', 0, true)", "QV400"),
    ("select * from set_queue_key_limit('q', -1, true)", "QV400"),
])
def test_set_queue_key_limit_bad_input_is_refused_and_changes_nothing(conn: psycopg.Connection, call: str,
                                                                      code: str) -> None:
    key_limit(conn, "q", 3)
    before = rows(conn, "select * from queues order by name")
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(call)
    assert exc.value.sqlstate == code
    assert rows(conn, "select * from queues order by name") == before


def test_key_limits_cap_each_key_and_leave_other_queues_alone(conn: psycopg.Connection) -> None:
    fill(conn, "lim", "a", 5, priority=5)
    fill(conn, "lim", "b", 3)
    fill(conn, "free", "a", 3)
    key_limit(conn, "lim", 2)
    got = claim(conn)
    assert keys_of([j for j in got if j["queue"] == "lim"]) == {"a": 2, "b": 2}
    assert keys_of([j for j in got if j["queue"] == "free"]) == {"a": 3}  # the limit is per (queue, key)
    assert claim(conn) == []
    succeed(conn, next(j for j in got if j["queue"] == "lim" and j["concurrency_key"] == "a"))
    assert keys_of(claim(conn)) == {"a": 1}
    assert running_by_key(conn, "lim") == {"a": 2, "b": 2}
    key_limit(conn, "lim", None)
    assert keys_of(claim(conn)) == {"a": 2, "b": 1}


def test_key_limits_a_claim_passes_over_a_saturated_key(conn: psycopg.Connection) -> None:
    """Claims of one job each: the saturated key's jobs come first in the claim order, yet the third claim
    takes the other key's job rather than nothing."""
    fill(conn, "lim", "big", 10, priority=5)
    fill(conn, "lim", "small", 1)
    key_limit(conn, "lim", 2)
    taken = [claim(conn, limit=1) for _ in range(4)]
    assert [keys_of(t) for t in taken] == [{"big": 1}, {"big": 1}, {"small": 1}, {}]


def test_key_limits_one_claim_fills_its_limit_from_other_keys(conn: psycopg.Connection) -> None:
    """A claim of 4 where the first key in claim order can take only 2: the other 2 places go to the next
    key's jobs, in the same claim."""
    fill(conn, "lim", "big", 10, priority=5)
    fill(conn, "lim", "small", 5)
    key_limit(conn, "lim", 2)
    assert keys_of(claim(conn, limit=4)) == {"big": 2, "small": 2}
    assert keys_of(claim(conn, limit=4)) == {}


def test_key_limits_a_claim_waiting_for_another_sees_its_claims(connect) -> None:
    """Step by step: A claims 2 of key k in an open transaction. B claims meanwhile (it may wait for A):
    once A has committed, B has taken none of k, only the other key's jobs."""
    setup = connect()
    fill(setup, "lim", "k", 6, priority=5)
    fill(setup, "lim", "other", 2)
    key_limit(setup, "lim", 2)
    a, b = connect(autocommit=False), connect(autocommit=False)
    assert keys_of(claim(a, limit=2, worker="A")) == {"k": 2}
    got: dict[str, Any] = {}
    t = threading.Thread(target=lambda: got.setdefault("b", claim(b, worker="B")), daemon=True)
    t.start()
    while t.is_alive():  # until B returns or waits for A's locks
        if one(setup, "select cardinality(pg_blocking_pids(%s)) > 0 as w", [b.info.backend_pid])["w"]:
            break
        t.join(0.005)
    a.commit()
    t.join(30)
    assert not t.is_alive()
    b.commit()
    assert keys_of(got["b"]) == {"other": 2}
    assert running_by_key(setup, "lim") == {"k": 2, "other": 2}


def test_key_limits_hold_under_claims_racing_in_many_sessions(connect) -> None:
    """Rounds of 6 sessions, each claiming 2 to 6 jobs in its own transaction at the same moment (a barrier)
    from a queue of four keys limited to 2 each; between rounds some jobs finish. Each session counts inside
    its transaction and each round after all commits: never more than 2 of a key; the attempt history's
    peak per key is 2."""
    setup = connect()
    limit, sessions_n, rounds = 2, 6, 8
    for key in ("k1", "k2", "k3", "k4"):
        fill(setup, "lim", key, 20)
    key_limit(setup, "lim", limit)
    sessions = [connect(autocommit=False) for _ in range(sessions_n)]
    rng = random.Random(11)
    errors: list[BaseException] = []
    lock = threading.Lock()
    held: list[dict[str, Any]] = []
    seen_inside: list[int] = []

    def run(i: int, barrier: threading.Barrier, size: int) -> None:
        s = sessions[i]
        try:
            barrier.wait(timeout=30)
            got = claim(s, limit=size, worker=f"w{i}")
            inside = max(running_by_key(s, "lim").values(), default=0)
            s.commit()
            with lock:
                held.extend(got)
                seen_inside.append(inside)
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)
            s.rollback()

    for _ in range(rounds):
        barrier = threading.Barrier(sessions_n)
        threads = [threading.Thread(target=run, args=(i, barrier, rng.randint(2, 6))) for i in range(sessions_n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert errors == [] and not any(t.is_alive() for t in threads)
        assert max(running_by_key(setup, "lim").values()) <= limit
        done = rng.sample(held, k=rng.randint(1, len(held)))
        for job in done:
            succeed(setup, job)
        held[:] = [j for j in held if j not in done]
    assert max(seen_inside) <= limit
    assert attempt_peaks_by_key(setup, "lim") == {"k1": limit, "k2": limit, "k3": limit, "k4": limit}


def test_key_limits_nine_small_tenants_finish_before_the_big_one(connect) -> None:
    """One tenant's 1,000 jobs enqueued first, then nine tenants' 10 each, in a queue limited to 2 per key;
    4 workers (threads, each its own connection) claim and finish in a loop. Every small tenant's job
    finishes before the big tenant's last one, and long before: while the big tenant had at most 2 running,
    the others took the other places."""
    setup = connect()
    fill(setup, "fair", "big", 1000)
    for n in range(9):
        fill(setup, "fair", f"small-{n}", 10)
    key_limit(setup, "fair", 2)
    workers = 4
    sessions = [connect() for _ in range(workers)]
    barrier = threading.Barrier(workers)
    errors: list[BaseException] = []
    lock = threading.Lock()
    finished: list[str] = []  # the tenant of each job, in the order its success returned
    peaks: list[int] = []  # the most jobs of one key processing, seen after each claim
    deadline = time.monotonic() + 60

    def run(i: int) -> None:
        s = sessions[i]
        try:
            barrier.wait(timeout=30)
            while time.monotonic() < deadline:
                got = claim(s, limit=4, worker=f"w{i}", queues=["fair"])
                # What is running now, committed: job_attempts' started_at is when a claim began, before it
                # waited for the queue's row, so its intervals overlap where the claims did not.
                with lock:
                    peaks.append(max(running_by_key(s, "fair").values(), default=0))
                if not got:
                    if one(s, "select count(*) as n from jobs where status <> 'succeeded'")["n"] == 0:
                        return
                    continue
                for job in got:
                    succeed(s, job)
                    with lock:
                        finished.append(job["concurrency_key"])
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)
    assert errors == [] and not any(t.is_alive() for t in threads)
    assert len(finished) == 1090
    last_small = max(i for i, tenant in enumerate(finished) if tenant != "big")
    assert finished[-1] == "big"
    big_before = finished[:last_small].count("big")
    assert big_before < 500, f"{big_before} of the big tenant's jobs finished before the small tenants' last"
    ends = one(setup, "select max(finished_at) filter (where concurrency_key = 'big') as big,"
                      " max(finished_at) filter (where concurrency_key <> 'big') as small from jobs")
    assert ends["small"] < ends["big"]
    assert max(peaks) == 2
