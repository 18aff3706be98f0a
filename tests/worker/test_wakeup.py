"""worker/wakeup.py, worker/loop.py (MainLoop.next_wait) and worker/connection/listener.py: when a worker wakes for a job that
comes due later. Time is an injected clock; no sleeps."""
from __future__ import annotations

import threading

import psycopg
import pytest

from pgqw import db
from pgqw.worker.connection.listener import Listener, parse_due
from pgqw.worker.loop import ASK_LIMIT, MainLoop
from pgqw.worker.wakeup import Wakeup
from tests.worker.parts import Direct, log, settings


class Fake:
    """A claimer and sweeper: counts claims, and answers next_due with what the test says."""

    def __init__(self, answers: list[list[int]] | None = None) -> None:
        self.claims = 0
        self.asked = 0
        self.answers = list(answers or [])

    def claim(self) -> list:
        self.claims += 1
        return []

    def sweep(self) -> list:
        return []

    def next_due(self, limit: int) -> list[int]:
        assert limit == ASK_LIMIT
        self.asked += 1
        return self.answers.pop(0) if self.answers else []


def _loop(conn: psycopg.Connection, now: list[float], fake: Fake, **changes) -> tuple[MainLoop, Wakeup]:
    wake = Wakeup(clock=lambda: now[0])
    loop = MainLoop(settings(poll_interval_ms=1000, sweep_interval_ms=10_000, **changes), fake, fake,
                    Direct(conn), log()[0], wake=wake, stopping=threading.Event(), clock=lambda: now[0])
    return loop, wake


def test_loop_waits_until_the_earliest_known_due_time(conn: psycopg.Connection) -> None:
    now = [0.0]
    fake = Fake()
    loop, wake = _loop(conn, now, fake)
    assert loop.step() == (1.0, False) and fake.asked == 1  # at start: asked once, nothing waiting
    wake.at(0.3)
    wake.at(0.7)
    assert loop.next_wait() == pytest.approx(0.3)
    now[0] = 0.3
    assert wake.wait(5)  # due: returns at once
    assert loop.step() == (pytest.approx(0.4), False)  # the round claimed; the next one is at 0.7
    assert fake.claims == 2 and wake.earliest() == 0.7
    now[0] = 0.7
    loop.step()
    assert loop.next_wait() == 1.0 and wake.earliest() is None  # back to the poll interval
    assert fake.asked == 1  # knowing every time, it never asked again


def test_loop_a_due_time_past_the_next_sweep_or_poll_does_not_lengthen_the_wait(conn: psycopg.Connection) -> None:
    now = [0.0]
    loop, wake = _loop(conn, now, Fake())
    loop.step()
    wake.at(60.0)
    assert loop.next_wait() == 1.0
    now[0] = 9.8
    assert loop.next_wait() == pytest.approx(0.2)


def test_loop_a_due_time_already_past_waits_nothing_then_is_forgotten(conn: psycopg.Connection) -> None:
    now = [5.0]
    loop, wake = _loop(conn, now, Fake())
    wake.at(4.0)
    assert loop.next_wait() == 0.0
    loop.step()
    assert loop.next_wait() == 1.0  # no busy loop: the round took it


def test_loop_asks_at_start_then_only_when_a_full_answer_runs_out(conn: psycopg.Connection) -> None:
    now = [0.0]
    full = [100 + i for i in range(ASK_LIMIT)]  # 0.1 s to 0.199 s ahead, as many as asked for
    fake = Fake([full, [500]])
    loop, wake = _loop(conn, now, fake)
    loop.step()
    assert fake.asked == 1 and wake.earliest() == pytest.approx(0.1) and wake.horizon == pytest.approx(0.199)
    now[0] = 0.15
    loop.step()
    assert fake.asked == 1  # not yet at the end of what it was told
    now[0] = 0.199
    loop.step()
    assert fake.asked == 2 and wake.horizon is None and wake.earliest() == pytest.approx(0.699)
    for t in (0.3, 0.7, 1.7, 2.7):
        now[0] = t
        loop.step()
    assert fake.asked == 2 and fake.claims == 7  # idle rounds: a claim each, no question


def test_loop_without_listen_never_asks(conn: psycopg.Connection) -> None:
    now = [0.0]
    fake = Fake([[100]])
    loop, _ = _loop(conn, now, fake, listen=False)
    loop.step()
    assert fake.asked == 0 and fake.claims == 1


def test_loop_a_plain_event_keeps_the_poll(conn: psycopg.Connection) -> None:
    fake = Fake()
    loop = MainLoop(settings(poll_interval_ms=1000), fake, fake, Direct(conn), log()[0], wake=threading.Event(),
                    stopping=threading.Event(), clock=lambda: 0.0)
    assert loop.step() == (1.0, False) and fake.asked == 0


def test_wakeup_more_after_a_time_makes_it_ask_then() -> None:
    wake = Wakeup(clock=lambda: 0.0)
    wake.at(2.0, more=True)
    assert wake.horizon == 2.0 and not wake.needs_asking(1.9) and wake.needs_asking(2.0)


