"""Bulk actions (retry_dead_jobs, cancel_jobs): every given filter narrows the rows (type, queue, last_error as
a case-insensitive substring, since/until, workflow, batch; cancel_jobs' statuses), at most p_limit a call,
the count returned; a row another session holds locked is skipped without waiting and not counted; a
processing job is asked to cancel and counted; bad arguments are refused with QV400 and change nothing."""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.helpers import one, rows
from tests.sql.test_dependencies import Step

WORKFLOW = uuid.UUID("00000000-0000-4000-8000-0000000000aa")
CASTS = {"queue": "text", "max_attempts": "integer", "depends_on": "uuid[]", "workflow_id": "uuid"}


def enqueue(conn: psycopg.Connection, type: str, **named: Any) -> dict[str, Any]:
    args = "".join(f", p_{name} => %({name})s::{CASTS[name]}" for name in named)
    return one(conn, f"select (e.job).* from enqueue_job(%(type)s, '{{}}'::jsonb, %(key)s{args}) e",
               {"type": type, "key": f"k-{uuid.uuid4()}", **named})


def in_batch(conn: psycopg.Connection, type: str, queue: str, max_attempts: int = 5) -> dict[str, Any]:
    elements = [{"type": type, "payload": {}, "idempotency_key": f"k-{uuid.uuid4()}", "queue": queue,
                 "max_attempts": max_attempts}]
    return one(conn, "select e.batch_id, (e.job).* from enqueue_batch(%s::jsonb) e", [Jsonb(elements)])


def claim(conn: psycopg.Connection, job_id: Any) -> dict[str, Any]:
    """Claims that job from its queue and type, where the tests leave no other job ready."""
    found = one(conn, "select queue, type from jobs where id = %s", [job_id])
    got = rows(conn, "select (c.job).*, c.lease_token from claim_jobs('w', 10, array[%s], null, array[%s]) c",
               [found["queue"], found["type"]])
    assert [j["id"] for j in got] == [job_id], f"{job_id} was not the one job ready: {got}"
    return got[0]


def kill(conn: psycopg.Connection, job_id: Any, error: str) -> None:
    claimed = claim(conn, job_id)
    assert one(conn, "select (m.job).status from mark_failed(%s, %s, %s, false) m",
               [job_id, claimed["lease_token"], error])["status"] == "dead"


def statuses(conn: psycopg.Connection, names: dict[str, Any]) -> dict[str, str]:
    found = {r["id"]: r["status"] for r in rows(conn, "select id, status from jobs")}
    return {name: found[job_id] for name, job_id in names.items()}


def cancel_requested(conn: psycopg.Connection) -> set[Any]:
    return {r["job_id"] for r in rows(conn, "select job_id from job_cancel_requests")}


def everything(conn: psycopg.Connection) -> list[Any]:
    return [rows(conn, "select * from jobs order by id"), rows(conn, "select * from job_attempts order by job_id"),
            rows(conn, "select * from job_cancel_requests order by job_id")]


# ---- retry_dead_jobs ----

def dead_jobs(conn: psycopg.Connection) -> tuple[dict[str, Any], dict[str, Any], datetime]:
    """Five dead jobs (d1..d5, finished an hour apart from t0), one succeeded and one waiting; their ids,
    the batch of d5, and t0."""
    made = {}
    for name, (type, queue, error) in {"d1": ("t", "q1", "Connection Refused by host"), "d2": ("email", "q1", "timeout"),
                                       "d3": ("email", "q2", "connection REFUSED"), "d4": ("t", "q2", "bad payload"),
                                       "d5": ("report", "q3", "bad payload")}.items():
        if name == "d4":
            made[name] = enqueue(conn, type, queue=queue, max_attempts=1, workflow_id=WORKFLOW)
        elif name == "d5":
            made[name] = in_batch(conn, type, queue, max_attempts=1)
        else:
            made[name] = enqueue(conn, type, queue=queue, max_attempts=1)
        kill(conn, made[name]["id"], error)
    done = enqueue(conn, "email", queue="q1")
    conn.execute("select * from mark_succeeded(%s, %s)", [done["id"], claim(conn, done["id"])["lease_token"]])
    waiting = enqueue(conn, "t", queue="q1")
    t0 = one(conn, "select date_trunc('second', now()) - interval '10 hours' as t")["t"]
    for n, name in enumerate(("d1", "d2", "d3", "d4", "d5")):
        conn.execute("update jobs set finished_at = %s where id = %s", [t0 + timedelta(hours=n), made[name]["id"]])
    names = {name: job["id"] for name, job in made.items()} | {"waiting": waiting["id"], "done": done["id"]}
    return names, {"batch": made["d5"]["batch_id"]}, t0


