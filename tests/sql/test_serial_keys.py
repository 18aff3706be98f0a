"""Serial keys (enqueue_job's p_serial_key): at most one job of a key processing at once, the jobs of a key
started in enqueue order whatever their priority or run_at; a failed job waiting for its retry keeps its
place, a dead or cancelled one lets the next go. Checked step by step, against the unique partial index
itself, and by four workers racing over 20 keys with random failures, from job_attempts' history."""
from __future__ import annotations

import random
import threading
import time
import uuid
from collections import defaultdict
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.helpers import one, rows

# How far an attempt's recorded start may precede the recorded end of the one before it (see the four
# workers' test): the time a claim takes from its start to its pick, with room for a busy machine. The
# exact checks there are the reads after each claim and the order the claims returned.
SLACK = timedelta(milliseconds=500)

CASTS = {"queue": "text", "priority": "integer", "run_at": "timestamptz", "max_attempts": "integer",
         "serial_key": "text", "concurrency_key": "text"}


def enqueue(conn: psycopg.Connection, key: str | None = None, **named: Any) -> dict[str, Any]:
    args = "".join(f", p_{name} => %({name})s::{CASTS[name]}" for name in named)
    return one(conn, f"select (e.job).*, e.created from enqueue_job('t', '{{}}'::jsonb, %(key)s{args}) e",
               {"key": key or f"k-{uuid.uuid4()}", **named})


def claim(conn: psycopg.Connection, limit: int = 100, worker: str = "w", ahead: str = "0") -> list[dict[str, Any]]:
    """claim_jobs_at as of now() + ahead (an interval)."""
    return rows(conn, "select (c.job).*, c.lease_token from claim_jobs_at(now() + %s::interval, %s, %s) c",
                [ahead, worker, limit])


def succeed(conn: psycopg.Connection, claimed: dict[str, Any]) -> None:
    conn.execute("select * from mark_succeeded(%s, %s)", [claimed["id"], claimed["lease_token"]])


def fail(conn: psycopg.Connection, claimed: dict[str, Any], retryable: bool = True, base_ms: int = 0) -> str:
    return one(conn, "select (m.job).status from mark_failed(%s, %s, 'boom', %s, %s, 0) m",
               [claimed["id"], claimed["lease_token"], retryable, base_ms])["status"]


def ids(found: list[dict[str, Any]]) -> list[Any]:
    return [j["id"] for j in found]


def test_serial_keys_one_job_of_a_key_at_a_time_in_enqueue_order(conn: psycopg.Connection) -> None:
    # Later jobs of the key have a higher priority: the key's order is still the enqueue order.
    jobs = [enqueue(conn, serial_key="acct-1", priority=n) for n in range(4)]
    free, other = enqueue(conn, priority=-1), enqueue(conn, serial_key="acct-2")
    assert all(j["serial_key"] == "acct-1" for j in jobs) and other["serial_key"] == "acct-2"
    seqs = [j["serial_seq"] for j in jobs]
    assert seqs == sorted(seqs) and len(set(seqs)) == 4
    got = claim(conn)
    assert sorted(ids(got), key=str) == sorted([jobs[0]["id"], free["id"], other["id"]], key=str)
    head = next(j for j in got if j["id"] == jobs[0]["id"])
    for n in range(1, 4):
        assert claim(conn) == []  # the next waits while the one before it runs
        succeed(conn, head)
        [head] = claim(conn)
        assert head["id"] == jobs[n]["id"], f"step {n}"
    succeed(conn, head)
    assert claim(conn) == []


def test_serial_keys_a_later_job_waits_for_an_earlier_one_not_yet_due(conn: psycopg.Connection) -> None:
    head = enqueue(conn, serial_key="k", run_at=one(conn, "select now() + interval '1 hour' as t")["t"])
    ready = enqueue(conn, serial_key="k")
    assert claim(conn) == []  # ready is due, but the job before it is not
    [got] = claim(conn, ahead="2 hours")
    assert got["id"] == head["id"]
    succeed(conn, got)
    assert ids(claim(conn)) == [ready["id"]]


def test_serial_keys_a_failed_job_keeps_its_place_until_its_retry(conn: psycopg.Connection) -> None:
    head = enqueue(conn, serial_key="k", max_attempts=3)
    nxt = enqueue(conn, serial_key="k")
    [got] = claim(conn)
    assert fail(conn, got, base_ms=60_000) == "failed"
    assert claim(conn) == []                      # the retry is a minute away; the next job still waits
    assert claim(conn, ahead="30 seconds") == []
    [again] = claim(conn, ahead="2 minutes")
    assert (again["id"], again["attempts"]) == (head["id"], 2)
    assert claim(conn, ahead="2 minutes") == []
    succeed(conn, again)
    assert ids(claim(conn)) == [nxt["id"]]


