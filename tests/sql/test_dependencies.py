"""Dependencies between jobs (enqueue_job's p_depends_on, enqueue_jobs' depends_on): a child is `blocked`
until every parent has succeeded (run_anyway: until every parent reached any final status) and becomes
`pending` in the transaction of the last parent's end; a cancelled or expired parent cancels its
dependents, and theirs; a dead parent leaves them blocked until it is retried or cancelled. A dependency
that cannot be is refused with QW422 and changes nothing. The races are explicit steps across sessions:
the last parents ending at once, and a child enqueued while its parent's success is still uncommitted."""
from __future__ import annotations

import threading
import time
import uuid
from typing import Any, Callable

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.helpers import one, rows

# The SQL types of enqueue_job's named arguments these tests pass.
CASTS = {"queue": "text", "priority": "integer", "run_at": "timestamptz", "max_attempts": "integer",
         "expire_after_ms": "integer", "depends_on": "uuid[]", "run_anyway": "boolean", "serial_key": "text",
         "concurrency_key": "text", "workflow_id": "uuid"}


def enqueue(conn: psycopg.Connection, key: str | None = None, type: str = "t", **named: Any) -> dict[str, Any]:
    """enqueue_job with the named arguments given (p_<name> => value), in a queue of its own unless one is
    given (claim_one takes it alone); the job's row and created."""
    named.setdefault("queue", f"q-{uuid.uuid4().hex[:12]}")
    args = "".join(f", p_{name} => %({name})s::{CASTS[name]}" for name in named)
    return one(conn, f"select (e.job).*, e.created from enqueue_job(%(type)s, '{{}}'::jsonb, %(key)s{args}) e",
               {"type": type, "key": key or f"k-{uuid.uuid4()}", **named})


