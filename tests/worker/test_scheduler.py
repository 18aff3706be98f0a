"""worker/maintenance/scheduler.py in-process: a real database, the clock injected (a time before the server's, so
every slot it finds due is in the server's past), no sleeps."""
from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

from pgqw import db
from pgqw.cron import due_slots, next_slot, next_slot_of
from pgqw.tasks import Context, Registry, Schedule, TaskDefinitionError
from pgqw.worker.maintenance.scheduler import REREAD_S, Scheduler
from tests.helpers import rows
from tests.worker.conftest import wait_for
from tests.worker.parts import Direct, log

T0 = datetime(2025, 3, 10, 12, 0, tzinfo=timezone.utc)  # a Monday, noon UTC: long before the server's now


class Report(BaseModel):
    customer: int = 0


def registry(**options: Any) -> Registry:
    r = Registry()

    @r.task("noop", **options)
    def noop(payload: Report, ctx: Context) -> None:
        return None

    return r


def scheduler(conn: psycopg.Connection, clock: list[datetime], tasks: Registry | None = None) -> tuple[Scheduler, Any]:
    worker_log, out = log()
    return Scheduler(tasks or registry(), worker_log, Direct(conn).once, now=lambda _conn: clock[0]), out


def since(conn: psycopg.Connection, name: str, at: datetime) -> None:
    """As if the schedule had been made at `at`."""
    conn.execute("update schedules set slots_after = %s, last_slot = null where name = %s", [at, name])


def job_slots(conn: psycopg.Connection) -> list[datetime]:
    return [r["run_at"] for r in rows(conn, "select run_at from jobs order by run_at")]


def test_due_slots_are_the_slots_after_the_last_up_to_now_oldest_first() -> None:
    assert due_slots("*/15 * * * *", T0 - timedelta(minutes=40), T0) == [
        T0 - timedelta(minutes=30), T0 - timedelta(minutes=15), T0]
    assert due_slots("*/15 * * * *", T0, T0 + timedelta(minutes=14)) == []
    assert len(due_slots("* * * * *", T0 - timedelta(days=30), T0)) == 100  # the latest 100 only
    assert due_slots("* * * * *", T0 - timedelta(days=30), T0)[-1] == T0
    assert next_slot("0 9 * * mon-fri", T0) == datetime(2025, 3, 11, 9, 0, tzinfo=timezone.utc)


def test_scheduler_registers_the_codes_schedules(conn: psycopg.Connection) -> None:
    tasks = registry(schedules=[Schedule("*/5 * * * *", name="noop-5min", payload={"customer": 7}, catch_up="all"),
                                Schedule("@daily", name="noop-daily", queue="night")])
    s, _ = scheduler(conn, [T0], tasks)
    s.register()
    assert [(x.name, x.cron, x.payload, x.queue, x.catch_up, x.source) for x in db.list_schedules(conn)] == [
        ("noop-5min", "*/5 * * * *", {"customer": 7}, None, "all", "code"),
        ("noop-daily", "@daily", {"customer": 0}, "night", "latest", "code")]


def test_scheduler_enqueues_each_slot_when_it_comes_and_sleeps_until_the_next(conn: psycopg.Connection) -> None:
    clock = [T0 + timedelta(seconds=1)]
    s, out = scheduler(conn, clock, registry(schedule="*/2 * * * *"))
    s.register()
    since(conn, "noop", T0 - timedelta(seconds=30))
    assert s.tick() == pytest.approx(REREAD_S)  # the slot at T0 is enqueued; the next is 2 minutes away
    assert job_slots(conn) == [T0]
    clock[0] = T0 + timedelta(minutes=1, seconds=59)
    assert s.tick() == pytest.approx(1.0)  # wakes at the next slot
    clock[0] = T0 + timedelta(minutes=2)
    s.tick()
    s.tick()  # the same slot again: nothing new
    assert job_slots(conn) == [T0, T0 + timedelta(minutes=2)]
    assert out.lines("scheduled")[0].startswith("noop slot 2025-03-10T12:00:00Z → job ")


@pytest.mark.parametrize("catch_up, hours", [("latest", [0]), ("all", [5, 4, 3, 2, 1, 0]), ("none", [])])
def test_scheduler_after_downtime_follows_catch_up(conn: psycopg.Connection, catch_up: str, hours: list[int]) -> None:
    clock = [T0 + timedelta(minutes=10)]  # down from before 7:00 until 12:10: the slots 7:00 to 12:00 missed
    s, _ = scheduler(conn, clock, registry(schedules=[Schedule("0 * * * *", catch_up=catch_up)]))
    s.register()
    since(conn, "noop", T0 - timedelta(hours=5, minutes=30))
    s.tick()
    assert job_slots(conn) == [T0 - timedelta(hours=h) for h in hours]
    assert db.get_schedule(conn, name="noop").slots_after == T0  # type: ignore[union-attr]  # all done
    if catch_up != "none":  # none judges lateness by the server's clock, a year past this one: SQL tests it
        clock[0] = T0 + timedelta(hours=1)
        s.tick()  # back to normal: the next slot is enqueued
        assert job_slots(conn)[-1] == T0 + timedelta(hours=1)


