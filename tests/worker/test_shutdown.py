"""worker/shutdown.py: the grace, the hand-back, its answers, the summary and the signals."""
from __future__ import annotations

import signal
import threading

import psycopg

from pgqw.worker.job.recorder import EARLIER_TRY
from pgqw.worker.job.slots import Slots
from pgqw.worker.shutdown import Shutdown, Signals
from tests.helpers import job_row
from tests.worker.parts import Direct, LostReply, claimed, log, settings, steal


def _shutdown(conn: psycopg.Connection, *, lost_reply: bool = False, grace_ms: int = 0):
    slots = Slots(3, clock=lambda: 50.0)
    worker_log, out = log()
    database = (LostReply if lost_reply else Direct)(conn)
    return Shutdown(settings(shutdown_grace_ms=grace_ms), slots, worker_log, database, clock=lambda: 50.0), slots, out


def test_shutdown_hands_back_what_still_runs_after_the_grace(conn: psycopg.Connection) -> None:
    shutdown, slots, out = _shutdown(conn)
    running, _, _ = slots.take(claimed(conn))
    marking, _, _ = slots.take(claimed(conn))
    slots.move(marking, "marking")
    assert shutdown.leftovers(deadline=50.0) == [running]  # the grace is over
    assert (running.state, marking.state) == ("releasing", "marking")
    shutdown.hand_back(running)
    row = job_row(conn, running.job.id)
    assert (row["status"], row["max_attempts"], row["locked_by"]) == ("pending", 6, None)
    assert out.lines("handed back") == [
        f"{running.tag()} (still running after the 0.0s grace; pending again for any worker)  (running 1/3)"]
    assert slots.counts["handed back"] == 1


def test_shutdown_hand_back_after_a_lost_reply_is_handed_back(conn: psycopg.Connection) -> None:
    shutdown, slots, out = _shutdown(conn, lost_reply=True)
    run, _, _ = slots.take(claimed(conn))
    shutdown.hand_back(run)
    [line] = out.lines("handed back")
    assert EARLIER_TRY in line
    assert job_row(conn, run.job.id)["max_attempts"] == 6  # handed back once


def test_shutdown_job_handed_on_meanwhile_is_not_handed_back(conn: psycopg.Connection) -> None:
    shutdown, slots, out = _shutdown(conn)
    run, _, _ = slots.take(claimed(conn, lease_ms=1))
    steal(conn, run.job)
    shutdown.hand_back(run)
    [line] = out.lines("not handed back")
    assert "is no longer held by its lease" in line and "w1" not in line and slots.free_count() == 3
    assert "the sweep will recover it" not in line  # another worker holds it: nothing for a sweep to do
    assert job_row(conn, run.job.id)["locked_by"] == "w2"  # the thief's attempt is left alone


def test_shutdown_run_says_what_it_waits_for_and_the_summary_counts(conn: psycopg.Connection) -> None:
    shutdown, slots, out = _shutdown(conn, grace_ms=1500)
    shutdown.grace_s = 0.0  # the grace the line names, without waiting it out
    slots.take(claimed(conn))
    shutdown.run("SIGTERM")
    assert out.lines("stopping") == ["(SIGTERM): no more claims; waiting up to 0.0s for 1 running job(s)"]
    assert len(out.lines("handed back")) == 1
    slots.count("succeeded")
    shutdown.summary()
    assert out.lines("stopped") == ["1 succeeded, 0 failed, 0 dead, 1 handed back, 0 swept, peak 1/3"]


def test_signals_first_stops_second_exits_at_once() -> None:
    worker_log, _ = log()
    stopped = threading.Event()
    said: list[str] = []
    exits: list[int] = []
    names: list[str] = []

    def stop(name: str) -> None:
        names.append(name)
        stopped.set()

    signals = Signals(worker_log, stop, stopping=stopped.is_set, exit=exits.append, write=said.append)
    signals.on_signal(signal.SIGTERM)
    assert stopped.wait(5) and names == ["SIGTERM"] and exits == []
    signals.on_signal(signal.SIGINT)
    assert exits == [128 + signal.SIGINT]
    assert said == ["16:43:07.167Z [w1] exit    second SIGINT: exiting now; running jobs are left to the sweep\n"]
