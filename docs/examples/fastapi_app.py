"""A FastAPI service that enqueues in a request, then reads the job and its result, all async.

    DATABASE_URL=postgresql://... uvicorn fastapi_app:app        # in this folder
    pgqw worker --tasks fastapi_app                               # a worker that runs send_receipt

POST /orders writes an order and enqueues its receipt in one transaction (the caller's: a rollback
leaves neither); POST /receipts/{order_id}/resend enqueues through the pgqw.Queue in a transaction of
its own; GET /jobs/{id} answers the job's status and, once it succeeded, its result.
"""
from __future__ import annotations

import os
import uuid
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import psycopg
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel

import pgqw
import pgqw.errors


class Receipt(BaseModel):
    order_id: int
    email: str


@pgqw.task(queue="receipts")
async def send_receipt(payload: Receipt, ctx: pgqw.Context) -> dict[str, Any]:
    ctx.log.info("receipt for order %s to %s", payload.order_id, payload.email)
    return {"sent_to": payload.email, "order_id": payload.order_id}


class NewOrder(BaseModel):
    email: str
    total_minor: int


pool: AsyncConnectionPool
queue: pgqw.Queue


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    global pool, queue
    pool = AsyncConnectionPool(os.environ["DATABASE_URL"], min_size=1, max_size=10, open=False)
    await pool.open()
    queue = pgqw.Queue(pool)  # the app's own pool; Task.defer_async goes through it
    async with pool.connection() as conn:
        await conn.execute("create table if not exists shop_orders"
                           " (id serial primary key, email text not null, total_minor integer not null)")
    try:
        yield
    finally:
        await queue.close_async()
        await pool.close()


app = FastAPI(lifespan=lifespan)


@app.exception_handler(pgqw.errors.PgqwError)
async def refused(_: Request, exc: pgqw.errors.PgqwError) -> JSONResponse:
    """The queue's refusals, with the HTTP status each SQLSTATE means (QT422: an unknown task type)."""
    code = pgqw.errors.CODES.get(exc.sqlstate or "")
    status = code.status if code is not None and code.status is not None else 400
    return JSONResponse({"error": exc.message, "sqlstate": exc.sqlstate}, status_code=status)


@app.exception_handler(psycopg.OperationalError)
async def unavailable(_: Request, exc: psycopg.OperationalError) -> JSONResponse:
    return JSONResponse({"error": "the database is unavailable"}, status_code=503)


@app.post("/orders", status_code=202)
async def create_order(order: NewOrder) -> dict[str, Any]:
    async with pool.connection() as conn:  # one transaction: the order and its job commit together
        cur = await conn.execute("insert into shop_orders (email, total_minor) values (%s, %s) returning id",
                                 [order.email, order.total_minor])
        row = await cur.fetchone()
        assert row is not None
        job = await send_receipt.enqueue_async(conn, Receipt(order_id=row[0], email=order.email),
                                               idempotency_key=f"receipt-{row[0]}")
    return {"order_id": row[0], "job_id": str(job.id)}


@app.post("/receipts/{order_id}/resend", status_code=202)
async def resend(order_id: int, email: str) -> dict[str, Any]:
    job = await send_receipt.defer_async(Receipt(order_id=order_id, email=email))
    return {"job_id": str(job.id)}


@app.get("/jobs/{job_id}")
async def job_status(job_id: uuid.UUID) -> dict[str, Any]:
    job = await queue.get_job_async(job_id)
    if job is None:
        raise HTTPException(404, "no such job")
    try:
        result = await queue.result_async(job_id)
    except pgqw.JobNotFinished:
        return {"status": job.status, "finished": False}
    return {"status": job.status, "finished": True, "result": result}