def test_scheduler_skips_a_paused_schedule_and_sees_a_psql_change_at_its_next_tick(conn: psycopg.Connection) -> None:
    clock = [T0]
    s, _ = scheduler(conn, clock)
    db.set_schedule(conn, name="by-dba", task_type="noop", cron="*/10 * * * *")
    since(conn, "by-dba", T0 - timedelta(minutes=5))
    db.pause_schedule(conn, name="by-dba")
    assert s.tick() == pytest.approx(REREAD_S)
    assert job_slots(conn) == []
    conn.execute("update schedules set paused = false where name = 'by-dba'")  # as if resumed back then
    s.tick()
    assert job_slots(conn) == [T0]


def test_two_schedulers_at_once_enqueue_each_slot_once(connect) -> None:  # type: ignore[no-untyped-def]
    setup = connect()
    clock = [T0]
    schedulers = [scheduler(connect(), clock, registry(schedules=[Schedule("* * * * *", catch_up="all")]))[0]
                  for _ in range(2)]
    schedulers[0].register()
    since(setup, "noop", T0 - timedelta(minutes=30))
    barrier = threading.Barrier(2)

    def run(s: Scheduler) -> None:
        barrier.wait()
        s.tick()

    threads = [threading.Thread(target=run, args=(s,)) for s in schedulers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert job_slots(setup) == [T0 - timedelta(minutes=n) for n in range(29, -1, -1)]


def test_scheduler_logs_a_schedule_it_cannot_enqueue_and_goes_on_with_the_others(conn: psycopg.Connection) -> None:
    clock = [T0]
    s, out = scheduler(conn, clock)
    for name in ("a-big", "b-fine"):
        db.set_schedule(conn, name=name, task_type="noop", cron="0 * * * *", payload={"pad": "x" * 200})
        since(conn, name, T0 - timedelta(minutes=30))
    conn.execute("update queue_settings set max_payload_bytes = 100")  # lowered after a-big was set
    conn.execute("update schedules set payload = '{}' where name = 'b-fine'")
    s.tick()
    assert job_slots(conn) == [T0]
    assert [line.split(" payload is")[0] for line in out.lines("schedule error")] == ["a-big: QV413"]


def test_next_slot_of_a_schedule_is_none_when_paused(conn: psycopg.Connection) -> None:
    row = db.set_schedule(conn, name="s", task_type="noop", cron="@hourly")
    assert next_slot_of(row, T0) is not None and next_slot_of(row, T0) > T0  # type: ignore[operator]
    assert next_slot_of(db.pause_schedule(conn, name="s"), T0) is None


@pytest.mark.parametrize("options, message", [
    ({"schedule": "61 * * * *"}, "does not parse"),
    ({"schedules": [Schedule("@daily"), Schedule("@hourly")]}, "give each a name"),
    ({"schedules": [Schedule("@daily", name="a b")]}, "schedule name"),
    ({"schedules": [Schedule("@daily", catch_up="some")]}, "catch_up"),
    ({"schedules": [Schedule("@daily", payload={"customer": "x"})]}, "invalid payload: customer"),
])
def test_a_schedule_that_cannot_work_is_a_definition_error(options: dict[str, Any], message: str) -> None:
    with pytest.raises(TaskDefinitionError, match=message):
        registry(**options)


def test_a_worker_process_enqueues_a_due_slot_and_runs_its_job(conn: psycopg.Connection, start_worker) -> None:
    """The one process-level check: the runner starts the scheduler thread on the server's clock."""
    db.set_schedule(conn, name="every-minute", task_type="noop", cron="* * * * *")
    conn.execute("update schedules set slots_after = now() - interval '90 seconds' where name = 'every-minute'")
    worker = start_worker("sched")
    line = worker.wait_log("scheduled", timeout=10)[0]
    assert "every-minute slot " in line
    job_id = rows(conn, "select id from jobs where idempotency_key like 'schedule:every-minute@%'")[0]["id"]
    wait_for("the scheduled job succeeded",
             lambda: rows(conn, "select status from jobs where id = %s", [job_id])[0]["status"] == "succeeded")


def test_scheduler_enqueues_only_the_schedules_of_types_this_worker_runs(conn: psycopg.Connection) -> None:
    """A worker that knows only refund_order leaves nightly_report's slots alone, however many pass: no
    job piles up for a type no live worker runs. When a worker that runs it comes, catch_up="latest"
    gives the one latest missed slot its job."""
    db.register_task_types(conn, types=[{"name": "nightly_report", "payload_schema": {}}])
    db.set_schedule(conn, name="nightly", task_type="nightly_report", cron="* * * * *")
    since(conn, "nightly", T0 - timedelta(seconds=30))
    refunds = Registry()
    refunds.task("refund_order", model=dict)(lambda payload, ctx: None)
    clock = [T0]
    other, _ = scheduler(conn, clock, refunds)
    for minute in range(5):
        clock[0] = T0 + timedelta(minutes=minute, seconds=1)
        other.tick()
    assert job_slots(conn) == []
    reports = Registry()
    reports.task("nightly_report", model=dict)(lambda payload, ctx: None)
    mine, _ = scheduler(conn, clock, reports)
    mine.tick()
    assert job_slots(conn) == [T0 + timedelta(minutes=4)]
    assert [r["type"] for r in rows(conn, "select type from jobs")] == ["nightly_report"]