@pytest.mark.parametrize("end", ["dead", "cancelled", "cancelled while failed"])
def test_serial_keys_a_dead_or_cancelled_job_lets_the_next_go(conn: psycopg.Connection, end: str) -> None:
    head = enqueue(conn, serial_key="k", max_attempts=2)
    nxt = enqueue(conn, serial_key="k")
    if end == "dead":
        [got] = claim(conn)
        assert fail(conn, got, retryable=False) == "dead"
    elif end == "cancelled":
        conn.execute("select * from cancel_job(%s)", [head["id"]])
    else:
        [got] = claim(conn)
        assert fail(conn, got, base_ms=60_000) == "failed"
        assert claim(conn) == []
        conn.execute("select * from cancel_job(%s)", [head["id"]])
    assert ids(claim(conn)) == [nxt["id"]]


def test_serial_keys_the_index_refuses_a_second_processing_job_written_by_hand(conn: psycopg.Connection) -> None:
    first = enqueue(conn, serial_key="k")
    second = enqueue(conn, serial_key="k")
    assert ids(claim(conn)) == [first["id"]]
    with pytest.raises(psycopg.errors.UniqueViolation) as exc:
        conn.execute("update jobs set status = 'processing', attempts = 1, started_at = now(), locked_by = 'hand',"
                     " lease_expires_at = now() + interval '1 minute' where id = %s", [second["id"]])
    assert exc.value.diag.constraint_name == "jobs_serial_running_key"
    # Another key's job, or one without a key, is not held back by it.
    third = enqueue(conn, serial_key="other")
    conn.execute("update jobs set status = 'processing', attempts = 1, started_at = now(), locked_by = 'hand',"
                 " lease_expires_at = now() + interval '1 minute' where id = %s", [third["id"]])


def test_serial_keys_claims_racing_in_open_transactions_take_one_job_per_key(connect) -> None:
    """Step by step, then at once: A claims inside an open transaction and holds the heads of three keys; B,
    claiming meanwhile, gets none of their next jobs (only the free one); after A commits, still none."""
    setup = connect()
    for n in range(5):
        for key in ("a", "b", "c"):
            enqueue(setup, key=f"{key}-{n}", serial_key=key)
    free = enqueue(setup)
    # B's claim must not wait for A's transaction (that would hang this test: lock_timeout ends it).
    a, b = connect(autocommit=False), connect(autocommit=False, options="-c lock_timeout=5s")
    got_a = claim(a, worker="A")
    got_b = claim(b, worker="B")
    keys_a = sorted(j["serial_key"] for j in got_a if j["serial_key"])
    keys_b = sorted(j["serial_key"] for j in got_b if j["serial_key"])
    assert sorted(keys_a + keys_b) == ["a", "b", "c"]  # each key's head once, whoever got it
    assert {j["idempotency_key"] for j in got_a + got_b if j["serial_key"]} == {"a-0", "b-0", "c-0"}
    assert free["id"] in ids(got_a + got_b)
    a.commit()
    assert [j for j in claim(b, worker="B") if j["serial_key"]] == []
    b.commit()
    assert one(setup, "select max(n) as m from (select count(*) as n from jobs where status = 'processing'"
                      " group by serial_key) x")["m"] == 1


