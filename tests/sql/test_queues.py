"""pause_queue / resume_queue / set_queue_limit, and the claim that honours them: a paused queue is skipped,
a limited queue never has more than max_running jobs processing at once, whatever the workers race."""
from __future__ import annotations

import random
import threading
import time
from collections import defaultdict

import psycopg
import pytest

from pgqw import db
from tests.helpers import one, rows, snapshot


def fill(conn: psycopg.Connection, queue: str, n: int) -> None:
    conn.execute("select enqueue_job('t', jsonb_build_object('i', i), %(q)s || '-' || i, %(q)s)"
                 " from generate_series(1, %(n)s) i", {"q": queue, "n": n})


def processing(conn: psycopg.Connection, queue: str) -> int:
    return one(conn, "select count(*) as n from jobs where status = 'processing' and queue = %s", [queue])["n"]


def finish(conn: psycopg.Connection, jobs: list[db.ClaimedJob]) -> None:
    for job in jobs:
        db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token)


def attempt_peaks_by_queue(conn: psycopg.Connection) -> dict[str, int]:
    """Most attempts open at once per queue, from job_attempts' own timestamps: a sweep over the
    [started_at, finished_at] intervals (an open attempt runs on), a finish at the same instant first."""
    events: dict[str, list[tuple[object, int]]] = defaultdict(list)
    for a in rows(conn, "select j.queue, a.started_at, coalesce(a.finished_at, '9000-01-01') as finished_at"
                        " from job_attempts a join jobs j on j.id = a.job_id"):
        events[a["queue"]] += [(a["started_at"], 1), (a["finished_at"], -1)]
    peaks = {}
    for queue, found in events.items():
        now = peak = 0
        for _, delta in sorted(found, key=lambda e: (e[0], e[1])):
            now += delta
            peak = max(peak, now)
        peaks[queue] = peak
    return peaks


def wait_until_blocked(watcher: psycopg.Connection, blocked: psycopg.Connection, timeout: float = 10) -> None:
    """Until the session waits for a lock another holds (pg_blocking_pids), not a sleep and hope."""
    deadline = time.monotonic() + timeout
    while not one(watcher, "select cardinality(pg_blocking_pids(%s)) > 0 as b", [blocked.info.backend_pid])["b"]:
        assert time.monotonic() < deadline, "the claim never waited"


# ---- pause and resume ----

def test_pause_queue_claims_skip_it_and_enqueues_still_land(conn: psycopg.Connection) -> None:
    fill(conn, "slow", 2)
    row = db.pause_queue(conn, queue="slow")
    assert (row.name, row.paused, row.max_running) == ("slow", True, None)
    fill(conn, "fast", 1)
    conn.execute("select enqueue_job('t', '{}', 'slow-late', 'slow')")  # still accepted
    assert [j.queue for j in db.claim_jobs(conn, worker_id="w", limit=10)] == ["fast"]
    assert db.claim_jobs(conn, worker_id="w", limit=10, queues=["slow"]) == []
    assert db.claim_job(conn, worker_id="w") is None
    assert one(conn, "select count(*) as n from jobs where queue = 'slow' and status = 'pending'")["n"] == 3


def test_resume_queue_restores_claims(conn: psycopg.Connection) -> None:
    fill(conn, "slow", 2)
    db.pause_queue(conn, queue="slow")
    assert db.claim_jobs(conn, worker_id="w", limit=10) == []
    row = db.resume_queue(conn, queue="slow")
    assert (row.name, row.paused) == ("slow", False)
    assert len(db.claim_jobs(conn, worker_id="w", limit=10)) == 2


def test_resume_queue_wakes_listening_workers(conn: psycopg.Connection, connect) -> None:
    db.pause_queue(conn, queue="slow", create=True)
    listener = connect()
    db.listen(listener)
    db.resume_queue(conn, queue="slow")
    assert [(n.channel, n.payload) for n in listener.notifies(timeout=2, stop_after=1)] == [("pgqw_jobs", "slow")]


def test_pause_and_resume_queue_are_idempotent(conn: psycopg.Connection) -> None:
    db.set_queue_limit(conn, queue="q", max_running=3, create=True)
    assert db.pause_queue(conn, queue="q").paused
    assert db.pause_queue(conn, queue="q").paused
    assert one(conn, "select count(*) as n from queues")["n"] == 1
    assert db.pause_queue(conn, queue="q").max_running == 3  # pausing keeps the limit
    assert not db.resume_queue(conn, queue="q").paused
    assert not db.resume_queue(conn, queue="q").paused
    fill(conn, "never-paused", 1)
    assert not db.resume_queue(conn, queue="never-paused").paused


