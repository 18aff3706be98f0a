"""pgqw.client: enqueueing on the caller's own connection and transaction (sync and async), reading a
job, its attempts and its result, and waiting for it to end on LISTEN."""
from __future__ import annotations

import asyncio
import threading
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pydantic
import pytest
from pydantic import BaseModel

from pgqw import client, db
from pgqw.errors import JobStateConflict, UnknownQueue
from pgqw.tasks import File, Registry, register
from tests.helpers import listen_waiting

tasks = Registry()


class Welcome(BaseModel):
    email: str
    times: int = 1


@tasks.task("send_welcome", queue="emails", priority=3, max_attempts=4)
def send_welcome(payload: Welcome, ctx) -> dict:
    return {"sent_to": payload.email}


@pytest.fixture(autouse=True)
def _registered(conn: psycopg.Connection) -> None:
    """The module's task types, registered as a deploy does (pgqw tasks register)."""
    register(conn, tasks)


def _finish(conn: psycopg.Connection, job_id: uuid.UUID, result=None) -> None:
    """Runs the job as a worker would: claim it, then record its success with its result."""
    queue = db.get_job(conn, job_id=job_id).queue
    job = db.claim_job(conn, worker_id="client-test", queues=[queue])
    assert job is not None and job.id == job_id
    db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token, result=result)


def test_client_enqueue_in_a_rolled_back_transaction_leaves_no_job(db_url: str, conn: psycopg.Connection) -> None:
    with psycopg.connect(db_url) as app:
        job = send_welcome.enqueue(app, Welcome(email="a@example.com"), idempotency_key="rolled-back")
        assert job.created
        app.rollback()
    assert db.get_job(conn, job_id=job.id) is None


def test_client_enqueue_commits_with_the_callers_writes_and_wakes_a_worker(db_url: str, conn: psycopg.Connection,
                                                                           connect) -> None:
    listener = connect()
    listen_waiting(listener)
    with psycopg.connect(db_url) as app:
        app.execute("create table signups (email text)")
        app.execute("insert into signups values ('b@example.com')")
        job = send_welcome.enqueue(app, {"email": "b@example.com"})
        # Not visible, and nobody woken, before the commit.
        assert db.get_job(conn, job_id=job.id) is None
        assert list(listener.notifies(timeout=0.05, stop_after=1)) == []
    # The with block committed both writes together.
    assert conn.execute("select count(*) from signups").fetchone() == (1,)
    assert db.get_job(conn, job_id=job.id).status == "pending"
    [note] = list(listener.notifies(timeout=5, stop_after=1))
    assert note.channel == db.NOTIFY_CHANNEL and note.payload == "emails"  # the job's queue (the type's)


def test_client_options_and_the_task_types_defaults(conn: psycopg.Connection) -> None:
    # Registered (the fixture, as a deploy does): the task's code defaults, unless the job gives its own.
    job = client.enqueue(conn, send_welcome, Welcome(email="d@example.com"))
    assert (job.queue, job.priority, job.max_attempts) == ("emails", 3, 4)
    at = datetime.now(timezone.utc) + timedelta(hours=2)
    job = client.enqueue(conn, send_welcome, Welcome(email="e@example.com"), idempotency_key="welcome-e",
                         queue="vip", priority=9, run_at=at, max_attempts=2)
    assert (job.queue, job.priority, job.max_attempts, job.run_at) == ("vip", 9, 2, at)
    again = client.enqueue(conn, send_welcome, Welcome(email="e@example.com"), idempotency_key="welcome-e",
                           queue="vip", priority=9, run_at=at, max_attempts=2)
    assert (again.id, again.created) == (job.id, False)
    delayed = client.enqueue(conn, send_welcome, Welcome(email="f@example.com"), delay=timedelta(minutes=5))
    assert timedelta(minutes=4, seconds=59) <= delayed.run_at - delayed.created_at <= timedelta(minutes=5, seconds=1)
    with pytest.raises(ValueError, match="run_at or delay"):
        client.enqueue(conn, send_welcome, Welcome(email="g@example.com"), run_at=at, delay=5)


def test_client_payload_is_checked_against_the_model_before_the_database(conn: psycopg.Connection) -> None:
    with pytest.raises(pydantic.ValidationError):
        send_welcome.enqueue(conn, {"email": 42})
    assert db.list_jobs(conn).jobs == []


