"""set_queue_rate, and the claim that honours it: a rated queue's bucket holds greatest(1, rate) tokens,
refills by the rate × the time elapsed (claim_jobs_at's p_now, so no test sleeps), and no claim, nor two
racing, starts more of its jobs than the bucket's whole tokens."""
from __future__ import annotations

import threading
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from pgqw import db
from tests.helpers import one, rows, snapshot
from tests.sql.test_queues import fill, processing, wait_until_blocked


def claim_at(conn: psycopg.Connection, at: datetime, limit: int = 100, worker: str = "w",
             queues: list[str] | None = None) -> list[dict[str, Any]]:
    """claim_jobs_at as of `at` (the owner's clock): the rows claimed."""
    return rows(conn, "select (r.job).*, r.lease_token from claim_jobs_at(%s, %s, %s, %s::text[]) r", [at, worker, limit, queues])


def bucket(conn: psycopg.Connection, queue: str) -> tuple[Any, Any]:
    row = one(conn, "select rate_tokens, rate_refilled_at from queues where name = %s", [queue])
    return row["rate_tokens"], row["rate_refilled_at"]


def ms(n: float) -> timedelta:
    return timedelta(milliseconds=n)


def finish_rows(conn: psycopg.Connection, claimed: list[dict[str, Any]]) -> None:
    for job in claimed:
        conn.execute("select (r.job).*, r.already_recorded from mark_succeeded(%s, %s) r", [job["id"], job["lease_token"]])


# ---- setting it ----

def test_set_queue_rate_starts_a_full_bucket_and_null_removes_it(conn: psycopg.Connection) -> None:
    row = db.set_queue_rate(conn, queue="r", jobs_per_second=2, create=True)
    assert (row.name, row.jobs_per_second, row.rate_tokens, row.paused, row.max_running) == ("r", 2, 2, False, None)
    assert row.rate_refilled_at is not None
    assert db.set_queue_rate(conn, queue="slow", jobs_per_second=Decimal("0.25"),
        create=True).rate_tokens == 1  # at least 1
    assert db.set_queue_rate(conn, queue="f", jobs_per_second=0.1, create=True).jobs_per_second == Decimal("0.1")
    row = db.set_queue_rate(conn, queue="r", jobs_per_second=None)
    assert (row.jobs_per_second, row.rate_tokens, row.rate_refilled_at) == (None, None, None)


def test_set_queue_rate_keeps_pause_and_limit_and_they_keep_it(conn: psycopg.Connection) -> None:
    db.set_queue_limit(conn, queue="q", max_running=3, create=True)
    db.pause_queue(conn, queue="q")
    row = db.set_queue_rate(conn, queue="q", jobs_per_second=5)
    assert (row.paused, row.max_running, row.jobs_per_second) == (True, 3, 5)
    assert db.resume_queue(conn, queue="q").jobs_per_second == 5
    assert db.set_queue_limit(conn, queue="q", max_running=None).jobs_per_second == 5


def test_set_queue_rate_changed_keeps_its_tokens_up_to_the_new_size(conn: psycopg.Connection) -> None:
    fill(conn, "r", 20)
    t0 = db.set_queue_rate(conn, queue="r", jobs_per_second=10).rate_refilled_at
    assert len(claim_at(conn, t0, limit=8)) == 8
    assert bucket(conn, "r") == (2, t0)
    # Lowered: the bucket now holds at most 1.
    row = db.set_queue_rate(conn, queue="r", jobs_per_second=1)
    assert row.rate_tokens == 1 and row.rate_refilled_at >= t0
    # Raised again: what it held plus the (short) refill since, not a fresh full bucket.
    row = db.set_queue_rate(conn, queue="r", jobs_per_second=10)
    assert 1 <= row.rate_tokens < 2
    # Removed and set again: a new rate, a full bucket.
    db.set_queue_rate(conn, queue="r", jobs_per_second=None)
    assert db.set_queue_rate(conn, queue="r", jobs_per_second=10).rate_tokens == 10


def test_set_queue_rate_same_rate_again_gives_no_extra_tokens(conn: psycopg.Connection) -> None:
    fill(conn, "r", 10)
    t0 = db.set_queue_rate(conn, queue="r", jobs_per_second=3).rate_refilled_at
    assert len(claim_at(conn, t0)) == 3
    for _ in range(3):
        db.set_queue_rate(conn, queue="r", jobs_per_second=3)
    assert claim_at(conn, t0) == []