def test_pause_queue_keeps_running_jobs_running(conn: psycopg.Connection) -> None:
    fill(conn, "q", 2)
    [job] = db.claim_jobs(conn, worker_id="w", limit=1)
    db.pause_queue(conn, queue="q")
    assert db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token).status == "succeeded"
    assert db.claim_jobs(conn, worker_id="w", limit=10) == []


# ---- the limit ----

def test_set_queue_limit_caps_one_claim_and_null_removes_it(conn: psycopg.Connection) -> None:
    fill(conn, "lim", 5)
    fill(conn, "free", 3)
    assert db.set_queue_limit(conn, queue="lim", max_running=2).max_running == 2
    got = db.claim_jobs(conn, worker_id="w", limit=100)
    assert sorted(j.queue for j in got) == ["free"] * 3 + ["lim"] * 2
    assert db.claim_jobs(conn, worker_id="w", limit=100) == []
    finish(conn, [j for j in got if j.queue == "lim"][:1])
    assert [j.queue for j in db.claim_jobs(conn, worker_id="w", limit=100)] == ["lim"]
    assert db.set_queue_limit(conn, queue="lim", max_running=None).max_running is None
    assert len(db.claim_jobs(conn, worker_id="w", limit=100)) == 2
    assert processing(conn, "lim") == 4  # 5 claimed, 1 finished


def test_set_queue_limit_lowered_below_running_takes_nothing_until_under(conn: psycopg.Connection) -> None:
    fill(conn, "lim", 6)
    got = db.claim_jobs(conn, worker_id="w", limit=3)
    db.set_queue_limit(conn, queue="lim", max_running=2)
    assert db.claim_jobs(conn, worker_id="w", limit=10) == []
    finish(conn, got[:1])
    assert db.claim_jobs(conn, worker_id="w", limit=10) == []  # 2 running: at the limit
    finish(conn, got[1:2])
    assert len(db.claim_jobs(conn, worker_id="w", limit=10)) == 1


def test_set_queue_limit_on_a_paused_queue_claims_nothing(conn: psycopg.Connection) -> None:
    fill(conn, "lim", 2)
    db.set_queue_limit(conn, queue="lim", max_running=5)
    db.pause_queue(conn, queue="lim")
    assert db.claim_jobs(conn, worker_id="w", limit=10) == []
    db.resume_queue(conn, queue="lim")
    assert len(db.claim_jobs(conn, worker_id="w", limit=10)) == 2


def test_set_queue_limit_keeps_claim_order_across_queues(conn: psycopg.Connection) -> None:
    conn.execute("select enqueue_job('t', '{}', 'free-low', 'free', 0)")
    conn.execute("select enqueue_job('t', '{}', 'lim-high', 'lim', 10)")
    conn.execute("select enqueue_job('t', '{}', 'lim-high-2', 'lim', 10)")
    db.set_queue_limit(conn, queue="lim", max_running=1)
    got = db.claim_jobs(conn, worker_id="w", limit=1)
    assert [j.idempotency_key for j in got] == ["lim-high"]
    got = db.claim_jobs(conn, worker_id="w", limit=5)
    assert [j.idempotency_key for j in got] == ["free-low"]


def test_set_queue_limit_other_queues_unaffected(conn: psycopg.Connection) -> None:
    fill(conn, "free", 20)
    fill(conn, "lim", 20)
    db.set_queue_limit(conn, queue="lim", max_running=1)
    got = db.claim_jobs(conn, worker_id="w", limit=100, queues=["free"])
    assert len(got) == 20
    got = db.claim_jobs(conn, worker_id="w", limit=100, task_types=["t"])
    assert [j.queue for j in got] == ["lim"]


@pytest.mark.parametrize("a_ends", ["commit", "rollback"])
def test_set_queue_limit_racing_sessions_take_turns(connect, a_ends: str) -> None:
    """Step by step: A, B and C each begin and claim from a queue limited to 2. B and C wait for A's
    transaction (the queue's row lock); after A commits they find the queue full; after A rolls back,
    the first to get the lock takes A's 2 places and the other, after that one commits, finds it full.
    Never more than 2 processing, and the attempt history agrees."""
    setup = connect()
    fill(setup, "lim", 6)
    fill(setup, "free", 2)
    db.set_queue_limit(setup, queue="lim", max_running=2)
    a, b, c = (connect(autocommit=False) for _ in range(3))

    got_a = db.claim_jobs(a, worker_id="A", limit=10, queues=["lim"])
    assert len(got_a) == 2
    # An unlimited queue takes no lock: a claim of it does not wait for A.
    assert len(db.claim_jobs(setup, worker_id="S", limit=10, queues=["free"])) == 2

    results: dict[str, list[db.ClaimedJob]] = {}
    errors: list[BaseException] = []

    def claim(name: str, session: psycopg.Connection) -> None:
        try:
            results[name] = db.claim_jobs(session, worker_id=name, limit=10, queues=["lim"])
            session.commit()
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    threads = {name: threading.Thread(target=claim, args=(name, s)) for name, s in (("B", b), ("C", c))}
    for name, session in (("B", b), ("C", c)):
        threads[name].start()
        wait_until_blocked(setup, session)
    getattr(a, a_ends)()
    for t in threads.values():
        t.join(timeout=30)
    assert errors == [] and not any(t.is_alive() for t in threads.values())
    first, second = sorted(("B", "C"), key=lambda n: -len(results[n]))
    assert len(results[first]) == (0 if a_ends == "commit" else 2)
    assert results[second] == []
    assert processing(setup, "lim") == 2
    assert db.claim_jobs(setup, worker_id="S", limit=10, queues=["lim"]) == []
    assert attempt_peaks_by_queue(setup)["lim"] == 2


