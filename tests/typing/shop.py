"""A user's module written against pgqw's public API, as an application's own code would be: checked by
mypy (tests/test_lint.py, and against the installed wheel in tests/acceptance/test_installed_package.py)
with the package's own types (py.typed). It is not run."""
from __future__ import annotations

from datetime import timedelta

import psycopg
from pydantic import BaseModel

import pgqw
from pgqw import client, hooks, testing


class Receipt(BaseModel):
    order: int
    email: str


@pgqw.task(queue="receipts", max_attempts=3, retry=pgqw.Retry(base_ms=1000))
def send_receipt(payload: Receipt, ctx: pgqw.Context) -> dict[str, object]:
    ctx.log.info("receipt %s", payload.order)
    if ctx.stopping:
        raise pgqw.PermanentError("stopped")
    return {"sent_to": payload.email}


@hooks.around_attempt
def timing(attempt: hooks.Attempt) -> hooks.Around:
    outcome = yield
    print(attempt.job_id, outcome)


def enqueue_in_my_transaction(conn: psycopg.Connection) -> str:
    job = send_receipt.enqueue(conn, Receipt(order=1, email="a@example.com"), idempotency_key="r-1",
                               delay=timedelta(seconds=5), priority=2)
    many = client.enqueue_many(conn, [client.Enqueue(send_receipt, {"order": 2, "email": "b@example.com"})])
    return f"{job.id} {many[0].status}"


def with_a_queue(dsn: str) -> object:
    queue = pgqw.Queue(dsn)
    job = send_receipt.defer(Receipt(order=3, email="c@example.com"))
    try:
        return queue.result(job.id)
    except pgqw.JobNotFinished as not_yet:
        return not_yet.status
    finally:
        queue.close()


async def async_enqueue(conn: psycopg.AsyncConnection) -> None:
    await send_receipt.enqueue_async(conn, {"order": 4, "email": "d@example.com"}, queue="vip")
    await client.cancel_async(conn, "00000000-0000-0000-0000-000000000000")


def in_a_test(conn: psycopg.Connection) -> bool:
    ran = testing.run_jobs(conn, tasks=[send_receipt])
    return all(r.outcome == "succeeded" for r in ran) and pgqw.__version__ != ""
