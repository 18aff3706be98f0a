"""worker/connection/heartbeat.py: when a lease is due, what a heartbeat extends, and what it finds lost."""
from __future__ import annotations

import threading

import psycopg

from pgqw import db
from pgqw.worker.connection.heartbeat import Heartbeat
from pgqw.worker.job.slots import Slots
from tests.helpers import one
from tests.worker.parts import Direct, claimed, log, settings, steal


def _heartbeat(conn: psycopg.Connection, now: list[float], **changes):
    slots = Slots(5, clock=lambda: now[0])
    worker_log, out = log()
    return Heartbeat(settings(**changes), slots, worker_log, Direct(conn).once, clock=lambda: now[0]), slots, out


def test_heartbeat_is_due_a_third_of_each_jobs_own_lease_after_its_claim(conn: psycopg.Connection) -> None:
    now = [10.0]
    beat, slots, _ = _heartbeat(conn, now)
    with slots.lock:
        assert beat.due_in() is None  # nothing held: nothing due
    slots.take(claimed(conn, lease_ms=3000))
    slots.take(claimed(conn, lease_ms=900))
    with slots.lock:
        assert round(beat.due_in(), 3) == 0.3  # the shorter lease decides
    fixed, fixed_slots, _ = _heartbeat(conn, now, heartbeat_interval_ms=250)
    fixed_slots.take(claimed(conn, lease_ms=3000))
    with fixed_slots.lock:
        assert round(fixed.due_in(), 3) == 0.25  # HEARTBEAT_INTERVAL_MS wins


def test_heartbeat_extends_each_lease_by_the_lease_its_claim_granted(conn: psycopg.Connection) -> None:
    now = [10.0]
    beat, slots, out = _heartbeat(conn, now)
    long, short = claimed(conn, lease_ms=600_000), claimed(conn, lease_ms=5_000)
    slots.take(long)
    slots.take(short)
    now[0] = 12.0
    assert beat.beat() == []
    for job, lease_s in ((long, 600), (short, 5)):
        left = one(conn, "select extract(epoch from lease_expires_at - now()) as s from jobs where id = %s",
                   [job.id])["s"]
        assert lease_s - 1 < float(left) <= lease_s
    with slots.lock:
        assert round(beat.due_in(), 3) == 1.666  # a third of 5 s (whole ms), counted from this heartbeat
    assert out.lines("lost") == []


def test_heartbeat_finds_a_job_swept_and_taken_lost_once(conn: psycopg.Connection) -> None:
    now = [0.0]
    beat, slots, out = _heartbeat(conn, now)
    gone, kept = claimed(conn, lease_ms=1), claimed(conn, lease_ms=600_000)
    run_gone, _, _ = slots.take(gone)
    slots.take(kept)
    steal(conn, gone)
    assert beat.beat() == [run_gone] and run_gone.lost
    assert beat.beat() == []  # said once
    [line] = out.lines("lost")
    assert line.startswith(run_gone.tag()) and "no longer held by its lease" in line and "w1" not in line
    assert slots.counts["lost"] == 1


def test_heartbeat_does_not_call_a_job_being_recorded_lost(conn: psycopg.Connection) -> None:
    beat, slots, out = _heartbeat(conn, [0.0])
    job = claimed(conn)
    run, _, _ = slots.take(job)
    slots.move(run, "marking")
    db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token)  # its result just committed
    assert beat.beat() == [] and out.lines("lost") == []


def test_heartbeat_logs_a_lease_from_the_table_once_and_warns_when_too_slow(conn: psycopg.Connection) -> None:
    beat, _, out = _heartbeat(conn, [0.0])
    beat.adopt(3000)
    beat.adopt(3000)
    assert out.lines("lease") == ["3000ms granted by the claim (queue_settings); heartbeat every 1000ms"]
    assert out.lines("warning") == []
    slow, _, slow_out = _heartbeat(conn, [0.0], heartbeat_interval_ms=1500)
    slow.adopt(1000)
    assert slow_out.lines("warning") == [
        "heartbeat interval 1500ms is not shorter than the lease (1000ms): running jobs will be swept and run again"]
    told, _, told_out = _heartbeat(conn, [0.0], lease_ms=2000)
    told.adopt(2000)
    assert told_out.lines("lease") == []  # STUCK_JOB_TIMEOUT_MS: said in the start line already


def test_heartbeat_loop_returns_when_the_process_exits(conn: psycopg.Connection) -> None:
    beat, slots, _ = _heartbeat(conn, [0.0])
    exiting = threading.Event()
    exiting.set()
    beat.loop(exiting)  # returns at once


def test_heartbeat_is_woken_only_by_a_job_due_before_its_wait_ends(conn: psycopg.Connection) -> None:
    """A job taken wakes a waiting heartbeat when nothing was held (its wait had no end) or when the
    new job's lease comes due before the wait ends; any other job taken leaves it asleep."""
    now = [10.0]
    beat, slots, _ = _heartbeat(conn, now)
    woken: list[bool] = []
    wanted = slots.beat_wanted
    assert wanted is not None
    slots.beat_wanted = lambda run: woken.append(wanted(run)) or woken[-1]
    beat._waking_at = None                      # not waiting: it looks at every job before it waits
    slots.take(claimed(conn, lease_ms=3000))
    beat._waking_at = float("inf")              # waiting with no job held
    slots.take(claimed(conn, lease_ms=3000))
    beat._waking_at = 11.0                      # waiting until the first lease is due (10 + 3 s / 3)
    slots.take(claimed(conn, lease_ms=3000))    # due at 11: no sooner
    slots.take(claimed(conn, lease_ms=900))     # due at 10.3: sooner
    assert woken == [False, True, False, True]