@pytest.mark.parametrize("call, message", [
    ("select * from set_queue_rate(null, 1)", "queue must be a non-empty text"),
    ("select * from set_queue_rate('  ', 1)", "queue must be a non-empty text"),
    ("select * from set_queue_rate(repeat('q', 101), 1)", "queue must be a non-empty text"),
    ("select * from set_queue_rate('q', 0)", "must be above 0 (or null for no rate), got 0"),
    ("select * from set_queue_rate('q', -2)", "must be above 0 (or null for no rate), got -2"),
    ("select * from set_queue_rate('q', '-Infinity')", "must be above 0"),
    ("select * from set_queue_rate('q', 'NaN')", "must be a number (or null for no rate), got NaN"),
    ("select * from set_queue_rate('q', 'Infinity')", "must be at most 1000000, got Infinity"),
    ("select * from set_queue_rate('q', 1000001)", "must be at most 1000000, got 1000001"),
    ("select * from set_queue_rate('q', 1e300)", "must be at most 1000000"),
    ("select * from set_queue_rate('q', 0.0000001)", "at most 6 decimal places, got 0.0000001"),
    ("select * from set_queue_rate('q', 1e-300)", "at most 6 decimal places"),
])
def test_set_queue_rate_bad_input_raises_qv400_naming_it_and_changes_nothing(
        conn: psycopg.Connection, call: str, message: str) -> None:
    fill(conn, "q", 3)
    db.set_queue_limit(conn, queue="q", max_running=4)
    db.set_queue_rate(conn, queue="q", jobs_per_second=2)
    claim_at(conn, datetime.now().astimezone(), limit=1)  # a bucket that is not simply full
    before = snapshot(conn) + rows(conn, "select * from queues")
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(call)
    assert exc.value.sqlstate == "QV400"
    assert message in exc.value.diag.message_primary
    assert len(exc.value.diag.message_primary) < 120  # a 300-digit rate is not echoed whole
    assert snapshot(conn) + rows(conn, "select * from queues") == before


def test_queues_table_refuses_a_bucket_by_hand_that_breaks_its_rules(conn: psycopg.Connection) -> None:
    """The named constraints hold whoever writes (the owner by hand, too)."""
    db.set_queue_rate(conn, queue="q", jobs_per_second=2, create=True)
    for statement, constraint in [
        ("update queues set rate_tokens = 3", "queues_rate_tokens_in_bucket"),
        ("update queues set rate_tokens = -1", "queues_rate_tokens_in_bucket"),
        ("update queues set rate_tokens = 'NaN'", "queues_rate_tokens_in_bucket"),
        ("update queues set rate_tokens = null", "queues_rate_bucket_complete"),
        ("update queues set jobs_per_second = null", "queues_rate_bucket_needs_rate"),
        ("update queues set jobs_per_second = 0.0000001", "queues_jobs_per_second_range"),
        ("update queues set jobs_per_second = 'Infinity'", "queues_jobs_per_second_range"),
    ]:
        with pytest.raises(psycopg.errors.CheckViolation) as exc:
            conn.execute(statement)
        assert exc.value.diag.constraint_name == constraint, statement


# ---- the bucket at work ----

def test_queue_rate_two_a_second_takes_the_bucket_then_refills_with_time(conn: psycopg.Connection) -> None:
    fill(conn, "r", 30)
    t0 = db.set_queue_rate(conn, queue="r", jobs_per_second=2).rate_refilled_at
    assert len(claim_at(conn, t0)) == 2  # a full bucket: one second's worth
    assert bucket(conn, "r") == (0, t0)
    assert claim_at(conn, t0) == []
    assert claim_at(conn, t0 + ms(100)) == []  # 0.2 of a token
    assert claim_at(conn, t0 + ms(499)) == []  # 0.998
    assert bucket(conn, "r") == (0, t0)  # a claim that takes nothing writes nothing
    assert len(claim_at(conn, t0 + ms(500))) == 1  # exactly 1.0
    assert bucket(conn, "r") == (0, t0 + ms(500))
    assert claim_at(conn, t0 + ms(600)) == []
    assert len(claim_at(conn, t0 + ms(1250))) == 1  # 1.5 tokens: 1 job, half a token kept
    assert bucket(conn, "r") == (Decimal("0.5"), t0 + ms(1250))
    assert len(claim_at(conn, t0 + ms(1500))) == 1  # 0.5 + 0.5
    assert len(claim_at(conn, t0 + ms(3500))) == 2  # 4 tokens' worth of time, but the bucket holds 2
    assert bucket(conn, "r") == (0, t0 + ms(3500))
    # However long it waits, the bucket holds one second's worth.
    assert len(claim_at(conn, t0 + timedelta(hours=1))) == 2
    assert processing(conn, "r") == 9


