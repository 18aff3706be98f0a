"""worker/job/slots.py: the cap, the peak, and the lease each held job was granted."""
from __future__ import annotations

import psycopg

from pgqw import db
from pgqw.worker.job.slots import Slots, granted_lease_ms
from tests.worker.parts import claimed


def test_slots_count_held_jobs_and_the_peak(conn: psycopg.Connection) -> None:
    freed = []
    slots = Slots(2, clock=lambda: 7.0, on_free=lambda: freed.append(1))
    a, b = claimed(conn), claimed(conn)
    run_a, count, peak = slots.take(a)
    assert (count, peak, slots.free_count(), run_a.started) == (1, 1, 1, 7.0)
    run_b, count, peak = slots.take(b)
    assert (count, peak, slots.free_count()) == (2, 2, 0)
    assert slots.free(run_a) == (1, 2)
    assert slots.free(run_a) == (1, 2)  # freeing twice frees one slot
    assert slots.free_count() == 1 and len(freed) == 2  # each free wakes the main loop
    assert slots.held() == [run_b]


def test_slots_move_only_from_the_states_given(conn: psycopg.Connection) -> None:
    slots = Slots(1)
    run, _, _ = slots.take(claimed(conn))
    assert slots.move(run, "marking") and run.state == "marking"
    assert not slots.move(run, "releasing") and run.state == "marking"  # a result being recorded stays so
    assert slots.held("running") == [] and slots.held("marking") == [run]


def test_slots_wait_returns_at_its_deadline_or_when_true(conn: psycopg.Connection) -> None:
    slots = Slots(1, clock=lambda: 5.0)
    slots.take(claimed(conn))
    assert slots.wait(lambda: not slots.holding(), deadline=5.0) is False
    assert slots.wait(lambda: len(slots.holding()) == 1, deadline=None) is True


def test_granted_lease_is_what_the_claim_gave(conn: psycopg.Connection) -> None:
    assert granted_lease_ms(claimed(conn, lease_ms=250)) == 250
    conn.execute("update queue_settings set lease_ms = 4321")
    assert granted_lease_ms(claimed(conn)) == 4321  # the table's lease, as the claim answered it
    assert db.get_queue_settings(conn).lease_ms == 4321


def test_slots_reserved_for_a_claim_are_not_free(conn: psycopg.Connection) -> None:
    slots = Slots(3)
    held, _, _ = slots.take(claimed(conn))
    assert slots.reserve(5) == 2 and slots.free_count() == 0  # only what is free, and then none
    assert slots.reserve(1) == 0                              # a second claimer gets nothing meanwhile
    slots.take(claimed(conn), reserved=True)
    slots.unreserve(1)                                        # the claim found one job of the two
    assert slots.free_count() == 1 and len(slots.held()) == 2


def test_slots_reserve_counts_the_slots_a_claim_frees(conn: psycopg.Connection) -> None:
    slots = Slots(2)
    a, _, _ = slots.take(claimed(conn))
    slots.take(claimed(conn))
    assert slots.reserve(5) == 0
    assert slots.reserve(5, freeing=1) == 1   # the success recorded in the same transaction frees a's slot
    slots.free(a)
    assert slots.free_count() == 0            # freed, but promised to the claim


def test_slots_a_claim_turned_away_by_promised_slots_is_woken_when_they_come_back(conn: psycopg.Connection) -> None:
    """The recorder reserves the free slots for its claim; a notification's claim meanwhile gets none.
    When the recorder's claim gives slots back unused, the main loop is woken to claim for them."""
    woken = []
    slots = Slots(2, on_free=lambda: woken.append(1))
    assert slots.reserve(2) == 2          # the recorder's claim, under way
    assert slots.reserve(2) == 0          # the main loop, woken by a notification: turned away
    slots.unreserve(2)                    # the recorder's claim found nothing
    assert woken == [1] and slots.free_count() == 2
    assert slots.reserve(2) == 2
    slots.unreserve(2)                    # nobody was turned away: no wake-up
    assert woken == [1]