def enqueue_many(conn: psycopg.Connection, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for n, job in enumerate(jobs):
        job.setdefault("type", "t")
        job.setdefault("payload", {"n": n})
        job.setdefault("idempotency_key", f"k-{uuid.uuid4()}")
        job.setdefault("queue", f"q-{uuid.uuid4().hex[:12]}")
    return rows(conn, "select (e.job).*, e.created from enqueue_jobs(%s::jsonb) e", [Jsonb(jobs)])


def claim(conn: psycopg.Connection, limit: int = 100, worker: str = "w",
          queues: list[str] | None = None) -> list[dict[str, Any]]:
    return rows(conn, "select (c.job).*, c.lease_token from claim_jobs(%s, %s, %s::text[]) c", [worker, limit, queues])


def claim_one(conn: psycopg.Connection, job_id: Any) -> dict[str, Any]:
    """Claims the job from its queue (of its own), expecting it to be ready."""
    got = claim(conn, queues=[one(conn, "select queue from jobs where id = %s", [job_id])["queue"]])
    assert [j["id"] for j in got] == [job_id], f"{job_id} was not claimable; claimed {got}"
    return got[0]


def succeed(conn: psycopg.Connection, claimed: dict[str, Any]) -> dict[str, Any]:
    return one(conn, "select (m.job).* from mark_succeeded(%s, %s) m", [claimed["id"], claimed["lease_token"]])


def make_dead(conn: psycopg.Connection, job: dict[str, Any]) -> None:
    """Its one try fails, not retryable (the job is made with max_attempts 1 or this is its last)."""
    claimed = claim_one(conn, job["id"])
    one(conn, "select (m.job).* from mark_failed(%s, %s, 'boom', false) m", [job["id"], claimed["lease_token"]])
    assert status(conn, job["id"]) == "dead"


def status(conn: psycopg.Connection, job_id: Any) -> str:
    return one(conn, "select status from jobs where id = %s", [job_id])["status"]


def job(conn: psycopg.Connection, job_id: Any) -> dict[str, Any]:
    return one(conn, "select * from jobs where id = %s", [job_id])


def everything(conn: psycopg.Connection) -> list[Any]:
    """Every row a refused enqueue could have touched."""
    return [rows(conn, "select * from jobs order by id"),
            rows(conn, "select * from job_dependencies order by job_id, parent_id"),
            rows(conn, "select * from batches order by id")]


def log_transitions(conn: psycopg.Connection) -> None:
    """Records every change of a job's status in public.test_transitions (a trigger of this test's database,
    which is dropped after it, not reset)."""
    conn.execute("create table public.test_transitions (job_id uuid, old_status text, new_status text)")
    conn.execute("create function public.test_log_transition() returns trigger language plpgsql"
                 " security definer set search_path = pg_catalog as $$ begin"
                 " insert into public.test_transitions values (new.id, old.status, new.status); return null;"
                 " end $$")
    conn.execute("create trigger test_log_transition after update on jobs for each row"
                 " when (old.status is distinct from new.status) execute function public.test_log_transition()")


def transitions(conn: psycopg.Connection, job_id: Any) -> list[tuple[str, str]]:
    return [(r["old_status"], r["new_status"]) for r in rows(
        conn, "select old_status, new_status from public.test_transitions where job_id = %s", [job_id])]


class Step:
    """A call made in a thread, so the test can see whether it waits for a lock another session holds."""

    def __init__(self, session: psycopg.Connection, call: Callable[[], Any]) -> None:
        self.session = session
        self.value: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self.thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self.value = call()
        except BaseException as exc:  # noqa: BLE001 - re-raised by result()
            self.error = exc

    def waits(self, watcher: psycopg.Connection, timeout: float = 10) -> bool:
        """True once the call waits for a lock (pg_blocking_pids), False once it has returned."""
        deadline = time.monotonic() + timeout
        while self.thread.is_alive():
            if one(watcher, "select cardinality(pg_blocking_pids(%s)) > 0 as b", [self.session.info.backend_pid])["b"]:
                return True
            assert time.monotonic() < deadline, "the call neither returned nor waited for a lock"
            self.thread.join(0.005)
        return False

    def result(self) -> Any:
        self.thread.join(30)
        assert not self.thread.is_alive(), "the call never returned"
        if self.error is not None:
            raise self.error
        return self.value


# ---- blocked until the parents succeed ----

def test_dependencies_child_is_blocked_until_every_parent_succeeds(conn: psycopg.Connection) -> None:
    p1, p2 = enqueue(conn), enqueue(conn)
    child = enqueue(conn, depends_on=[p1["id"], p2["id"]])
    assert (child["status"], child["created"]) == ("blocked", True)
    assert (child["lease_expires_at"], child["locked_by"], child["finished_at"]) == (None, None, None)
    assert rows(conn, "select parent_id, run_anyway from job_dependencies where job_id = %s order by parent_id",
                [child["id"]]) == sorted([{"parent_id": p1["id"], "run_anyway": False},
                                          {"parent_id": p2["id"], "run_anyway": False}], key=lambda r: r["parent_id"])
    claimed = {j["id"]: j for j in claim(conn)}
    assert set(claimed) == {p1["id"], p2["id"]}  # a blocked job is never claimed
    succeed(conn, claimed[p1["id"]])
    assert status(conn, child["id"]) == "blocked"
    assert claim(conn) == []
    succeed(conn, claimed[p2["id"]])
    assert status(conn, child["id"]) == "pending"
    [got] = claim(conn)
    assert (got["id"], got["attempts"]) == (child["id"], 1)


def test_dependencies_child_is_released_in_the_last_parents_transaction(connect) -> None:
    """Step by step: A marks the last parent succeeded and has not committed; A already sees the child
    pending, B still sees it blocked; once A commits, B sees it pending. A rollback leaves it blocked."""
    b = connect()
    a = connect(autocommit=False)
    parent = enqueue(b)
    child = enqueue(b, depends_on=[parent["id"]])
    [claimed] = claim(b)
    succeed(a, claimed)
    assert status(a, child["id"]) == "pending"
    assert status(b, child["id"]) == "blocked"
    assert claim(b) == []
    a.rollback()
    assert status(b, child["id"]) == "blocked"
    succeed(a, claimed)
    assert status(b, child["id"]) == "blocked"
    a.commit()
    assert status(b, child["id"]) == "pending"


def test_dependencies_child_of_a_succeeded_parent_is_pending_at_once(conn: psycopg.Connection) -> None:
    parent = enqueue(conn)
    succeed(conn, claim_one(conn, parent["id"]))
    child = enqueue(conn, depends_on=[parent["id"]])
    assert child["status"] == "pending"


# ---- dead, cancelled and expired parents ----

def test_dependencies_dead_parent_leaves_the_child_blocked_and_its_retry_releases_it(
        conn: psycopg.Connection) -> None:
    parent = enqueue(conn, max_attempts=1)
    child = enqueue(conn, depends_on=[parent["id"]])
    make_dead(conn, parent)
    assert status(conn, child["id"]) == "blocked"
    late = enqueue(conn, depends_on=[parent["id"]])  # a dead parent may still be retried: the child waits
    assert late["status"] == "blocked"
    conn.execute("select * from retry_dead(%s)", [parent["id"]])
    assert status(conn, child["id"]) == "blocked"
    succeed(conn, claim_one(conn, parent["id"]))
    assert (status(conn, child["id"]), status(conn, late["id"])) == ("pending", "pending")


def test_dependencies_cancelling_a_dead_parent_cancels_its_blocked_child(conn: psycopg.Connection) -> None:
    parent = enqueue(conn, max_attempts=1)
    child = enqueue(conn, depends_on=[parent["id"]])
    make_dead(conn, parent)
    conn.execute("select * from cancel_job(%s)", [parent["id"]])
    assert status(conn, parent["id"]) == "cancelled"
    got = job(conn, child["id"])
    assert got["status"] == "cancelled" and got["finished_at"] is not None
    assert str(parent["id"]) in got["last_error"] and "cancelled" in got["last_error"]


def test_dependencies_cancelled_parent_cancels_children_and_grandchildren(conn: psycopg.Connection) -> None:
    parent, other = enqueue(conn), enqueue(conn)
    child = enqueue(conn, depends_on=[parent["id"], other["id"]])
    grandchild = enqueue(conn, depends_on=[child["id"]])
    conn.execute("select * from cancel_job(%s)", [parent["id"]])
    got_child, got_grandchild = job(conn, child["id"]), job(conn, grandchild["id"])
    assert got_child["status"] == "cancelled"
    assert got_child["last_error"] == f"parent {parent['id']} was cancelled"
    assert got_grandchild["status"] == "cancelled"
    assert got_grandchild["last_error"] == f"parent {child['id']} was cancelled"
    assert status(conn, other["id"]) == "pending"  # a parent's sibling parent is not touched


def test_dependencies_expired_parent_cancels_children_and_grandchildren(conn: psycopg.Connection) -> None:
    parent = enqueue(conn, expire_after_ms=1000)
    child = enqueue(conn, depends_on=[parent["id"]])
    grandchild = enqueue(conn, depends_on=[child["id"]])
    conn.execute("select * from sweep_stuck_at(now() + interval '1 minute')")
    assert status(conn, parent["id"]) == "expired"
    got_child, got_grandchild = job(conn, child["id"]), job(conn, grandchild["id"])
    assert (got_child["status"], got_child["last_error"]) == ("cancelled", f"parent {parent['id']} was expired")
    assert got_grandchild["status"] == "cancelled"
    assert got_grandchild["last_error"] == f"parent {child['id']} was cancelled"


@pytest.mark.parametrize("ending", ["cancelled", "expired"])
def test_dependencies_child_of_an_ended_parent_is_created_cancelled(conn: psycopg.Connection, ending: str) -> None:
    parent = enqueue(conn, expire_after_ms=1000)
    if ending == "cancelled":
        conn.execute("select * from cancel_job(%s)", [parent["id"]])
    else:
        conn.execute("select * from sweep_stuck_at(now() + interval '1 minute')")
    assert status(conn, parent["id"]) == ending
    child = enqueue(conn, depends_on=[parent["id"]])
    assert (child["status"], child["created"]) == ("cancelled", True)
    assert child["last_error"] == f"parent {parent['id']} was {ending}"
    assert child["finished_at"] is not None
    anyway = enqueue(conn, depends_on=[parent["id"]], run_anyway=True)
    assert anyway["status"] == "pending"  # run_anyway: every parent is final already


def test_dependencies_run_anyway_releases_on_any_final_end(conn: psycopg.Connection) -> None:
    ok, doomed, dropped, lapsed = (enqueue(conn, max_attempts=1), enqueue(conn, max_attempts=1),
                                   enqueue(conn), enqueue(conn, expire_after_ms=1000))
    child = enqueue(conn, depends_on=[ok["id"], doomed["id"], dropped["id"], lapsed["id"]], run_anyway=True)
    assert child["status"] == "blocked"
    assert one(conn, "select bool_and(run_anyway) as r from job_dependencies where job_id = %s",
               [child["id"]])["r"] is True
    make_dead(conn, doomed)
    conn.execute("select * from cancel_job(%s)", [dropped["id"]])
    conn.execute("select * from sweep_stuck_at(now() + interval '1 minute')")
    assert status(conn, lapsed["id"]) == "expired"
    assert status(conn, child["id"]) == "blocked"  # ok has not ended
    succeed(conn, claim_one(conn, ok["id"]))
    assert status(conn, child["id"]) == "pending"


def test_dependencies_run_anyway_per_parent_from_enqueue_jobs(conn: psycopg.Connection) -> None:
    """An array of run_anyway flags, one per depends_on item: a dependency that runs anyway is released by
    its parent's death, the other one only by its parent's success, and is cancelled by its cancel."""
    doomed = enqueue(conn, max_attempts=1)
    needed = enqueue(conn)
    [_, child] = enqueue_many(conn, [{}, {"depends_on": [str(doomed["id"]), str(needed["id"]), 1],
                                          "run_anyway": [True, False, True]}])
    flags = {r["parent_id"]: r["run_anyway"] for r in rows(
        conn, "select parent_id, run_anyway from job_dependencies where job_id = %s", [child["id"]])}
    assert flags[doomed["id"]] is True and flags[needed["id"]] is False and len(flags) == 3
    make_dead(conn, doomed)
    first = one(conn, "select d.parent_id from job_dependencies d where d.job_id = %s"
                      " and d.parent_id not in (%s, %s)", [child["id"], doomed["id"], needed["id"]])["parent_id"]
    succeed(conn, claim_one(conn, first))
    assert status(conn, child["id"]) == "blocked"  # `needed` has not succeeded, and its death would not do
    succeed(conn, claim_one(conn, needed["id"]))
    assert status(conn, child["id"]) == "pending"
    # A parent whose dependency does not run anyway cancels the child when it is cancelled.
    dropped, other = enqueue(conn), enqueue(conn)
    [late] = enqueue_many(conn, [{"depends_on": [str(dropped["id"]), str(other["id"])], "run_anyway": [False, True]}])
    conn.execute("select * from cancel_job(%s)", [dropped["id"]])
    assert status(conn, late["id"]) == "cancelled"
    # A parent named twice with two flags is waited for as the stricter asks: until it succeeds.
    twice = enqueue(conn)
    [strict] = enqueue_many(conn, [{"depends_on": [str(twice["id"]), str(twice["id"])], "run_anyway": [True, False]}])
    assert rows(conn, "select run_anyway from job_dependencies where job_id = %s", [strict["id"]]) == [
        {"run_anyway": False}]


@pytest.mark.parametrize("element, problem", [
    ({"run_anyway": [True]}, "one boolean per depends_on item (2), got 1"),
    ({"run_anyway": [True, "yes"]}, "must hold only booleans"),
    ({"run_anyway": [True, None]}, "must hold only booleans"),
    ({"run_anyway": "yes"}, "run_anyway must be a JSON boolean or array, got string"),
    ({"depends_on": None, "run_anyway": [True]}, "one boolean per depends_on item (0), got 1"),
    ({"depends_on": None, "run_anyway": [1]}, "must hold only booleans"),
])
def test_dependencies_run_anyway_array_of_the_wrong_shape_is_qv400(conn: psycopg.Connection, element: dict,
                                                                  problem: str) -> None:
    a, b = enqueue(conn), enqueue(conn)
    before = rows(conn, "select id from jobs order by id")
    with pytest.raises(psycopg.Error) as refused:
        enqueue_many(conn, [{"depends_on": [str(a["id"]), str(b["id"])], **element}])
    assert refused.value.sqlstate == "QV400" and problem in refused.value.diag.message_primary
    assert rows(conn, "select id from jobs order by id") == before


def test_dependencies_cancelling_a_blocked_child_cancels_its_own_dependents(conn: psycopg.Connection) -> None:
    parent = enqueue(conn)
    child = enqueue(conn, depends_on=[parent["id"]])
    grandchild = enqueue(conn, depends_on=[child["id"]])
    got = one(conn, "select (c.job).status from cancel_job(%s) c", [child["id"]])
    assert got["status"] == "cancelled"
    assert job(conn, grandchild["id"])["last_error"] == f"parent {child['id']} was cancelled"
    assert status(conn, grandchild["id"]) == "cancelled"
    assert status(conn, parent["id"]) == "pending"  # a child's end does not touch its parent
    succeed(conn, claim_one(conn, parent["id"]))
    assert (status(conn, child["id"]), status(conn, grandchild["id"])) == ("cancelled", "cancelled")


def test_dependencies_replayed_enqueue_returns_the_job_made_before(conn: psycopg.Connection) -> None:
    p1, p2 = enqueue(conn), enqueue(conn)
    child = enqueue(conn, key="child", depends_on=[p1["id"]])
    before = everything(conn)
    again = enqueue(conn, key="child", queue=child["queue"], depends_on=[p1["id"], p2["id"]])
    assert (again["id"], again["created"], again["status"]) == (child["id"], False, "blocked")
    assert everything(conn) == before  # no parent added by the replay


@pytest.mark.parametrize("end, child_ends", [
    ("mark_jobs_succeeded", "pending"),
    ("mark_cancelled", "cancelled"),
    ("mark_failed while asked to cancel", "cancelled"),
    ("claim while asked to cancel", "cancelled"),
    ("sweep of a lost lease asked to cancel", "cancelled"),
])
def test_dependencies_every_way_a_parent_ends_settles_its_child(conn: psycopg.Connection, end: str,
                                                                child_ends: str) -> None:
    """Not only mark_succeeded and cancel_job: each function that ends a job judges its dependents."""
    parent = enqueue(conn, max_attempts=1)
    child = enqueue(conn, depends_on=[parent["id"]])
    if end == "claim while asked to cancel":
        # A cancel requested while running, then the attempt lost and put back: the next claim ends it.
        claimed = claim_one(conn, parent["id"])
        conn.execute("update jobs set max_attempts = 2 where id = %s", [parent["id"]])
        conn.execute("select * from release_job(%s, %s, 'shutting down')", [parent["id"], claimed["lease_token"]])
        conn.execute("insert into job_cancel_requests (job_id) values (%s)", [parent["id"]])
        assert claim(conn, queues=[parent["queue"]]) == []
    else:
        claimed = claim_one(conn, parent["id"])
        if "cancel" in end:
            conn.execute("select * from cancel_job(%s)", [parent["id"]])
        if end == "mark_jobs_succeeded":
            conn.execute("select * from mark_jobs_succeeded(array[%s]::uuid[], array[%s]::uuid[])",
                         [parent["id"], claimed["lease_token"]])
        elif end == "mark_cancelled":
            conn.execute("select * from mark_cancelled(%s, %s)", [parent["id"], claimed["lease_token"]])
        elif end.startswith("mark_failed"):
            conn.execute("select * from mark_failed(%s, %s, 'stopped')", [parent["id"], claimed["lease_token"]])
        else:
            conn.execute("select * from sweep_stuck_at(now() + interval '1 day')")
    assert status(conn, parent["id"]) == ("succeeded" if child_ends == "pending" else "cancelled")
    assert status(conn, child["id"]) == child_ends


# ---- enqueue_jobs and workflows ----

def test_dependencies_enqueue_jobs_refers_to_earlier_elements_by_number(conn: psycopg.Connection) -> None:
    outside = enqueue(conn)
    a, b, c = enqueue_many(conn, [{}, {"depends_on": [1]}, {"depends_on": [1, 2, str(outside["id"])]}])
    assert [j["status"] for j in (a, b, c)] == ["pending", "blocked", "blocked"]
    deps = rows(conn, "select job_id, parent_id from job_dependencies where job_id = any (%s)", [[b["id"], c["id"]]])
    assert sorted((d["job_id"], d["parent_id"]) for d in deps) == sorted(
        [(b["id"], a["id"]), (c["id"], a["id"]), (c["id"], b["id"]), (c["id"], outside["id"])])
    claimed = {j["id"]: j for j in claim(conn)}
    assert set(claimed) == {outside["id"], a["id"]}
    succeed(conn, claimed[a["id"]])
    assert (status(conn, b["id"]), status(conn, c["id"])) == ("pending", "blocked")
    succeed(conn, claim_one(conn, b["id"]))
    assert status(conn, c["id"]) == "blocked"  # outside is still running
    succeed(conn, claimed[outside["id"]])
    assert status(conn, c["id"]) == "pending"


def test_dependencies_workflow_id_comes_from_the_argument_or_the_first_parent(conn: psycopg.Connection) -> None:
    root = enqueue(conn)
    assert root["workflow_id"] is None
    child = enqueue(conn, depends_on=[root["id"]])
    assert child["workflow_id"] == root["id"]
    grandchild = enqueue(conn, depends_on=[child["id"]])
    assert grandchild["workflow_id"] == root["id"]
    chosen = uuid.uuid4()
    mine = enqueue(conn, depends_on=[root["id"]], workflow_id=chosen)
    assert mine["workflow_id"] == chosen
    a, b = enqueue_many(conn, [{"workflow_id": str(chosen)}, {"depends_on": [1]}])
    assert (a["workflow_id"], b["workflow_id"]) == (chosen, chosen)
    listed = rows(conn, "select (w.job).id, w.depends_on, w.run_anyway from workflow_jobs(%s) w", [root["id"]])
    assert [r["id"] for r in listed] == [root["id"], child["id"], grandchild["id"]]
    assert [r["depends_on"] for r in listed] == [[], [root["id"]], [child["id"]]]
    assert [r["run_anyway"] for r in listed] == [False, False, False]


# ---- refused ----

@pytest.mark.parametrize("elements", [
    [{"depends_on": [1]}],                       # itself
    [{}, {"depends_on": [2]}],                   # itself, second element
    [{"depends_on": [2]}, {}],                   # a later element
    [{}, {"depends_on": [1]}, {"depends_on": [3, 1]}],
    [{"depends_on": [str(uuid.UUID(int=7))]}],   # no such job
    [{}, {"depends_on": [1, str(uuid.UUID(int=7))]}],
])
def test_dependencies_enqueue_jobs_refuses_an_impossible_dependency_with_qw422(
        conn: psycopg.Connection, elements: list[dict[str, Any]]) -> None:
    enqueue(conn)
    before = everything(conn)
    with pytest.raises(psycopg.Error) as exc:
        enqueue_many(conn, elements)
    assert exc.value.sqlstate == "QW422"
    assert everything(conn) == before


def test_dependencies_enqueue_job_refuses_an_unknown_parent_with_qw422(conn: psycopg.Connection) -> None:
    known = enqueue(conn)
    before = everything(conn)
    with pytest.raises(psycopg.Error) as exc:
        enqueue(conn, depends_on=[known["id"], uuid.uuid4()])
    assert exc.value.sqlstate == "QW422"
    assert everything(conn) == before


def test_dependencies_refuses_more_than_1000_parents_with_qw422(conn: psycopg.Connection) -> None:
    conn.execute("select enqueue_job('t', '{}', 'parent-' || i) from generate_series(1, 1001) i")
    parents = [r["id"] for r in rows(conn, "select id from jobs order by id")]
    before = everything(conn)
    with pytest.raises(psycopg.Error) as exc:
        enqueue(conn, depends_on=parents)
    assert exc.value.sqlstate == "QW422"
    assert everything(conn) == before
    assert enqueue(conn, depends_on=parents[:1000])["status"] == "blocked"


# ---- races ----

def test_dependencies_hundred_parents_ending_at_once_release_the_child_once(connect) -> None:
    """100 parents, claimed, then marked succeeded at once by as many sessions as the server allows (up to
    100, each its own connection, released together by a barrier, each parent its own transaction). The
    child ends pending exactly once: one status change (blocked → pending), no attempt, one claim."""
    setup = connect()
    log_transitions(setup)
    setup.execute("select enqueue_job('t', '{}', 'parent-' || i) from generate_series(1, 100) i")
    parents = claim(setup, limit=100)
    assert len(parents) == 100
    child = enqueue(setup, depends_on=[p["id"] for p in parents])
    assert child["status"] == "blocked"
    free = one(setup, "select current_setting('max_connections')::int - count(*) as n from pg_stat_activity")["n"]
    n = max(4, min(100, free - 25))  # leave room for whoever else uses the server
    sessions = [connect() for _ in range(n)]
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            for parent in parents[i::n]:
                succeed(sessions[i], parent)
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == [] and not any(t.is_alive() for t in threads)
    got = job(setup, child["id"])
    assert (got["status"], got["attempts"]) == ("pending", 0)
    assert transitions(setup, child["id"]) == [("blocked", "pending")]
    assert [j["id"] for j in claim(setup)] == [child["id"]]
    assert claim(setup) == []


@pytest.mark.parametrize("first", ["a", "b"])
def test_dependencies_last_two_parents_ending_in_two_sessions_release_the_child(connect, first: str) -> None:
    """Step by step: A and B each mark one of the child's two parents succeeded in a transaction of its own;
    neither sees the other's uncommitted success. Whatever waits for whom and whichever commits first, the
    child is pending once both have committed, released once."""
    watcher = connect()
    log_transitions(watcher)
    p1, p2 = enqueue(watcher), enqueue(watcher)
    child = enqueue(watcher, depends_on=[p1["id"], p2["id"]])
    claimed = {j["id"]: j for j in claim(watcher)}
    a, b = connect(autocommit=False), connect(autocommit=False)
    succeed(a, claimed[p1["id"]])
    step = Step(b, lambda: succeed(b, claimed[p2["id"]]))
    if step.waits(watcher) or first == "a":
        a.commit()
        step.result()
        b.commit()
    else:
        step.result()
        b.commit()
        a.commit()
    assert status(watcher, child["id"]) == "pending"
    assert transitions(watcher, child["id"]) == [("blocked", "pending")]


@pytest.mark.parametrize("first", ["parent", "child"])
def test_dependencies_child_enqueued_while_its_parent_succeeds_is_never_left_blocked(connect, first: str) -> None:
    """Step by step: A marks the parent succeeded and holds its transaction open; B enqueues a child of it
    in a transaction of its own (it may wait for A). Then both commit, A first or B first where B did not
    wait. The child ends pending: it is not left blocked by a success its enqueue could not see."""
    watcher = connect()
    parent = enqueue(watcher)
    [claimed] = claim(watcher)
    a, b = connect(autocommit=False), connect(autocommit=False)
    succeed(a, claimed)
    step = Step(b, lambda: enqueue(b, key="child", depends_on=[parent["id"]]))
    if step.waits(watcher) or first == "parent":
        a.commit()
        step.result()
        b.commit()
    else:
        step.result()
        b.commit()
        a.commit()
    assert status(watcher, parent["id"]) == "succeeded"
    assert one(watcher, "select status from jobs where idempotency_key = 'child'")["status"] == "pending"


@pytest.mark.parametrize("first", ["parent", "child"])
def test_dependencies_parent_succeeding_while_its_child_is_enqueued_releases_it(connect, first: str) -> None:
    """Step by step, the other way round: B enqueues the child and holds its transaction open; A marks the
    parent succeeded (it may wait for B). Then both commit in either order (where neither waits). The child
    ends pending."""
    watcher = connect()
    parent = enqueue(watcher)
    [claimed] = claim(watcher)
    a, b = connect(autocommit=False), connect(autocommit=False)
    enqueue(b, key="child", depends_on=[parent["id"]])
    step = Step(a, lambda: succeed(a, claimed))
    if step.waits(watcher) or first == "child":
        b.commit()
        step.result()
        a.commit()
    else:
        step.result()
        a.commit()
        b.commit()
    assert status(watcher, parent["id"]) == "succeeded"
    assert one(watcher, "select status from jobs where idempotency_key = 'child'")["status"] == "pending"


def test_dependencies_a_replayed_earlier_element_is_the_parent_and_names_the_workflow(
        conn: psycopg.Connection) -> None:
    """Element 1 repeats a job enqueued before (its key, created false); element 2 depends on it by number:
    its parent is that job, and its workflow that job's id (the first parent's, which has none of its own)."""
    [first] = enqueue_many(conn, [{"idempotency_key": "a", "queue": "q", "payload": {"n": 0}}])
    made = enqueue_many(conn, [{"idempotency_key": "a", "queue": "q", "payload": {"n": 0}}, {"depends_on": [1]}])
    assert [(j["id"], j["created"]) for j in made][0] == (first["id"], False)
    child = made[1]
    assert rows(conn, "select parent_id from job_dependencies where job_id = %s", [child["id"]]) == [
        {"parent_id": first["id"]}]
    assert child["workflow_id"] == first["id"]


@pytest.mark.parametrize("first", ["parent", "child"])
def test_dependencies_child_of_a_replayed_element_enqueued_while_it_succeeds_is_released(connect,
                                                                                          first: str) -> None:
    """As the interleaving above, with the parent named by number: element 1 repeats the parent's key, element
    2 depends on [1]. A holds the parent's success open; B's enqueue_jobs may wait; both commit. The child ends
    pending."""
    watcher = connect()
    [parent] = enqueue_many(watcher, [{"idempotency_key": "p", "queue": "q", "payload": {"n": 0}}])
    [claimed] = claim(watcher)
    a, b = connect(autocommit=False), connect(autocommit=False)
    succeed(a, claimed)
    step = Step(b, lambda: enqueue_many(b, [{"idempotency_key": "p", "queue": "q", "payload": {"n": 0}},
                                            {"idempotency_key": "child", "depends_on": [1]}]))
    if step.waits(watcher) or first == "parent":
        a.commit()
        step.result()
        b.commit()
    else:
        step.result()
        b.commit()
        a.commit()
    assert status(watcher, parent["id"]) == "succeeded"
    assert one(watcher, "select status from jobs where idempotency_key = 'child'")["status"] == "pending"


def test_dependencies_parent_results_give_each_parent_with_its_result(conn: psycopg.Connection) -> None:
    ok, doomed = enqueue(conn), enqueue(conn, max_attempts=1)
    child = enqueue(conn, depends_on=[ok["id"], doomed["id"]], run_anyway=True)
    claimed = claim_one(conn, ok["id"])
    conn.execute("select * from mark_succeeded(%s, %s, 'application/json', '{\"a\": 1}'::jsonb, null)",
                 [ok["id"], claimed["lease_token"]])
    make_dead(conn, doomed)
    found = {r["parent_id"]: r for r in rows(conn, "select * from parent_results(%s)", [child["id"]])}
    assert set(found) == {ok["id"], doomed["id"]}
    assert (found[ok["id"]]["status"], found[ok["id"]]["content_type"], found[ok["id"]]["result"],
            found[ok["id"]]["data"]) == ("succeeded", "application/json", {"a": 1}, None)
    assert (found[doomed["id"]]["status"], found[doomed["id"]]["result"]) == ("dead", None)
    assert found[ok["id"]]["type"] == "t"


def test_dependencies_workflow_jobs_of_an_unknown_workflow_is_qn404(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as exc:
        conn.execute("select * from workflow_jobs(%s)", [uuid.uuid4()])
    assert exc.value.sqlstate == "QN404"