def test_queue_rate_over_many_small_steps_starts_rate_times_elapsed(conn: psycopg.Connection) -> None:
    """Claims every 0.1 s for 10 s at 2 a second: 2 at once, then 2 a second (no token lost to rounding)."""
    fill(conn, "r", 50)
    t0 = db.set_queue_rate(conn, queue="r", jobs_per_second=2).rate_refilled_at
    started = [len(claim_at(conn, t0 + ms(100 * i))) for i in range(101)]
    assert sum(started) == 2 + 20
    assert max(started) == 2 and started[0] == 2
    assert all(sum(started[i:i + 5]) == 1 for i in range(1, 97))  # then one in every 0.5 s


def test_queue_rate_below_one_a_second_allows_one_job_then_waits(conn: psycopg.Connection) -> None:
    fill(conn, "r", 5)
    t0 = db.set_queue_rate(conn, queue="r", jobs_per_second=Decimal("0.5")).rate_refilled_at
    assert len(claim_at(conn, t0)) == 1
    assert claim_at(conn, t0 + ms(1999)) == []
    assert len(claim_at(conn, t0 + ms(2000))) == 1
    assert len(claim_at(conn, t0 + timedelta(minutes=10))) == 1  # a bucket of one


def test_queue_rate_a_clock_that_goes_back_gives_nothing(conn: psycopg.Connection) -> None:
    fill(conn, "r", 10)
    t0 = db.set_queue_rate(conn, queue="r", jobs_per_second=2).rate_refilled_at
    assert len(claim_at(conn, t0 + timedelta(seconds=10))) == 2
    assert claim_at(conn, t0) == []
    assert claim_at(conn, t0 + timedelta(seconds=10)) == []
    assert bucket(conn, "r") == (0, t0 + timedelta(seconds=10))


def test_queue_rate_and_limit_together_take_the_smaller(conn: psycopg.Connection) -> None:
    fill(conn, "r", 20)
    db.set_queue_limit(conn, queue="r", max_running=2)
    t0 = db.set_queue_rate(conn, queue="r", jobs_per_second=5).rate_refilled_at
    first = claim_at(conn, t0)
    assert len(first) == 2  # the limit: 5 tokens, 2 places
    assert bucket(conn, "r")[0] == 3  # only what was claimed is spent
    finish_rows(conn, first)
    second = claim_at(conn, t0)
    assert len(second) == 2
    finish_rows(conn, second)
    assert len(claim_at(conn, t0)) == 1  # the rate: 1 token left, 2 places
    assert claim_at(conn, t0) == []  # no token, 1 place
    assert claim_at(conn, t0 + ms(199)) == []
    assert len(claim_at(conn, t0 + ms(1000))) == 1  # 5 tokens again, but 1 place
    assert claim_at(conn, t0 + ms(2000)) == []  # full: no place, whatever the tokens
    assert processing(conn, "r") == 2


def test_queue_rate_paused_queue_claims_nothing_and_resumes_with_at_most_a_full_bucket(
        conn: psycopg.Connection) -> None:
    fill(conn, "r", 10)
    t0 = db.set_queue_rate(conn, queue="r", jobs_per_second=2).rate_refilled_at
    db.pause_queue(conn, queue="r")
    assert claim_at(conn, t0 + timedelta(seconds=30)) == []
    db.resume_queue(conn, queue="r")
    assert len(claim_at(conn, t0 + timedelta(seconds=60))) == 2


def test_queue_rate_spends_tokens_only_on_jobs_claimed(conn: psycopg.Connection) -> None:
    """A claim of 2 that prefers another queue's higher-priority jobs leaves the rated queue's bucket as it was;
    a claim filtered to other queues or task types does too."""
    conn.execute("select enqueue_job('t', '{}', 'free-' || i, 'free', 10) from generate_series(1, 2) i")
    fill(conn, "r", 5)  # priority 0
    t0 = db.set_queue_rate(conn, queue="r", jobs_per_second=3).rate_refilled_at
    assert [j["queue"] for j in claim_at(conn, t0, limit=2)] == ["free", "free"]
    assert claim_at(conn, t0, queues=["other"]) == []
    assert rows(conn, "select (r.job).*, r.lease_token from claim_jobs_at(%s, 'w', 5, null, null, array['no-such-type']) r", [t0]) == []
    assert bucket(conn, "r") == (3, t0)
    assert len(claim_at(conn, t0)) == 3


