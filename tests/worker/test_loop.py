"""worker/loop.py: when the main loop sweeps, claims and how long it waits; errors back off."""
from __future__ import annotations

import threading

import psycopg
import pytest

from pgqw.worker.loop import MainLoop
from tests.worker.parts import Direct, log, settings


class Counting:
    def __init__(self, error: Exception | None = None) -> None:
        self.calls = 0
        self.error = error

    def claim(self) -> list:
        return self._call()

    def sweep(self) -> list:
        return self._call()

    def _call(self) -> list:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return []


def _loop(conn: psycopg.Connection, now: list[float], claimer: Counting, sweeper: Counting, **changes):
    worker_log, out = log()
    database = Direct(conn)
    stopping = threading.Event()
    loop = MainLoop(settings(poll_interval_ms=1000, sweep_interval_ms=10_000, **changes), claimer, sweeper,
                    database, worker_log, wake=threading.Event(), stopping=stopping, clock=lambda: now[0])
    return loop, database, out, stopping


def test_loop_claims_each_round_and_sweeps_when_due(conn: psycopg.Connection) -> None:
    now = [0.0]
    claimer, sweeper = Counting(), Counting()
    loop, _, _, _ = _loop(conn, now, claimer, sweeper)
    assert loop.step() == (1.0, False)  # the poll interval
    assert (claimer.calls, sweeper.calls) == (1, 0)  # the first sweep ran at start
    now[0] = 9.5
    assert loop.step() == (0.5, False)  # the next sweep comes before the next poll
    now[0] = 10.0
    loop.step()
    assert sweeper.calls == 1 and loop.next_sweep == 20.0


def test_loop_claims_nothing_while_stopping(conn: psycopg.Connection) -> None:
    claimer = Counting()
    loop, _, _, stopping = _loop(conn, [0.0], claimer, Counting())
    stopping.set()
    loop.step()
    assert claimer.calls == 0
    loop.run()  # returns at once


@pytest.mark.parametrize("error, event, text", [
    (psycopg.OperationalError("connection lost"), None, None),
    (ValueError("bug"), "error", "claim: ValueError: bug; retrying in 0.1s"),
])
def test_loop_backs_off_after_a_failed_round(conn: psycopg.Connection, error: Exception, event, text) -> None:
    loop, database, out, _ = _loop(conn, [0.0], Counting(error), Counting())
    assert loop.step() == (0.1, True)
    assert loop.step() == (0.2, True)
    if event is None:
        assert [e[0] for e in database.errors] == ["claim", "claim"] and database.checks == 2
    else:
        assert out.lines(event)[0] == text


class Finding(Counting):
    """A claimer whose claims find `found` jobs (0: nothing), as Claimer.found_nothing reports it; wait() is
    wait_for_jobs (its snapshots are counted), settled() answers `settle`."""

    def __init__(self) -> None:
        super().__init__()
        self.found = 0
        self.found_nothing = False
        self.waits: list[int] = []
        self.settle = True
        self.asked: list[str] = []

    def claim(self) -> list:
        self.calls += 1
        self.found_nothing = self.found == 0
        return [object()] * self.found

    def wait(self, for_ms: int) -> str:
        self.waits.append(for_ms)
        return f"snapshot-{len(self.waits)}"

    def settled(self, snapshot: str) -> bool:
        self.asked.append(snapshot)
        return self.settle


def _listening_loop(conn: psycopg.Connection, now: list[float], claimer: Counting, listening: list[bool]):
    worker_log, _ = log()
    wake = threading.Event()
    loop = MainLoop(settings(poll_interval_ms=1000, sweep_interval_ms=10_000), claimer, Counting(), Direct(conn),
                    worker_log, wake=wake, stopping=threading.Event(), clock=lambda: now[0],
                    listening=lambda: listening[0])
    return loop, wake


def test_loop_listening_stops_polling_once_a_claim_found_nothing(conn: psycopg.Connection) -> None:
    now, listening = [0.0], [True]
    claimer = Finding()
    claimer.found = 3
    loop, _ = _listening_loop(conn, now, claimer, listening)
    assert loop.step() == (1.0, False)  # it found jobs: the poll interval
    claimer.found = 0
    assert loop.step() == (0.005, False)  # it found nothing: it waits (wait_for_jobs), then settles
    assert claimer.waits == [60_000]
    assert loop.step(woken=False) == (10.0, False)  # settled, and claimed once more: only the sweep ends the wait
    assert claimer.asked == ["snapshot-1"] and claimer.calls == 3
    # The wait timed out at the sweep: the round sweeps and claims nothing.
    now[0] = 10.0
    calls = claimer.calls
    loop.step(woken=False)
    assert claimer.calls == calls and loop.sweeper.calls == 1
    # A wake-up (a notification, a freed slot) claims as before.
    loop.step(woken=True)
    assert claimer.calls == calls + 1


def test_loop_polls_when_not_listening_or_the_listen_connection_is_down(conn: psycopg.Connection) -> None:
    now, listening = [0.0], [False]
    claimer = Finding()
    loop, _ = _listening_loop(conn, now, claimer, listening)
    assert loop.step() == (1.0, False)  # found nothing, but no notification would come: poll
    now[0] = 1.0
    loop.step(woken=False)  # the poll's timeout: a claim
    assert claimer.calls == 2
    assert claimer.waits == []  # no notification would reach it: it does not say it waits
    listening[0] = True
    assert loop.step()[0] == 0.005  # listening again: it waits for notifications, and settles
    assert loop.step()[0] == 9.0  # then the sweep at 10 s ends the wait