def test_client_enqueue_many_in_one_call(db_url: str, conn: psycopg.Connection) -> None:
    db.register_task_types(conn, types=[{"name": "report", "payload_schema": {}}])  # defined elsewhere
    with psycopg.connect(db_url) as app:
        made = client.enqueue_many(app, [
            client.Enqueue(send_welcome, Welcome(email=f"{n}@example.com"), idempotency_key=f"many-{n}",
                           delay=60 if n == 2 else None)
            for n in range(3)
        ] + [client.Enqueue("report", {"month": "2026-11"}, queue="reports")])
    assert [j.idempotency_key for j in made[:3]] == ["many-0", "many-1", "many-2"]
    assert made[3].type == "report" and made[3].queue == "reports"
    assert made[2].run_at > made[0].run_at
    assert len(db.list_jobs(conn).jobs) == 4


def test_client_reads_job_attempts_and_result(conn: psycopg.Connection) -> None:
    job = send_welcome.enqueue(conn, {"email": "h@example.com"})
    with pytest.raises(client.JobNotFinished) as not_yet:
        client.result(conn, job.id)
    assert not_yet.value.status == "pending"
    _finish(conn, job.id, ("application/json", {"sent_to": "h@example.com"}, None))
    assert client.get_job(conn, job.id).status == "succeeded"
    assert [a.outcome for a in client.attempts(conn, job.id)] == ["succeeded"]
    assert client.result(conn, job.id) == {"sent_to": "h@example.com"}
    pdf = client.enqueue(conn, "listing_flyer", {"any": "thing"})
    _finish(conn, pdf.id, ("application/pdf", None, b"%PDF-1.4 r"))
    assert client.result(conn, pdf.id) == File(b"%PDF-1.4 r", "application/pdf")


def test_client_result_tells_none_returned_from_not_finished_and_no_job(conn: psycopg.Connection) -> None:
    job = send_welcome.enqueue(conn, {"email": "n@example.com"})
    _finish(conn, job.id, None)  # the handler returned None: no result row
    assert client.result(conn, job.id) is None
    with pytest.raises(client.JobNotFound):
        client.result(conn, uuid.uuid4())
    dead = send_welcome.enqueue(conn, {"email": "x@example.com"}, max_attempts=1)
    claimed = db.claim_job(conn, worker_id="client-test", queues=["emails"])
    assert claimed is not None and claimed.id == dead.id
    db.mark_failed(conn, job_id=claimed.id, lease_token=claimed.lease_token, error="boom")
    with pytest.raises(client.JobNotFinished) as never:
        client.result(conn, dead.id)
    assert never.value.status == "dead"


def test_client_cancel_retry_pause_and_resume(conn: psycopg.Connection) -> None:
    waiting = send_welcome.enqueue(conn, {"email": "c@example.com"})
    cancelled = client.cancel(conn, waiting.id)
    assert cancelled.status == "cancelled" and cancelled.cancel_requested_at is not None
    with pytest.raises(JobStateConflict) as final:
        client.cancel(conn, waiting.id)
    assert final.value.sqlstate == "QS409" and isinstance(final.value.__cause__, psycopg.Error)
    dead = send_welcome.enqueue(conn, {"email": "r@example.com"}, max_attempts=1)
    claimed = db.claim_job(conn, worker_id="client-test", queues=["emails"])
    assert claimed is not None and claimed.id == dead.id
    db.mark_failed(conn, job_id=claimed.id, lease_token=claimed.lease_token, error="boom")
    again = client.retry(conn, dead.id, extra_attempts=2)
    assert (again.status, again.max_attempts) == ("pending", 3)
    assert client.pause(conn, "emails").paused is True
    assert db.claim_job(conn, worker_id="client-test", queues=["emails"]) is None
    assert client.resume(conn, "emails").paused is False
    with pytest.raises(UnknownQueue) as unknown:
        client.pause(conn, "no-such-queue")
    assert unknown.value.sqlstate == "QU404"
    assert client.pause(conn, "no-such-queue", create=True).paused is True


@pytest.mark.parametrize("option, value", [("idempotency_key", 1), ("queue", 5), ("priority", "high"),
                                           ("max_attempts", True), ("run_at", "tomorrow"), ("delay", "5s"),
                                           ("unique_for", 60)])
def test_client_options_of_the_wrong_type_are_refused_before_the_database(
    conn: psycopg.Connection, option: str, value: object
) -> None:
    with pytest.raises(TypeError, match=option):
        send_welcome.enqueue(conn, {"email": "t@example.com"}, **{option: value})  # type: ignore[misc]
    assert db.list_jobs(conn).jobs == []


def test_client_wait_returns_when_the_job_ends(db_url: str, conn: psycopg.Connection, connect) -> None:
    job = send_welcome.enqueue(conn, {"email": "i@example.com"})
    waiter = connect()
    got: list[db.Job] = []
    listening = threading.Event()
    thread = threading.Thread(target=lambda: got.append(client.wait(waiter, job.id, timeout=30)))
    # The waiter reads the job once after LISTEN and watch_job; a notification makes it read again.
    original = db.watch_job

    def watch_then_signal(c, **kwargs):
        status = original(c, **kwargs)
        listening.set()
        return status

    db.watch_job = watch_then_signal
    try:
        thread.start()
        assert listening.wait(10)
    finally:
        db.watch_job = original
    _finish(conn, job.id)
    thread.join(10)
    assert got and got[0].status == "succeeded"