def test_queue_rate_other_queues_unaffected_and_order_kept(conn: psycopg.Connection) -> None:
    fill(conn, "free", 10)
    conn.execute("select enqueue_job('t', '{}', 'r-high-' || i, 'r', 10) from generate_series(1, 3) i")
    t0 = db.set_queue_rate(conn, queue="r", jobs_per_second=1).rate_refilled_at
    got = claim_at(conn, t0, limit=3)
    assert [j["queue"] for j in got] == ["r", "free", "free"]  # the rated queue's best first, then the rest
    assert sorted(j["queue"] for j in claim_at(conn, t0)) == ["free"] * 8


def test_queue_rate_set_by_hand_without_a_bucket_starts_full(conn: psycopg.Connection) -> None:
    fill(conn, "r", 10)
    db.set_queue_limit(conn, queue="r", max_running=None)
    conn.execute("update queues set jobs_per_second = 3 where name = 'r'")
    t0 = one(conn, "select now() as t")["t"]
    assert len(claim_at(conn, t0)) == 3
    assert bucket(conn, "r") == (0, t0)


def test_queue_rate_through_claim_jobs_uses_the_server_clock(conn: psycopg.Connection) -> None:
    fill(conn, "r", 10)
    db.set_queue_rate(conn, queue="r", jobs_per_second=Decimal("0.001"))  # one job, then one in 1000 s
    assert len(db.claim_jobs(conn, worker_id="w", limit=10)) == 1
    assert db.claim_jobs(conn, worker_id="w", limit=10) == []
    assert db.claim_job(conn, worker_id="w") is None


def test_list_queues_gives_the_rate(conn: psycopg.Connection) -> None:
    fill(conn, "a", 1)
    db.set_queue_rate(conn, queue="a", jobs_per_second=Decimal("2.5"))
    db.pause_queue(conn, queue="b", create=True)
    found = {q.name: q for q in db.list_queues(conn)}
    assert (found["a"].jobs_per_second, found["b"].jobs_per_second) == (Decimal("2.5"), None)


# ---- racing claims ----

def test_queue_rate_racing_sessions_take_turns(connect) -> None:
    """Step by step, a rate of 3 a second: A claims 2 at t0 and holds the queue's row lock; B, claiming at
    t0 as well, waits for it; after A commits B finds 1 token and takes 1."""
    setup = connect()
    fill(setup, "r", 10)
    t0 = db.set_queue_rate(setup, queue="r", jobs_per_second=3).rate_refilled_at
    a, b = connect(autocommit=False), connect(autocommit=False)
    assert len(claim_at(a, t0, limit=2, worker="A")) == 2
    got: dict[str, list[dict[str, Any]]] = {}
    tb = threading.Thread(target=lambda: got.__setitem__("B", claim_at(b, t0, worker="B")))
    tb.start()
    wait_until_blocked(setup, b)
    a.commit()
    tb.join(timeout=30)
    b.commit()
    assert len(got["B"]) == 1
    assert processing(setup, "r") == 3
    assert bucket(setup, "r") == (0, t0)


@pytest.mark.parametrize("sessions", [2, 4])
def test_queue_rate_racing_sessions_never_take_more_than_the_tokens(connect, sessions: int) -> None:
    """Rounds of claims at once (a threading.Barrier, each in its own session and transaction, every one
    as of the same p_now) on a queue of 3 a second: each round's total is the bucket's whole tokens then,
    never more, however the sessions interleave."""
    setup = connect()
    fill(setup, "r", 60)
    t0 = db.set_queue_rate(setup, queue="r", jobs_per_second=3).rate_refilled_at
    conns = [connect(autocommit=False) for _ in range(sessions)]
    # (when, tokens then): a full bucket; 1 s later full again; 0.5 s later 1.5 (1 job, 0.5 kept);
    # 0.5 s later 2; a second later 3 (the cap).
    rounds = [(0, 3), (1000, 3), (1500, 1), (2000, 2), (3000, 3)]
    for at_ms, tokens in rounds:
        barrier = threading.Barrier(sessions)
        taken: list[int] = []
        errors: list[BaseException] = []
        lock = threading.Lock()

        def run(i: int, when: datetime) -> None:
            s = conns[i]
            try:
                barrier.wait(timeout=30)
                got = claim_at(s, when, limit=10, worker=f"w{i}")
                s.commit()
                with lock:
                    taken.append(len(got))
            except BaseException as exc:  # noqa: BLE001 - asserted below
                errors.append(exc)
                s.rollback()

        threads = [threading.Thread(target=run, args=(i, t0 + ms(at_ms))) for i in range(sessions)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert errors == [] and not any(t.is_alive() for t in threads)
        assert sum(taken) == tokens, (at_ms, taken)
    assert processing(setup, "r") == sum(tokens for _, tokens in rounds)