def test_loop_quiet_round_keeps_a_wake_up_heard_during_its_sweep(conn: psycopg.Connection) -> None:
    now = [0.0]
    claimer = Finding()
    loop, wake = _listening_loop(conn, now, claimer, [True])
    loop.step()
    loop.step(woken=False)  # settled
    now[0] = 10.0
    loop.sweeper.sweep = lambda: wake.set() or []  # the sweep's notification arrives during the round
    loop.step(woken=False)
    assert wake.is_set()  # the next wait ends at once, and that round claims


def test_loop_until_settled_claims_each_round_with_waits_doubling_to_the_poll(conn: psycopg.Connection) -> None:
    """A producer that enqueued without seeing the wait is still in progress: each round asks again, claims,
    and waits twice as long, up to the poll interval; once settled, the claim after it is the last."""
    now = [0.0]
    claimer = Finding()
    claimer.settle = False
    loop, _ = _listening_loop(conn, now, claimer, [True])
    waits = [loop.step(woken=False)[0] for _ in range(10)]
    assert waits == [0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.0, 1.0]
    assert claimer.calls == 10 and claimer.asked == ["snapshot-1"] * 9
    claimer.settle = True
    assert loop.step(woken=False) == (10.0, False)
    assert claimer.calls == 11 and loop.settling is None
    loop.step(woken=False)  # a quiet round: nothing to settle, nothing claimed
    assert claimer.calls == 11


def test_loop_renews_its_wait_before_it_runs_out_and_waits_again_after_being_busy(conn: psycopg.Connection) -> None:
    now = [0.0]
    claimer = Finding()
    worker_log, _ = log()
    loop = MainLoop(settings(poll_interval_ms=1000, sweep_interval_ms=100_000), claimer, Counting(), Direct(conn),
                    worker_log, wake=threading.Event(), stopping=threading.Event(), clock=lambda: now[0],
                    listening=lambda: True)
    loop.step()
    assert loop.step(woken=False) == (30.0, False)  # settled: the renewal at half of 60 s ends the wait
    now[0] = 30.0
    loop.step(woken=False)
    assert claimer.waits == [60_000, 60_000]  # renewed (and settled again)
    claimer.found = 2
    now[0] = 31.0
    loop.step()  # busy: no wait_for_jobs while it finds jobs, however long
    now[0] = 200.0
    loop.step()
    assert len(claimer.waits) == 2
    claimer.found = 0
    loop.step()
    assert len(claimer.waits) == 3  # nothing again: it waits again, its earlier wait long run out


def test_loop_without_wait_for_jobs_in_the_database_warns_once_polls_and_tries_again(conn: psycopg.Connection) -> None:
    """A database migrated before wait_for_jobs (or a role without its grant): producers may not notify this
    worker, so it polls; it asks again at each renewal, and stops polling once it can wait."""
    now = [0.0]
    claimer = Finding()
    missing = [True]
    real_wait = claimer.wait

    def wait(for_ms: int) -> str:
        if missing[0]:
            raise psycopg.errors.UndefinedFunction("function pgqw.wait_for_jobs does not exist")
        return real_wait(for_ms)

    claimer.wait = wait  # type: ignore[method-assign]
    worker_log, out = log()
    loop = MainLoop(settings(poll_interval_ms=1000, sweep_interval_ms=10_000), claimer, Counting(), Direct(conn),
                    worker_log, wake=threading.Event(), stopping=threading.Event(), clock=lambda: now[0],
                    listening=lambda: True)
    assert loop.step() == (1.0, False)  # it cannot wait: it polls
    now[0] = 1.0
    assert loop.step(woken=False) == (1.0, False)  # not asked again before the renewal time
    assert len(out.lines("warning")) == 1 and "wait_for_jobs cannot be called" in out.lines("warning")[0]
    missing[0] = False  # migrated meanwhile
    now[0] = 30.0
    assert loop.step(woken=False) == (0.005, False)  # it waits now, and settles
    assert loop.step(woken=False)[1] is False and not loop.polling
    assert len(out.lines("warning")) == 1


def test_loop_without_waits_settled_polls_and_keeps_claiming(conn: psycopg.Connection) -> None:
    now = [0.0]
    claimer = Finding()

    def settled(xid: str) -> bool:
        raise psycopg.errors.InsufficientPrivilege("permission denied for function waits_settled")

    claimer.settled = settled  # type: ignore[method-assign]
    worker_log, out = log()
    loop = MainLoop(settings(poll_interval_ms=1000, sweep_interval_ms=10_000), claimer, Counting(), Direct(conn),
                    worker_log, wake=threading.Event(), stopping=threading.Event(), clock=lambda: now[0],
                    listening=lambda: True)
    loop.step()  # waits, settling
    assert loop.step(woken=False) == (1.0, False)  # waits_settled refused: it polls, and this round claimed
    assert claimer.calls == 2 and loop.settling is None
    assert len(out.lines("warning")) == 1


def test_loop_a_claim_that_left_slots_free_says_it_waits_too(conn: psycopg.Connection) -> None:
    """A worker whose claim took some jobs but fewer than its free slots is woken for the next one."""
    now = [0.0]
    claimer = Finding()
    claimer.found = 2
    claimer.short = True  # type: ignore[attr-defined]
    loop, _ = _listening_loop(conn, now, claimer, [True])
    loop.step()
    assert claimer.waits == [60_000] and loop.polling  # it found jobs: it polls as well
    claimer.short = False  # type: ignore[attr-defined]  # full: every slot taken
    now[0] = 40.0
    loop.step()
    assert claimer.waits == [60_000]