def test_set_queue_limit_later_claim_sees_commits_in_any_order(connect) -> None:
    """Step by step, a limit of 3: A takes 1 and holds the lock; B waits; A commits and B takes the other
    2; C waits for B; B commits and C takes none. 3 are processing, and the attempt history agrees."""
    setup = connect()
    fill(setup, "lim", 6)
    db.set_queue_limit(setup, queue="lim", max_running=3)
    a, b, c = (connect(autocommit=False) for _ in range(3))
    assert len(db.claim_jobs(a, worker_id="A", limit=1, queues=["lim"])) == 1
    got: dict[str, list[db.ClaimedJob]] = {}
    tb = threading.Thread(target=lambda: got.__setitem__("B", db.claim_jobs(b, worker_id="B", limit=10)))
    tb.start()
    wait_until_blocked(setup, b)
    a.commit()
    tb.join(timeout=30)
    assert len(got["B"]) == 2
    tc = threading.Thread(target=lambda: got.__setitem__("C", db.claim_jobs(c, worker_id="C", limit=10)))
    tc.start()
    wait_until_blocked(setup, c)
    b.commit()
    tc.join(timeout=30)
    c.commit()
    assert got["C"] == []
    assert processing(setup, "lim") == 3
    assert attempt_peaks_by_queue(setup) == {"lim": 3}