@pytest.mark.parametrize("filters, expected", [
    ({}, {"d1", "d2", "d3", "d4", "d5"}),
    ({"type": "email"}, {"d2", "d3"}),
    ({"queue": "q2"}, {"d3", "d4"}),
    ({"error": "refused"}, {"d1", "d3"}),
    ({"error": "CONNECTION refused"}, {"d1", "d3"}),
    ({"error": "nothing like it"}, set()),
    ({"since": 1}, {"d2", "d3", "d4", "d5"}),
    ({"until": 2}, {"d1", "d2"}),
    ({"since": 1, "until": 2}, {"d2"}),  # [since, until)
    ({"workflow_id": WORKFLOW}, {"d4"}),
    ({"batch_id": "batch"}, {"d5"}),
    ({"type": "t", "queue": "q2"}, {"d4"}),
    ({"type": "email", "error": "timeout", "until": 3}, {"d2"}),
])
def test_retry_dead_jobs_takes_the_dead_jobs_every_filter_matches(conn: psycopg.Connection, filters: dict[str, Any],
                                                                 expected: set[str]) -> None:
    names, batch, t0 = dead_jobs(conn)
    args = dict(filters)
    for bound in ("since", "until"):
        if bound in args:
            args[bound] = t0 + timedelta(hours=args[bound])
    if args.get("batch_id") == "batch":
        args["batch_id"] = batch["batch"]
    named = "".join(f", p_{name} => %({name})s" for name in args)
    n = one(conn, f"select retry_dead_jobs(p_limit => 1000{named}) as n", args)["n"]
    assert n == len(expected)
    got = statuses(conn, names)
    assert {name for name, s in got.items() if s == "pending"} == expected | {"waiting"}
    assert {name for name, s in got.items() if s == "dead"} == {"d1", "d2", "d3", "d4", "d5"} - expected
    retried = rows(conn, "select max_attempts, run_at <= now() as due from jobs where id = any (%s)",
                   [[names[name] for name in expected]])
    assert all(r == {"max_attempts": 6, "due": True} for r in retried)  # retry_dead: 1 + retry_extra_attempts


def test_retry_dead_jobs_takes_at_most_the_limit_a_call(conn: psycopg.Connection) -> None:
    dead_jobs(conn)
    assert [one(conn, "select retry_dead_jobs(p_limit => 2) as n")["n"] for _ in range(4)] == [2, 2, 1, 0]
    assert one(conn, "select count(*) as n from jobs where status = 'dead'")["n"] == 0


def test_retry_dead_jobs_skips_a_row_another_session_holds_without_waiting(connect) -> None:
    """Step by step: L holds d1's row (select ... for update) in an open transaction; the bulk call, which
    would fail on its lock_timeout if it waited, retries the other four and does not count d1; after L
    ends, the next call takes d1."""
    setup = connect()
    names, _, _ = dead_jobs(setup)
    holder = connect(autocommit=False)
    holder.execute("select 1 from jobs where id = %s for update", [names["d1"]])
    bulk = connect(options="-c lock_timeout=2s")
    assert one(bulk, "select retry_dead_jobs() as n")["n"] == 4
    assert statuses(setup, names)["d1"] == "dead"
    holder.commit()
    assert one(bulk, "select retry_dead_jobs() as n")["n"] == 1
    assert statuses(setup, names)["d1"] == "pending"