def test_serial_keys_four_workers_over_twenty_keys_never_overlap_and_keep_order(connect) -> None:
    """4 workers (threads, each its own connection) loop claim → mark_succeeded, or mark_failed (retryable,
    no backoff) with a chance of 1 in 4 (seeded), over 20 keys × 50 jobs enqueued interleaved. After each
    claim a worker reads what is processing: never two jobs of a key. At the end every job is final, and
    job_attempts shows, per key, attempts that do not overlap in time and each job's first attempt starting
    after the last attempt of the job enqueued before it ended, in enqueue order.

    The times are the transactions' now(): an attempt's started_at is when its claim statement began, which
    can be a little before the previous attempt's mark began and committed, when that commit came while the
    claim was starting (its pick, a later statement, sees it). So an overlap up to SLACK is that, not two
    jobs running at once (the reads after each claim, and the unique index, say that never happens). Hence
    too the order in which a key's jobs started is not read from started_at (a claim that waited begins
    before the attempt it follows) but from the order the claims returned, recorded under a lock: a job's
    claim returns before its worker marks it, and the next job of its key can only be claimed after that."""
    setup = connect()
    keys, per_key = 20, 50
    elements = [{"type": "t", "payload": {"key": k, "n": n}, "idempotency_key": f"s-{k}-{n}", "serial_key": f"key-{k}",
                 "max_attempts": 20}
                for n in range(per_key) for k in range(keys)]
    setup.execute("select count(*) from enqueue_jobs(%s::jsonb)", [Jsonb(elements)])
    workers = 4
    sessions = [connect() for _ in range(workers)]
    barrier = threading.Barrier(workers)
    errors: list[BaseException] = []
    lock = threading.Lock()
    peaks: list[int] = []  # the most jobs of one key processing, read after each claim
    claimed: list[str] = []  # job ids in the order their claims returned
    deadline = time.monotonic() + 60

    def run(i: int) -> None:
        rng = random.Random(1000 + i)
        s = sessions[i]
        try:
            barrier.wait(timeout=30)
            while time.monotonic() < deadline:
                got = rows(s, "select (c.job).id, c.lease_token from claim_jobs(%s, 5) c", [f"w{i}"])
                with lock:
                    claimed.extend(str(job["id"]) for job in got)
                    peaks.append(one(s, "select coalesce(max(n), 0) as n from (select count(*) as n from jobs"
                                        " where status = 'processing' group by serial_key) x")["n"])
                if not got:
                    if one(s, "select count(*) as n from jobs where status not in"
                              " ('succeeded', 'dead', 'cancelled', 'expired')")["n"] == 0:
                        return
                    continue
                for job in got:
                    if rng.random() < 0.25:
                        fail(s, job)
                    else:
                        succeed(s, job)
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)
    assert errors == [] and not any(t.is_alive() for t in threads)
    assert rows(setup, "select status, count(*) as n from jobs group by status") == [
        {"status": "succeeded", "n": keys * per_key}]
    assert one(setup, "select count(*) as n from job_attempts where outcome = 'failed'")["n"] > 0
    assert max(peaks) == 1

    started: dict[str, list[int]] = defaultdict(list)  # per key, the n of each claimed attempt, in claim order
    jobs = {str(j["id"]): j for j in rows(setup, "select id, serial_key, (payload->>'n')::int as n from jobs")}
    for job_id in claimed:
        started[jobs[job_id]["serial_key"]].append(jobs[job_id]["n"])
    for key, ns in started.items():  # a retry keeps its place: no later job between a job's attempts
        assert ns == sorted(ns) and sorted(set(ns)) == list(range(per_key)), f"{key}: claimed in the order {ns}"

    attempts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for a in rows(setup, "select j.serial_key, (j.payload->>'n')::int as n, a.attempt, a.started_at, a.finished_at"
                         " from job_attempts a join jobs j on j.id = a.job_id"
                         " order by (j.payload->>'n')::int, a.attempt"):  # the key's order: enqueue, then attempt
        attempts[a["serial_key"]].append(a)
    assert len(attempts) == keys
    for key, found in attempts.items():
        for before, after in zip(found, found[1:]):
            assert after["started_at"] >= before["finished_at"] - SLACK, f"{key}: attempts overlap: {before} {after}"
        first_start: dict[int, Any] = {}
        last_end: dict[int, Any] = {}
        for a in found:
            first_start.setdefault(a["n"], a["started_at"])
            last_end[a["n"]] = a["finished_at"]
        assert sorted(first_start) == list(range(per_key))
        for n in range(1, per_key):
            assert first_start[n] >= last_end[n - 1] - SLACK, f"{key}: job {n} started before job {n - 1} ended"


def test_serial_keys_a_dead_job_retried_while_the_next_runs_waits_for_it(conn: psycopg.Connection) -> None:
    """The head dies, so the next job starts; the head is retried meanwhile. A claim neither fails nor starts
    the head beside the running job: it waits for that one to end."""
    head = enqueue(conn, serial_key="k", max_attempts=1)
    nxt = enqueue(conn, serial_key="k")
    [got] = claim(conn)
    assert got["id"] == head["id"] and fail(conn, got, retryable=False) == "dead"
    [running] = claim(conn)
    assert running["id"] == nxt["id"]
    conn.execute("select * from retry_dead(%s)", [head["id"]])
    assert claim(conn) == []  # the head waits for nxt to end
    succeed(conn, running)
    assert ids(claim(conn)) == [head["id"]]


def test_serial_keys_enqueues_committing_out_of_order_never_run_two_at_once(connect) -> None:
    """Step by step: A enqueues a job of key k and holds its transaction open; B enqueues one of k and commits;
    B's job is claimed (A's is not visible yet). Then A commits: a claim neither fails nor starts A's job
    while B's runs."""
    setup = connect()
    a, b = connect(autocommit=False), connect()
    enqueue(a, key="from-a", serial_key="k")
    from_b = enqueue(b, key="from-b", serial_key="k")
    [running] = claim(setup)
    assert running["id"] == from_b["id"]
    a.commit()
    assert claim(setup) == []
    assert one(setup, "select count(*) as n from jobs where serial_key = 'k' and status = 'processing'")["n"] == 1
    succeed(setup, running)
    assert [j["idempotency_key"] for j in claim(setup)] == ["from-a"]
