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
    """A claimer whose claims find `found` jobs (0: nothing), as Claimer.found_nothing reports it."""

    def __init__(self) -> None:
        super().__init__()
        self.found = 0
        self.found_nothing = False

    def claim(self) -> list:
        self.calls += 1
        self.found_nothing = self.found == 0
        return [object()] * self.found


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
    assert loop.step() == (10.0, False)  # it found nothing: only the sweep ends the wait
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
    listening[0] = True
    assert loop.step()[0] == 9.0  # listening again: the sweep at 10 s ends the wait


def test_loop_quiet_round_keeps_a_wake_up_heard_during_its_sweep(conn: psycopg.Connection) -> None:
    now = [0.0]
    claimer = Finding()
    loop, wake = _listening_loop(conn, now, claimer, [True])
    loop.step()
    now[0] = 10.0
    loop.sweeper.sweep = lambda: wake.set() or []  # the sweep's notification arrives during the round
    loop.step(woken=False)
    assert wake.is_set()  # the next wait ends at once, and that round claims
