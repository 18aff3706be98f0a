"""pgqw.client's workflows, batches and actions by filter: the enqueue options (depends_on, run_anyway,
serial_key, concurrency_key, workflow_id, and a task's key functions) reach the job; workflow() sends a
graph in one enqueue_jobs call, parents first, with one workflow id, and refuses a cycle or an unlisted
parent before the database; enqueue_batch's callback comes once every job is final; retry_dead_jobs and
cancel_jobs answer how many they changed."""
from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

import pgqw
from pgqw import client, db
from pgqw.client.options import Enqueue, elements, spec
from pgqw.tasks import Registry, TaskDefinitionError, register
from tests.helpers import rows

tasks = Registry()


class Order(BaseModel):
    customer: str
    total: int = 0


class Report(BaseModel):
    batch: client.BatchSummary | None = None


@tasks.task("charge_order", queue="orders", serial_key=lambda payload: f"customer:{payload['customer']}",
            concurrency_key="tenant-a")
def charge_order(payload: Order, ctx) -> dict:
    return {"charged": payload.total}


@tasks.task("ship_order", queue="orders")
def ship_order(payload: Order, ctx) -> None:
    return None


@tasks.task("batch_report", queue="reports")
def batch_report(payload: Report, ctx) -> None:
    return None


@pytest.fixture(autouse=True)
def _registered(conn: psycopg.Connection) -> None:
    register(conn, tasks)


def _run(conn: psycopg.Connection, job_id: uuid.UUID, result: Any = None, *, fail: bool = False) -> db.Job:
    """The job run as a worker runs it: claimed (it must be the one due), then its success or a failure
    that kills it (max_attempts 1)."""
    job = db.claim_job(conn, worker_id="wf-test", queues=[db.get_job(conn, job_id=job_id).queue])  # type: ignore[union-attr]
    assert job is not None and job.id == job_id
    if fail:
        return db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token, error="card declined",
                              retryable=False)
    return db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token,
                             result=None if result is None else ("application/json", result, None))


def _status(conn: psycopg.Connection, job_id: uuid.UUID) -> str:
    job = db.get_job(conn, job_id=job_id)
    assert job is not None
    return job.status


def test_workflow_client_task_keys_and_options_reach_the_job(conn: psycopg.Connection) -> None:
    job = charge_order.enqueue(conn, Order(customer="c7", total=5))
    assert (job.serial_key, job.concurrency_key, job.workflow_id) == ("customer:c7", "tenant-a", None)
    # Explicit options win over the task's text and function.
    own = client.enqueue(conn, charge_order, {"customer": "c7"}, serial_key="manual", concurrency_key="tenant-b")
    assert (own.serial_key, own.concurrency_key) == ("manual", "tenant-b")
    # depends_on takes jobs and job ids (text too); the child waits, in its first parent's workflow.
    child = ship_order.enqueue(conn, {"customer": "c7"}, depends_on=[job, str(own.id)], run_anyway=True)
    assert child.status == "blocked" and child.workflow_id == job.id
    [graph_child] = [j for j in client.get_workflow(conn, job.id) or [] if j.id == child.id]
    assert set(graph_child.depends_on) == {job.id, own.id} and graph_child.run_anyway is True
    flow_id = uuid.uuid4()
    mine = client.enqueue(conn, "ship_order", {"customer": "c8"}, workflow_id=str(flow_id))
    assert mine.workflow_id == flow_id and mine.status == "pending"
    # By name no function applies: the keys are the call's own.
    named = client.enqueue(conn, "charge_order", {"customer": "c9"})
    assert named.serial_key is None