# ---- cancel_jobs ----

def live_jobs(conn: psycopg.Connection) -> tuple[dict[str, Any], dict[str, Any], datetime]:
    """c1, c2 pending; c3 failed (waiting for its retry); c4 processing (in WORKFLOW); c5 blocked on c4
    (so in WORKFLOW too); c6 pending in a batch; created an hour apart from t0. A dead and a succeeded job
    besides, which no cancel_jobs touches."""
    c1 = enqueue(conn, "t", queue="q1")
    c2 = enqueue(conn, "email", queue="q1")
    c3 = enqueue(conn, "email", queue="q2")
    c4 = enqueue(conn, "t", queue="q2", workflow_id=WORKFLOW)
    c5 = enqueue(conn, "report", queue="q3", depends_on=[c4["id"]])
    c6 = in_batch(conn, "report", "q3")
    dead = enqueue(conn, "t", queue="q8", max_attempts=1)
    done = enqueue(conn, "t", queue="q9")
    held = claim(conn, c3["id"])
    conn.execute("select * from mark_failed(%s, %s, 'Connection refused', true, 60000, 0)",
                 [c3["id"], held["lease_token"]])
    claim(conn, c4["id"])
    kill(conn, dead["id"], "refused too")
    conn.execute("select * from mark_succeeded(%s, %s)", [done["id"], claim(conn, done["id"])["lease_token"]])
    t0 = one(conn, "select date_trunc('second', now()) - interval '10 hours' as t")["t"]
    for n, job in enumerate((c1, c2, c3, c4, c5, c6)):
        conn.execute("update jobs set created_at = %s where id = %s", [t0 + timedelta(hours=n), job["id"]])
    names = {"c1": c1["id"], "c2": c2["id"], "c3": c3["id"], "c4": c4["id"], "c5": c5["id"], "c6": c6["id"],
             "dead": dead["id"], "done": done["id"]}
    assert statuses(conn, names) == {"c1": "pending", "c2": "pending", "c3": "failed", "c4": "processing",
                                     "c5": "blocked", "c6": "pending", "dead": "dead", "done": "succeeded"}
    return names, {"batch": c6["batch_id"]}, t0


@pytest.mark.parametrize("filters, expected", [
    ({}, {"c1", "c2", "c3", "c4", "c5", "c6"}),
    ({"type": "email"}, {"c2", "c3"}),
    ({"type": "t"}, {"c1", "c4"}),
    ({"queue": "q3"}, {"c5", "c6"}),
    ({"error": "REFUSED"}, {"c3"}),
    ({"since": 2}, {"c3", "c4", "c5", "c6"}),
    ({"until": 2}, {"c1", "c2"}),
    ({"since": 1, "until": 3}, {"c2", "c3"}),  # [since, until) of created_at
    ({"workflow_id": WORKFLOW}, {"c4", "c5"}),
    ({"batch_id": "batch"}, {"c6"}),
    ({"statuses": ["pending"]}, {"c1", "c2", "c6"}),
    ({"statuses": ["failed", "blocked"]}, {"c3", "c5"}),
    ({"statuses": ["processing"]}, {"c4"}),
    ({"statuses": ["blocked", "pending", "failed", "processing"]}, {"c1", "c2", "c3", "c4", "c5", "c6"}),
    ({"statuses": ["pending"], "queue": "q1", "type": "email"}, {"c2"}),
])
def test_cancel_jobs_takes_the_jobs_every_filter_matches(conn: psycopg.Connection, filters: dict[str, Any],
                                                         expected: set[str]) -> None:
    names, batch, t0 = live_jobs(conn)
    before = statuses(conn, names)
    args = dict(filters)
    for bound in ("since", "until"):
        if bound in args:
            args[bound] = t0 + timedelta(hours=args[bound])
    if args.get("batch_id") == "batch":
        args["batch_id"] = batch["batch"]
    named = "".join(f", p_{name} => %({name})s" for name in args)
    n = one(conn, f"select cancel_jobs(p_limit => 1000{named}) as n", args)["n"]
    assert n == len(expected)
    got = statuses(conn, names)
    # A running job is asked to stop: it stays processing with a cancel request until its worker ends it.
    assert got == {name: ("processing" if before[name] == "processing" else "cancelled") if name in expected
                   else before[name] for name in names}
    assert cancel_requested(conn) >= {names[name] for name in expected if before[name] == "processing"}
    if "c4" not in expected:
        assert names["c4"] not in cancel_requested(conn)