def test_wakeup_an_answer_keeps_a_doubt_heard_while_asking() -> None:
    now = [0.0]
    wake = Wakeup(clock=lambda: now[0])
    wake.unsure(0.0)
    now[0] = 0.005
    wake.at(3.0, more=True)  # heard after the question was sent (the answer does not cover it)
    wake.learn(0.0, 0.01, [], complete=True)
    assert wake.horizon == 3.0
    wake.learn(3.0, 3.01, [], complete=True)
    assert wake.horizon is None


def test_wakeup_keeps_at_most_max_times_and_asks_for_the_rest() -> None:
    wake = Wakeup(clock=lambda: 0.0, max_times=4)
    for t in (5.0, 1.0, 4.0, 2.0, 3.0):
        wake.at(t)
    assert wake.horizon == 4.0  # 4.0 and 5.0 were forgotten: asked for when the round reaches 4.0
    assert [wake.take_due(t) for t in (1.0, 2.0, 3.0)] == [1, 1, 1] and wake.earliest() is None


def test_wakeup_wait_ends_on_set_on_a_due_time_and_on_timeout() -> None:
    now = [0.0]
    wake = Wakeup(clock=lambda: now[0])
    assert wake.wait(0) is False
    wake.at(0.0)
    assert wake.wait(30) is True
    wake.take_due(0.0)
    wake.set()
    assert wake.wait(30) is True and wake.is_set()
    wake.clear()
    assert not wake.is_set()


def test_wakeup_an_earlier_time_ends_a_wait_in_progress() -> None:
    """Real clock: the waiter waits up to 30 s; a time due now, added from another thread, ends it."""
    wake = Wakeup()
    wake.at(wake.clock() + 3600)
    waiting = threading.Event()
    done: list[bool] = []

    def waiter() -> None:
        waiting.set()
        done.append(wake.wait(30))

    thread = threading.Thread(target=waiter)
    thread.start()
    waiting.wait(5)
    wake.at(wake.clock())
    thread.join(10)
    assert done == [True] and not wake.is_set()  # a due time, not a claim-now signal


@pytest.mark.parametrize("payload, parsed", [
    ("1500 emails", (1500, False, "emails")),
    ("1+ emails", (1, True, "emails")),
    ("7 a b@c", (7, False, "a b@c")),
    ("emails", None),
    ("12x emails", None),
    ("-5 emails", None),
    ("15 ", None),
    ("\u0661\u0662 emails", None),  # Arabic-Indic digits are digits to str.isdigit, not to us
    ("99999999999999 q", None),
])
def test_listener_parses_the_due_payload(payload: str, parsed) -> None:
    assert parse_due(payload) == parsed


def test_listener_hands_due_times_of_its_queues_to_the_wakeup() -> None:
    now = [10.0]
    wake = Wakeup(clock=lambda: now[0])
    listener = Listener(lambda: None, ("emails",), wake, log()[0], threading.Event())
    listener.heard_due("1500 emails")
    listener.heard_due("500 default")  # not its queue
    assert wake.earliest() == pytest.approx(11.5) and not wake.is_set()
    listener.heard_due("in a while")  # unreadable: claim, as for a plain notification
    assert wake.is_set()


def test_listener_hears_a_job_for_later_from_the_database(db_url: str, conn: psycopg.Connection) -> None:
    wake = Wakeup()
    worker_log, out = log()
    listener = Listener(lambda: psycopg.connect(db_url, autocommit=True), None, wake, worker_log, threading.Event())
    try:
        listener.poll(timeout=0)  # connects: unsure from now, and claims once
        assert wake.needs_asking(wake.clock()) and wake.is_set()
        wake.clear()
        db.wait_for_jobs(conn, worker_id="w1")  # a worker waits: producers notify
        before = wake.clock()
        conn.execute("select enqueue_job('noop', '{}', 'later', p_run_at => now() + interval '2 seconds')")
        assert len(listener.poll(timeout=5, stop_after=1)) == 1
        assert not wake.is_set()
        assert before + 1.5 < wake.earliest() < wake.clock() + 2.0
    finally:
        listener.close()


def test_loop_a_database_without_next_run_at_warns_once_and_keeps_claiming(conn: psycopg.Connection) -> None:
    class Old(Fake):
        def next_due(self, limit: int) -> list[int]:
            self.asked += 1
            conn.execute("select * from no_such_function_next_run_at()")
            return []

    now = [0.0]
    fake = Old()
    wake = Wakeup(clock=lambda: now[0])
    worker_log, out = log()
    loop = MainLoop(settings(poll_interval_ms=1000), fake, fake, Direct(conn), worker_log, wake=wake,
                    stopping=threading.Event(), clock=lambda: now[0])
    assert loop.step() == (1.0, False)
    wake.unsure(0.0)
    assert loop.step() == (1.0, False)
    assert fake.asked == 1 and fake.claims == 2
    assert len(out.lines("warning")) == 1 and "run `pgqw migrate`" in out.lines("warning")[0]