def test_workflow_client_options_are_checked_before_the_database(conn: psycopg.Connection) -> None:
    with pytest.raises(TypeError, match="serial_key"):
        client.enqueue(conn, ship_order, {"customer": "c"}, serial_key=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="run_anyway"):
        client.enqueue(conn, ship_order, {"customer": "c"}, run_anyway="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="workflow id"):
        client.enqueue(conn, ship_order, {"customer": "c"}, workflow_id="not-a-uuid")
    with pytest.raises(ValueError, match="parent"):
        client.enqueue(conn, ship_order, {"customer": "c"}, depends_on=["nope"])
    with pytest.raises(ValueError, match="one call"):
        client.enqueue(conn, ship_order, {"customer": "c"}, depends_on=[Enqueue(ship_order, {"customer": "d"})])
    with pytest.raises(TypeError, match="depends_on"):
        client.enqueue(conn, ship_order, {"customer": "c"}, depends_on=uuid.uuid4())  # type: ignore[arg-type]
    assert db.list_jobs(conn).jobs == []
    with pytest.raises(TaskDefinitionError, match="serial_key"):
        Registry().task("bad_key", model=dict, serial_key=42)(lambda payload, ctx: None)  # type: ignore[arg-type]
    keyed = Registry().task("keyed", model=dict, serial_key=lambda payload: 7)(lambda payload, ctx: None)  # type: ignore[arg-type, return-value]
    with pytest.raises(TypeError, match="serial_key function"):
        spec(Enqueue(keyed, {}))


def test_workflow_client_builds_the_graph_in_one_call(conn: psycopg.Connection) -> None:
    a = Enqueue(charge_order, Order(customer="w1", total=10))
    b = Enqueue(ship_order, {"customer": "w1"})
    c = Enqueue(ship_order, {"customer": "w2"}, queue="orders-c")  # its own queue: _run claims by queue
    d = Enqueue(ship_order, {"customer": "w3"})
    # Listed children first: sent parents first, answered in the order given.
    flow = pgqw.workflow(d.after(b, c), c.after(a), b.after(a), a)
    sent, placed = elements(flow.nodes, workflow_id=flow.id)
    assert placed == [3, 1, 2, 0]  # a; then c and b, in the order given; d
    assert [e["depends_on"] for e in sent] == [None, [1], [1], [3, 2]]
    made = flow.enqueue(conn)
    assert made.id == flow.id and {j.workflow_id for j in made.jobs} == {flow.id}
    assert [j.status for j in made.jobs] == ["blocked", "blocked", "blocked", "pending"]
    assert made[a].id == made.jobs[3].id and made[d] is made.jobs[0] and made.by_node[b.after()] is made.jobs[2]
    graph = client.get_workflow(conn, flow.id)
    assert graph is not None and [j.id for j in graph][0] == made[a].id
    parents = {j.id: set(j.depends_on) for j in graph}
    assert parents[made[d].id] == {made[b].id, made[c].id}
    assert parents[made[b].id] == parents[made[c].id] == {made[a].id} and parents[made[a].id] == set()
    # a's success lets b and c go; d waits for both.
    _run(conn, made[a].id, {"charged": 10})
    assert (_status(conn, made[b].id), _status(conn, made[c].id), _status(conn, made[d].id)) == \
        ("pending", "pending", "blocked")
    _run(conn, made[b].id)
    assert _status(conn, made[d].id) == "blocked"
    _run(conn, made[c].id)
    assert _status(conn, made[d].id) == "pending"
    assert client.get_workflow(conn, uuid.uuid4()) is None


def test_workflow_client_refuses_a_cycle_and_an_unlisted_parent_before_the_database(
    conn: psycopg.Connection,
) -> None:
    a = Enqueue(ship_order, {"customer": "x"})
    b = Enqueue(ship_order, {"customer": "y"})
    with pytest.raises(ValueError, match="cycle"):
        client.workflow(a.after(b), b.after(a))
    with pytest.raises(ValueError, match="itself"):
        client.workflow(a.after(a))
    with pytest.raises(ValueError, match="not in this call"):
        client.workflow(b.after(a))
    with pytest.raises(ValueError, match="same job"):
        client.workflow(a, a.after())
    with pytest.raises(ValueError, match="cycle"):
        client.enqueue_many(conn, [a.after(b), b.after(a)])
    assert db.list_jobs(conn).jobs == []
    # The database refuses a parent that is not an earlier element of the call too.
    with pytest.raises(psycopg.Error) as refused:
        db.enqueue_jobs(conn, jobs=[
            {"type": "ship_order", "payload": {"customer": "x"}, "idempotency_key": "cyc-1", "depends_on": [2]},
            {"type": "ship_order", "payload": {"customer": "y"}, "idempotency_key": "cyc-2", "depends_on": [1]},
        ])
    assert refused.value.sqlstate == "QW422"


def test_workflow_client_run_anyway_is_each_parents_own(conn: psycopg.Connection) -> None:
    a = Enqueue(ship_order, {"customer": "x"})
    b = Enqueue(ship_order, {"customer": "y"})
    c = Enqueue(ship_order, {"customer": "z"})
    assert c.after(a, run_anyway=True).after(b, run_anyway=True).run_anyway is True  # one flag for all
    mixed = c.after(a, run_anyway=True).after(b)
    assert mixed.run_anyway == (True, False)
    made = client.workflow(a, b, mixed).enqueue(conn)
    flags = {r["parent_id"]: r["run_anyway"] for r in rows(
        conn, "select parent_id, run_anyway from job_dependencies where job_id = %s", [made[mixed].id])}
    assert flags == {made[a].id: True, made[b].id: False}
    # One job alone, its parents by id with a flag each (enqueue_job takes one for all: sent as enqueue_jobs).
    x, y = (ship_order.enqueue(conn, {"customer": n}) for n in ("p", "q"))
    own = ship_order.enqueue(conn, {"customer": "r"}, depends_on=[x, y], run_anyway=[False, True])
    assert own.status == "blocked"
    assert {r["parent_id"]: r["run_anyway"] for r in rows(
        conn, "select parent_id, run_anyway from job_dependencies where job_id = %s", [own.id])} == {
        x.id: False, y.id: True}
    with pytest.raises(ValueError, match="one flag per depends_on item"):
        ship_order.enqueue(conn, {"customer": "s"}, depends_on=[x, y], run_anyway=[True])
    with pytest.raises(TypeError, match="run_anyway"):
        ship_order.enqueue(conn, {"customer": "s"}, depends_on=[x], run_anyway=["yes"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="run_anyway"):
        c.after(a, run_anyway="yes")  # type: ignore[arg-type]


def test_workflow_client_enqueue_many_takes_parents_among_its_items(conn: psycopg.Connection) -> None:
    first = Enqueue(ship_order, {"customer": "m1"})
    then = Enqueue(ship_order, {"customer": "m2"}).after(first)
    made = client.enqueue_many(conn, [then, first])  # rows in the order given
    assert [j.status for j in made] == ["blocked", "pending"]
    assert made[0].workflow_id == made[1].id  # no workflow id given: the parent's id


def test_workflow_client_async_twins(db_url: str, conn: psycopg.Connection) -> None:
    async def go() -> tuple[client.EnqueuedWorkflow, client.EnqueuedBatch]:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
            a = Enqueue(ship_order, {"customer": "as1"})
            flow = await client.workflow(a, Enqueue(ship_order, {"customer": "as2"}).after(a)).enqueue_async(aconn)
            batch = await client.enqueue_batch_async(aconn, [Enqueue(ship_order, {"customer": "as3"})])
            return flow, batch

    flow, batch = asyncio.run(go())
    assert [j.status for j in flow.jobs] == ["pending", "blocked"]
    assert len(client.get_workflow(conn, flow.id) or []) == 2
    status = client.get_batch(conn, batch.id)
    assert status is not None and status.total == 1 and status.pending == 1 and batch.jobs[0].batch_id == batch.id


def test_workflow_client_reads_of_nothing_leave_the_callers_transaction_usable(db_url: str) -> None:
    with psycopg.connect(db_url) as app:
        job = ship_order.enqueue(app, {"customer": "tx"})
        assert client.get_batch(app, uuid.uuid4()) is None
        assert client.get_workflow(app, uuid.uuid4()) is None
        assert client.get_job(app, job.id) is not None  # the transaction goes on


def test_workflow_client_batch_callback_once_every_job_is_final(db_url: str, conn: psycopg.Connection) -> None:
    items = [Enqueue(ship_order, {"customer": f"b{n}"}, max_attempts=1, queue=f"batch-{n}") for n in range(3)]
    with psycopg.connect(db_url) as app:  # the caller's transaction
        batch = client.enqueue_batch(app, items, callback=Enqueue(batch_report, {}, queue="reports"),
                                     idempotency_key="nightly-2026-12-03")
    assert batch.created and len(batch.jobs) == 3 and {j.batch_id for j in batch.jobs} == {batch.id}
    status = client.get_batch(conn, batch.id)
    assert status is not None and (status.total, status.pending, status.callback_job_id) == (3, 3, None)
    again = client.enqueue_batch(conn, items, callback=Enqueue(batch_report, {}), idempotency_key="nightly-2026-12-03")
    assert again.id == batch.id and not again.created and {j.id for j in again.jobs} == {j.id for j in batch.jobs}
    _run(conn, batch.jobs[0].id)
    _run(conn, batch.jobs[1].id, fail=True)
    assert client.get_batch(conn, batch.id).callback_job_id is None  # type: ignore[union-attr]
    client.cancel(conn, batch.jobs[2].id)
    status = client.get_batch(conn, batch.id)
    assert status is not None and (status.succeeded, status.dead, status.cancelled) == (1, 1, 1)
    assert status.finished_at is not None and status.callback_job_id is not None
    callback = db.get_job(conn, job_id=status.callback_job_id)
    assert callback is not None and callback.type == "batch_report" and callback.queue == "reports"
    summary = batch_report.parse(callback.payload).batch
    assert summary == client.BatchSummary(id=batch.id, total=3, succeeded=1, dead=1, cancelled=1, expired=0)
    assert client.get_batch(conn, uuid.uuid4()) is None


def test_workflow_client_batch_callback_options_are_checked(conn: psycopg.Connection) -> None:
    items = [Enqueue(ship_order, {"customer": "cb"})]
    with pytest.raises(ValueError, match="delay"):
        client.enqueue_batch(conn, items, callback=Enqueue(batch_report, {}, delay=5))
    with pytest.raises(ValueError, match="at least one"):
        client.enqueue_batch(conn, [])
    assert db.list_jobs(conn).jobs == []


def test_workflow_client_retry_dead_jobs_and_cancel_jobs_by_filter(conn: psycopg.Connection) -> None:
    dead = [charge_order.enqueue(conn, {"customer": f"r{n}"}, max_attempts=1, serial_key=f"r{n}") for n in range(3)]
    for job in dead:
        _run(conn, job.id, fail=True)
    other = ship_order.enqueue(conn, {"customer": "r9"}, max_attempts=1)
    _run(conn, other.id, fail=True)
    with pytest.raises(ValueError, match="at least one filter"):
        client.retry_dead_jobs(conn)
    assert client.retry_dead_jobs(conn, type=charge_order, error="DECLINED", since=timedelta(minutes=5)) == 3
    assert [_status(conn, j.id) for j in dead] == ["pending"] * 3 and _status(conn, other.id) == "dead"
    assert client.retry_dead_jobs(conn, type="ship_order", until=datetime.now(timezone.utc) - timedelta(hours=1)) == 0
    assert client.retry_dead_jobs(conn, type="ship_order") == 1
    a = Enqueue(ship_order, {"customer": "k1"})
    flow = client.workflow(a, Enqueue(ship_order, {"customer": "k2"}).after(a)).enqueue(conn)
    assert client.cancel_jobs(conn, workflow_id=flow.id, statuses=["blocked"]) == 1
    assert [_status(conn, j.id) for j in flow.jobs] == ["pending", "cancelled"]
    assert client.cancel_jobs(conn, queue="orders") == 5  # the three retried, the retried ship_order, a
    assert client.cancel_jobs(conn, queue="orders") == 0


def test_workflow_client_bulk_calls_with_a_timedelta_commit_on_a_connection_outside_a_transaction(
        db_url: str, conn: psycopg.Connection) -> None:
    """The database's now() for `since` is read in a transaction of its own: the bounded calls after it
    are committed each, not savepoints of an implicit transaction the caller never opened."""
    dead = charge_order.enqueue(conn, {"customer": "tx1"}, max_attempts=1)
    _run(conn, dead.id, fail=True)
    with psycopg.connect(db_url) as app:  # not autocommit, nothing begun
        assert client.retry_dead_jobs(app, type=charge_order, since=timedelta(minutes=5)) == 1
        assert app.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert _status(conn, dead.id) == "pending"  # seen from another session: committed


def test_workflow_client_through_a_queue_bound_to_a_pool(db_url: str, conn: psycopg.Connection) -> None:
    with client.Queue(db_url, default=False) as queue:
        a = Enqueue(ship_order, {"customer": "q1"}, max_attempts=1)
        flow = queue.enqueue_workflow(client.workflow(a, Enqueue(ship_order, {"customer": "q2"}).after(a)))
        batch = queue.enqueue_batch([Enqueue(ship_order, {"customer": "q3"}, queue="batch-q")])
        assert [j.status for j in (queue.get_workflow(flow.id) or [])] == ["pending", "blocked"]
        assert (queue.get_batch(batch.id) or pytest.fail("no batch")).total == 1
        _run(conn, flow[a].id, fail=True)
        assert queue.retry_dead_jobs(workflow_id=flow.id) == 1
        assert queue.cancel_jobs(batch_id=batch.id) == 1
    assert _status(conn, flow[a].id) == "pending" and _status(conn, batch.jobs[0].id) == "cancelled"


def test_workflow_client_through_a_queue_bound_to_a_pool_async(db_url: str, conn: psycopg.Connection) -> None:
    async def go() -> None:
        async with client.Queue(db_url, default=False) as queue:
            a = Enqueue(ship_order, {"customer": "qa1"}, max_attempts=1)
            flow = await queue.enqueue_workflow_async(
                client.workflow(a, Enqueue(ship_order, {"customer": "qa2"}).after(a)))
            batch = await queue.enqueue_batch_async([Enqueue(ship_order, {"customer": "qa3"}, queue="batch-qa")])
            assert [j.status for j in (await queue.get_workflow_async(flow.id) or [])] == ["pending", "blocked"]
            assert (await queue.get_batch_async(batch.id) or pytest.fail("no batch")).total == 1
            assert await queue.get_workflow_async(uuid.uuid4()) is None
            _run(conn, flow[a].id, fail=True)
            assert await queue.retry_dead_jobs_async(workflow_id=flow.id) == 1
            assert await queue.cancel_jobs_async(batch_id=batch.id) == 1
            assert _status(conn, flow[a].id) == "pending" and _status(conn, batch.jobs[0].id) == "cancelled"

    asyncio.run(go())


def test_workflow_client_async_reads(db_url: str, conn: psycopg.Connection) -> None:
    a = Enqueue(ship_order, {"customer": "ar1"})
    flow = client.workflow(a, Enqueue(ship_order, {"customer": "ar2"}).after(a)).enqueue(conn)
    batch = client.enqueue_batch(conn, [Enqueue(ship_order, {"customer": f"ar{n}"}, queue=f"ar-{n}") for n in (3, 4)])
    _run(conn, batch.jobs[0].id)

    async def go() -> None:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
            graph = await client.get_workflow_async(aconn, str(flow.id))
            assert graph == client.get_workflow(conn, flow.id)
            assert graph is not None and [j.id for j in graph] == [flow[a].id, flow.jobs[1].id]
            assert graph[1].depends_on == [flow[a].id] and graph[1].status == "blocked"
            status = await client.get_batch_async(aconn, batch.id)
            assert status == client.get_batch(conn, batch.id)
            assert status is not None and (status.total, status.succeeded, status.pending) == (2, 1, 1)
            assert await client.get_workflow_async(aconn, uuid.uuid4()) is None
            assert await client.get_batch_async(aconn, uuid.uuid4()) is None
            with pytest.raises(ValueError, match="workflow id"):
                await client.get_workflow_async(aconn, "not-a-uuid")
        # In the caller's transaction: a read of nothing leaves it usable, and sees its own rows.
        async with await psycopg.AsyncConnection.connect(db_url) as app:
            job = await ship_order.enqueue_async(app, {"customer": "atx"}, workflow_id=uuid.uuid4())
            assert await client.get_workflow_async(app, uuid.uuid4()) is None
            assert await client.get_batch_async(app, uuid.uuid4()) is None
            assert job.workflow_id is not None
            assert [j.id for j in await client.get_workflow_async(app, job.workflow_id) or []] == [job.id]
            await app.commit()
        assert _status(conn, job.id) == "pending"

    asyncio.run(go())


def test_workflow_client_async_retry_dead_jobs_and_cancel_jobs(db_url: str, conn: psycopg.Connection) -> None:
    dead = [charge_order.enqueue(conn, {"customer": f"ra{n}"}, max_attempts=1, serial_key=f"ra{n}") for n in range(3)]
    for job in dead:
        _run(conn, job.id, fail=True)
    other = ship_order.enqueue(conn, {"customer": "ra9"}, max_attempts=1)
    _run(conn, other.id, fail=True)
    a = Enqueue(ship_order, {"customer": "ka1"})
    flow = client.workflow(a, Enqueue(ship_order, {"customer": "ka2"}).after(a)).enqueue(conn)

    async def go() -> list[int]:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
            with pytest.raises(ValueError, match="at least one filter"):
                await client.retry_dead_jobs_async(aconn)
            with pytest.raises(TypeError, match="statuses"):
                await client.cancel_jobs_async(aconn, queue="orders", statuses="pending")
            with pytest.raises(ValueError, match="earlier"):
                await client.retry_dead_jobs_async(aconn, type=ship_order, since=timedelta(0), until=timedelta(hours=1))
            counts = [await client.retry_dead_jobs_async(aconn, type=charge_order, error="DECLINED",
                                                         since=timedelta(minutes=5))]
            counts.append(await client.retry_dead_jobs_async(
                aconn, type="ship_order", until=datetime.now(timezone.utc) - timedelta(hours=1)))
            counts.append(await client.retry_dead_jobs_async(aconn, type="ship_order", since=timedelta(minutes=5)))
            counts.append(await client.cancel_jobs_async(aconn, workflow_id=flow.id, statuses=["blocked"]))
            counts.append(await client.cancel_jobs_async(aconn, queue="orders", since=timedelta(minutes=5)))
            counts.append(await client.cancel_jobs_async(aconn, queue="orders"))
            return counts

    # What the sync test's calls answer, on the same jobs.
    assert asyncio.run(go()) == [3, 0, 1, 1, 5, 0]
    assert {_status(conn, j.id) for j in dead} | {_status(conn, other.id)} == {"cancelled"}
    assert [_status(conn, j.id) for j in flow.jobs] == ["cancelled", "cancelled"]


def test_workflow_client_async_bulk_calls_commit_inside_the_callers_transaction(db_url: str,
                                                                                 conn: psycopg.Connection) -> None:
    job = ship_order.enqueue(conn, {"customer": "rb"}, max_attempts=1)
    _run(conn, job.id, fail=True)

    async def go(commit: bool) -> tuple[int, uuid.UUID]:
        async with await psycopg.AsyncConnection.connect(db_url) as app:
            mine = await ship_order.enqueue_async(app, {"customer": "rb-own"})  # the caller's transaction begun
            n = await client.retry_dead_jobs_async(app, type=ship_order, since=timedelta(minutes=5))
            await (app.commit() if commit else app.rollback())
            return n, mine.id

    n, mine = asyncio.run(go(commit=False))  # each bounded call a savepoint: the caller's rollback undoes it
    assert n == 1 and _status(conn, job.id) == "dead" and db.get_job(conn, job_id=mine) is None
    n, mine = asyncio.run(go(commit=True))
    assert n == 1 and _status(conn, job.id) == "pending" and _status(conn, mine) == "pending"


def test_workflow_client_async_reads_and_actions_need_psycopg(db_url: str, conn: psycopg.Connection) -> None:
    asyncpg = pytest.importorskip("asyncpg")
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    from tests.test_connections import _asyncpg_params, _sqlalchemy_url

    batch = client.enqueue_batch(conn, [Enqueue(ship_order, {"customer": "pg"})])

    async def go() -> None:
        raw = await asyncpg.connect(**_asyncpg_params(db_url))
        try:
            for call in (client.get_workflow_async(raw, uuid.uuid4()), client.get_batch_async(raw, batch.id),
                         client.retry_dead_jobs_async(raw, all_jobs=True), client.cancel_jobs_async(raw, all_jobs=True)):
                with pytest.raises(TypeError, match=r"_async\(\) needs psycopg 3 under the connection"):
                    await call
        finally:
            await raw.close()
        for driver, works in (("psycopg", True), ("asyncpg", False)):
            engine = create_async_engine(_sqlalchemy_url(db_url, driver))
            try:
                async with AsyncSession(engine) as session:
                    if works:
                        status = await client.get_batch_async(session, batch.id)
                        assert status is not None and status.total == 1
                    else:
                        with pytest.raises(TypeError, match=r"get_batch_async\(\) needs psycopg 3"):
                            await client.get_batch_async(session, batch.id)
            finally:
                await engine.dispose()

    asyncio.run(go())
    with pytest.raises(TypeError, match="sync connection: use the function without _async"):
        asyncio.run(client.get_workflow_async(conn, uuid.uuid4()))  # a sync one: the call without _async
    assert _status(conn, batch.jobs[0].id) == "pending"