def test_set_queue_limit_holds_under_a_stress_of_racing_threads(connect) -> None:
    """Rounds of 6 threads racing to claim (batches of 2 to 6, any queue) from a queue limited to 3 and an
    unlimited one; between rounds some of the limited queue's jobs finish. Each claimer checks inside its
    own transaction, then every round checks after all commits: never more than 3 processing. The
    attempt history (claims of a round start after the last round's finishes) gives a peak of 3."""
    setup = connect()
    limit, threads_n, rounds = 3, 6, 8
    fill(setup, "lim", 40)
    fill(setup, "free", 40)
    db.set_queue_limit(setup, queue="lim", max_running=limit)
    sessions = [connect(autocommit=False) for _ in range(threads_n)]
    rng = random.Random(7)
    errors: list[BaseException] = []
    seen_inside: list[int] = []
    lock = threading.Lock()
    held: list[db.ClaimedJob] = []
    deadline = time.monotonic() + 60

    def run(i: int, barrier: threading.Barrier, size: int) -> None:
        s = sessions[i]
        try:
            barrier.wait(timeout=30)
            got = db.claim_jobs(s, worker_id=f"w{i}", limit=size)
            inside = processing(s, "lim")  # this claim still holds the queue's row lock, if it took it
            s.commit()
            with lock:
                seen_inside.append(inside)
                held.extend(got)
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)
            s.rollback()

    for _ in range(rounds):
        assert time.monotonic() < deadline
        barrier = threading.Barrier(threads_n)
        ts = [threading.Thread(target=run, args=(i, barrier, rng.randint(2, 6))) for i in range(threads_n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=30)
        assert errors == [] and not any(t.is_alive() for t in ts)
        assert processing(setup, "lim") <= limit
        # Finish some of the limited queue's jobs (and all of the free ones) before the next round.
        lim_held = [j for j in held if j.queue == "lim"]
        done = rng.sample(lim_held, k=rng.randint(0, len(lim_held)))
        finish(setup, done + [j for j in held if j.queue == "free"])
        held[:] = [j for j in lim_held if j not in done]
    assert max(seen_inside) <= limit
    assert one(setup, "select count(*) as n from jobs where queue = 'free' and status = 'pending'")["n"] == 0
    peaks = attempt_peaks_by_queue(setup)
    assert peaks["lim"] == limit and peaks["free"] > limit
    assert one(setup, "select count(*) as n from job_attempts a join jobs j on j.id = a.job_id"
                      " where j.queue = 'lim'")["n"] > limit


# ---- bad input ----

@pytest.mark.parametrize("call", [
    "select * from pause_queue(null)",
    "select * from pause_queue('')",
    "select * from pause_queue('  ')",
    "select * from pause_queue(repeat('q', 101))",
    "select * from resume_queue(null)",
    "select * from resume_queue(E'\\t')",
    "select * from resume_queue(repeat('q', 101))",
    "select * from set_queue_limit(null, 3)",
    "select * from set_queue_limit('', 3)",
    "select * from set_queue_limit(repeat('q', 101), 3)",
    "select * from set_queue_limit('q', 0)",
    "select * from set_queue_limit('q', -1)",
])
def test_queue_functions_bad_input_raise_qv400_and_change_nothing(conn: psycopg.Connection, call: str) -> None:
    db.set_queue_limit(conn, queue="q", max_running=4, create=True)
    before = snapshot(conn) + rows(conn, "select * from queues")
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(call)
    assert exc.value.sqlstate == "QV400"
    assert snapshot(conn) + rows(conn, "select * from queues") == before


@pytest.mark.parametrize("call", [
    "select * from pause_queue('nosuchqueue')",
    "select * from resume_queue('nosuchqueue')",
    "select * from set_queue_limit('nosuchqueue', 3)",
    "select * from set_queue_rate('nosuchqueue', 5)",
    "select * from pause_queue('nosuchqueue', p_create => false)",
])
def test_queue_functions_refuse_a_queue_never_seen_with_qu404_and_make_nothing(conn: psycopg.Connection,
                                                                              call: str) -> None:
    """A typo never makes a queue: no job, setting, worker, task type or schedule has named it."""
    fill(conn, "real", 1)
    before = snapshot(conn) + rows(conn, "select * from queues")
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(call)
    assert exc.value.sqlstate == "QU404"
    assert "nosuchqueue" in exc.value.diag.message_primary and "create" in exc.value.diag.message_hint
    assert snapshot(conn) + rows(conn, "select * from queues") == before


def test_queue_functions_take_a_queue_known_by_a_job_worker_type_or_schedule_or_made_on_request(
    conn: psycopg.Connection
) -> None:
    fill(conn, "by-job", 1)
    db.register_worker(conn, worker_id="w-q", task_types=["t"], queues=["by-worker"])
    db.register_task_types(conn, types=[{"name": "typed", "payload_schema": {}, "queue": "by-type"}])
    db.set_schedule(conn, name="nightly", task_type="t", cron="@daily", queue="by-schedule")
    for queue in ("by-job", "by-worker", "by-type", "by-schedule", "default"):
        assert db.pause_queue(conn, queue=queue).paused, queue
    assert one(conn, "select * from pause_queue('made', p_create => true)")["paused"]
    assert db.set_queue_limit(conn, queue="made-too", max_running=2, create=True).max_running == 2
    assert db.set_queue_rate(conn, queue="made-rate", jobs_per_second=1, create=True).jobs_per_second == 1
    assert not db.resume_queue(conn, queue="made").paused  # known now: it has a row


def test_set_queue_limit_below_one_has_its_own_message(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as exc:
        db.set_queue_limit(conn, queue="q", max_running=0)
    assert exc.value.sqlstate == "QV400"
    assert "max running must be at least 1" in str(exc.value)


# ---- what psql and /metrics see ----

def test_queue_stats_shows_paused_queues(conn: psycopg.Connection) -> None:
    fill(conn, "busy", 1)
    db.pause_queue(conn, queue="quiet", create=True)  # a queue with no job yet still shows
    paused = {r.queue: r.value for r in db.queue_stats(conn) if r.metric == "queue_paused"}
    assert paused == {"busy": 0, "default": 0, "quiet": 1}
    jobs = {(r.queue, r.label) for r in db.queue_stats(conn) if r.metric == "jobs"}
    assert ("quiet", "cancelled") in jobs and ("busy", "pending") in jobs


def test_list_queues_gives_settings_and_numbers(conn: psycopg.Connection) -> None:
    fill(conn, "a", 3)
    db.claim_jobs(conn, worker_id="w", limit=1, queues=["a"])
    db.pause_queue(conn, queue="b", create=True)
    db.set_queue_limit(conn, queue="a", max_running=2)
    found = {q.name: q for q in db.list_queues(conn)}
    assert sorted(found) == ["a", "b"]
    a, b = found["a"], found["b"]
    assert (a.paused, a.max_running, a.depth, a.running) == (False, 2, 2, 1)
    assert a.oldest_ready_age_seconds >= 0
    assert (b.paused, b.max_running, b.depth, b.running, b.oldest_ready_age_seconds) == (True, None, 0, 0, 0)
