"""Options of the wrong type: mypy must refuse each (tests/test_lint.py counts the errors)."""
from __future__ import annotations

import psycopg

import pgqw


@pgqw.task()
def noop(payload: dict, ctx: pgqw.Context) -> None:
    return None


def wrong(conn: psycopg.Connection) -> None:
    noop.enqueue(conn, {}, idempotency_key=1)      # an int, not a str
    noop.enqueue(conn, {}, priority="high")        # a str, not an int
    noop.enqueue(conn, {}, no_such_option=True)    # not an option