def test_client_wait_times_out_and_needs_autocommit(db_url: str, conn: psycopg.Connection) -> None:
    job = send_welcome.enqueue(conn, {"email": "j@example.com"})
    with pytest.raises(client.JobTimeout, match="still pending"):
        client.wait(conn, job.id, timeout=0.2)
    with psycopg.connect(db_url) as not_auto:
        with pytest.raises(ValueError, match="autocommit"):
            client.wait(not_auto, job.id, timeout=1)
    with pytest.raises(LookupError):
        client.wait(conn, uuid.uuid4(), timeout=1)


def test_client_async_enqueue_rollback_commit_and_wait(db_url: str, conn: psycopg.Connection) -> None:
    async def scenario() -> tuple[uuid.UUID, uuid.UUID, list[uuid.UUID], db.Job]:
        async with await psycopg.AsyncConnection.connect(db_url) as app:
            gone = await send_welcome.enqueue_async(app, Welcome(email="k@example.com"))
            await app.rollback()
            kept = await client.enqueue_async(app, send_welcome, {"email": "l@example.com"}, queue="kept")
            many = await client.enqueue_many_async(app, [client.Enqueue(send_welcome, {"email": "m@example.com"}),
                                                         client.Enqueue(send_welcome, {"email": "n@example.com"})])
            await app.commit()
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as waiter:
            waiting = asyncio.ensure_future(client.wait_async(waiter, kept.id, timeout=30))
            # Whether the waiter reads the job before or after the success, it returns it once ended.
            await asyncio.to_thread(_finish, conn, kept.id, ("application/json", {"ok": True}, None))
            done = await waiting
            assert await client.result_async(waiter, kept.id) == {"ok": True}
        return gone.id, kept.id, [j.id for j in many], done

    gone, kept, many, done = asyncio.run(scenario())
    assert db.get_job(conn, job_id=gone) is None
    assert done.id == kept and done.status == "succeeded"
    assert all(db.get_job(conn, job_id=j).status == "pending" for j in many)


@pytest.mark.parametrize("call", [client.get_job, client.attempts, client.result, client.cancel, client.retry])
def test_client_a_job_id_that_is_no_uuid_is_refused_before_the_database(conn: psycopg.Connection, call) -> None:
    with pytest.raises(ValueError, match="a job id is a UUID, got 'job-42'"):
        call(conn, "job-42")


def test_client_expiry_options_reach_the_job_and_wait_ends_on_expired(conn: psycopg.Connection) -> None:
    at = datetime.now(timezone.utc) + timedelta(hours=1)
    assert send_welcome.enqueue(conn, {"email": "e@example.com"}, expires_at=at).expires_at == at
    later = send_welcome.enqueue(conn, {"email": "f@example.com"}, expire_after=timedelta(minutes=5))
    assert later.expires_at == later.run_at + timedelta(minutes=5)
    [many] = client.enqueue_many(conn, [client.Enqueue(send_welcome, {"email": "g@example.com"}, expire_after=1000)])
    assert many.expires_at == many.run_at + timedelta(seconds=1)
    in_ms = send_welcome.enqueue(conn, {"email": "h@example.com"}, expire_after_ms=2500)
    assert in_ms.expires_at == in_ms.run_at + timedelta(milliseconds=2500)
    conn.execute("select * from sweep_stuck_at(now() + interval '1 minute')")
    assert client.wait(conn, many.id, timeout=5).status == "expired"   # final: wait returns at once
    assert "expired" in client.FINAL


@pytest.mark.parametrize("options, error", [
    ({"expires_at": datetime.now(timezone.utc) + timedelta(hours=1), "expire_after": 1000}, ValueError),
    ({"expires_at": datetime(2100, 1, 1)}, ValueError),
    ({"expires_at": "tomorrow"}, TypeError),
    ({"expire_after": 1.5}, TypeError),
    ({"expire_after": 1000, "expire_after_ms": 1000}, ValueError),
    ({"expires_at": datetime.now(timezone.utc) + timedelta(hours=1), "expire_after_ms": 1000}, ValueError),
    ({"expire_after_ms": timedelta(seconds=1)}, TypeError),
])
def test_client_bad_expiry_options_are_refused_before_the_database(conn: psycopg.Connection, options: dict,
                                                                   error: type) -> None:
    with pytest.raises(error, match="expire"):
        send_welcome.enqueue(conn, {"email": "t@example.com"}, **options)
    assert db.list_jobs(conn).jobs == []