def test_cancel_jobs_takes_at_most_the_limit_a_call(conn: psycopg.Connection) -> None:
    live_jobs(conn)
    calls = [one(conn, "select cancel_jobs(p_statuses => array['pending', 'failed'], p_limit => 2) as n")["n"]
             for _ in range(3)]
    assert calls == [2, 2, 0]
    assert one(conn, "select count(*) as n from jobs where status in ('pending', 'failed')")["n"] == 0


def test_cancel_jobs_skips_a_row_another_session_holds_without_waiting(connect) -> None:
    setup = connect()
    names, _, _ = live_jobs(setup)
    holder = connect(autocommit=False)
    holder.execute("select 1 from jobs where id = %s for update", [names["c1"]])
    bulk = connect(options="-c lock_timeout=2s")
    assert one(bulk, "select cancel_jobs(p_statuses => array['pending']) as n")["n"] == 2
    assert statuses(setup, names)["c1"] == "pending"
    holder.commit()
    assert one(bulk, "select cancel_jobs(p_statuses => array['pending']) as n")["n"] == 1
    assert statuses(setup, names)["c1"] == "cancelled"


# ---- bad arguments ----

@pytest.mark.parametrize("call", [
    "select retry_dead_jobs(p_limit => 0)",
    "select retry_dead_jobs(p_limit => -1)",
    "select retry_dead_jobs(p_limit => null)",
    "select cancel_jobs(p_limit => 0)",
    "select cancel_jobs(p_limit => -5)",
    "select cancel_jobs(p_limit => null)",
    "select cancel_jobs(p_statuses => array['dead'])",
    "select cancel_jobs(p_statuses => array['succeeded'])",
    "select cancel_jobs(p_statuses => array['pending', 'nonsense'])",
    "select cancel_jobs(p_statuses => array[null]::text[])",
    "select cancel_jobs(p_statuses => array[]::text[])",
])
def test_bulk_actions_bad_arguments_raise_qv400_and_change_nothing(conn: psycopg.Connection, call: str) -> None:
    live_jobs(conn)
    before = everything(conn)
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(call)
    assert exc.value.sqlstate == "QV400"
    assert everything(conn) == before


def test_cancel_jobs_waits_for_a_dependent_another_session_holds_then_cancels_it(connect) -> None:
    """The cancel of a matched parent judges its blocked dependent in the same call: when another session holds
    that dependent's row, the call waits for it (skipping it would leave the dependent blocked for ever, its
    parent cancelled), and once that session commits, both end cancelled. A claim never waits: the parent is
    a waiting job, which no claim holds, and the claim skips rows a cancel holds."""
    setup = connect()
    parent = enqueue(setup, "t", queue="q1")
    child = enqueue(setup, "t", queue="q2", depends_on=[parent["id"]])
    holder = connect(autocommit=False)
    holder.execute("select 1 from jobs where id = %s for update", [child["id"]])
    bulk = connect()
    step = Step(bulk, lambda: one(bulk, "select cancel_jobs(p_queue => 'q1') as n")["n"])
    assert step.waits(setup)
    holder.commit()
    assert step.result() == 1
    got = statuses(setup, {"parent": parent["id"], "child": child["id"]})
    assert got == {"parent": "cancelled", "child": "cancelled"}
