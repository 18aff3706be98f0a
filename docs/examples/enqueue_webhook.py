"""Enqueue a webhook call in your own transaction, then wait for its result.

    DATABASE_URL=postgresql://... python enqueue_webhook.py https://example.test/hook

Run a worker that knows the task first: `pgqw worker --tasks webhook_tasks` (in this folder).
"""
from __future__ import annotations

import os
import sys

import psycopg
from webhook_tasks import Webhook, call_webhook

from pgqw import client


def main(url: str) -> None:
    with psycopg.connect(os.environ["DATABASE_URL"]) as conn:      # one transaction:
        conn.execute("create table if not exists orders (id serial primary key, note text)")
        order_id = conn.execute("insert into orders (note) values ('paid') returning id").fetchone()[0]
        job = call_webhook.enqueue(conn, Webhook(url=url, body={"order": order_id, "event": "paid"}),
                                   idempotency_key=f"order-{order_id}-paid")
    # Committed: the order and its job exist together, and a worker has been woken.
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        done = client.wait(conn, job.id, timeout=60)
        print(done.status, client.result(conn, job.id))


if __name__ == "__main__":
    main(sys.argv[1])
