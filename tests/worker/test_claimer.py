"""worker/job/claimer.py: claims only for free slots, starts and dispatches each job, tells the lease."""
from __future__ import annotations

import psycopg
import pytest

from pgqw.worker.job.claimer import ClaimRequest, claimer_for
from pgqw.worker.job.slots import Running, Slots
from tests.helpers import enqueue, job_row
from tests.worker.parts import Direct, log


def _claimer(conn: psycopg.Connection, cap: int, *, batch: bool, request: ClaimRequest | None = None,
             stopping: bool = False):
    slots = Slots(cap)
    dispatched: list[Running] = []
    leases: list[int] = []
    calls: list[int] = []
    direct = Direct(conn)

    def run(fn):
        calls.append(1)
        return direct.once(fn)

    worker_log, out = log()
    claimer = claimer_for(batch)(request or ClaimRequest("w1"), slots, worker_log, run,
                                 dispatch=dispatched.append, on_lease=leases.append, stopping=lambda: stopping)
    return claimer, slots, dispatched, leases, calls, out


@pytest.mark.parametrize("batch, round_trips", [(True, 1), (False, 2)])
def test_claimer_takes_only_as_many_jobs_as_free_slots(conn: psycopg.Connection, batch: bool,
                                                       round_trips: int) -> None:
    ids = [enqueue(conn).id for _ in range(3)]
    claimer, slots, dispatched, leases, calls, out = _claimer(conn, 2, batch=batch)
    started = claimer.claim()
    assert [r.job.id for r in started] == [r.job.id for r in dispatched] == ids[:2]
    assert len(calls) == round_trips
    assert slots.free_count() == 0 and job_row(conn, ids[2])["status"] == "pending"
    assert [line.split("  ")[1] for line in out.lines("start")] == ["(running 1/2, peak 1)", "(running 2/2, peak 2)"]
    assert leases == [60_000, 60_000]  # the table's lease, as the claim granted it
    # No free slot: no claim at all, not even a round trip.
    assert claimer.claim() == [] and len(calls) == round_trips


def test_claimer_one_at_a_time_stops_at_an_empty_queue(conn: psycopg.Connection) -> None:
    enqueue(conn)
    claimer, slots, dispatched, _, calls, _ = _claimer(conn, 3, batch=False)
    assert len(claimer.claim()) == 1 and len(calls) == 2  # the second claim found nothing
    assert slots.free_count() == 2


def test_claimer_claims_nothing_while_stopping(conn: psycopg.Connection) -> None:
    enqueue(conn)
    for batch in (True, False):
        claimer, _, dispatched, _, calls, _ = _claimer(conn, 2, batch=batch, stopping=True)
        assert claimer.claim() == [] and calls == [] and dispatched == []


def test_claim_request_carries_queues_and_lease(conn: psycopg.Connection) -> None:
    enqueue(conn)
    mine = enqueue(conn, queue="emails")
    claimer, _, _, leases, _, _ = _claimer(conn, 5, batch=True,
                                           request=ClaimRequest("w1", queues=("emails",), lease_ms=1500))
    [run] = claimer.claim()
    assert run.job.id == mine.id and run.lease_ms == 1500 and leases == [1500]
