"""worker/connection/listener.py: which notifications wake the main loop, and a lost LISTEN connection."""
from __future__ import annotations

import threading

import psycopg
import pytest

from pgqw import db
from pgqw.worker.connection.listener import Listener
from tests.helpers import enqueue, one
from tests.worker.parts import log


def test_listener_wants_its_queues_and_any_queue() -> None:
    worker_log, _ = log()
    some = Listener(lambda: None, ("emails", "pdf"), threading.Event(), worker_log, threading.Event())
    assert some.wanted("emails") and some.wanted("*") and not some.wanted("default")
    every = Listener(lambda: None, None, threading.Event(), worker_log, threading.Event())
    assert every.wanted("default") and every.wanted("*")


def test_listener_wakes_the_main_loop_for_its_queue_only(db_url: str, conn: psycopg.Connection) -> None:
    wake = threading.Event()
    worker_log, out = log()
    listener = Listener(lambda: psycopg.connect(db_url, autocommit=True), ("emails",), wake, worker_log,
                        threading.Event())
    try:
        assert listener.poll(timeout=0) == []  # connects and LISTENs first
        assert out.lines("listen") == ["reconnected; claiming in case a notification was missed"]
        assert wake.is_set()
        wake.clear()
        db.wait_for_jobs(conn, worker_id="elsewhere")  # a worker of every queue waits: producers notify
        enqueue(conn, queue="default")
        assert listener.poll(timeout=5, stop_after=1) == ["default"]
        assert not wake.is_set()
        enqueue(conn, queue="emails")
        assert listener.poll(timeout=5, stop_after=1) == ["emails"]
        assert wake.is_set()
    finally:
        listener.close()


def test_listener_lost_connection_is_raised_closed_and_reconnected(db_url: str, conn: psycopg.Connection) -> None:
    wake = threading.Event()
    worker_log, out = log()
    listener = Listener(lambda: psycopg.connect(db_url, autocommit=True), None, wake, worker_log, threading.Event())
    try:
        listener.poll(timeout=0)
        db.wait_for_jobs(conn, worker_id="w1")
        pid = listener.conn.info.backend_pid
        assert one(conn, "select pg_terminate_backend(%s) as done", [pid])["done"]
        with pytest.raises(psycopg.OperationalError):
            listener.poll(timeout=5)
        assert listener.conn is None
        wake.clear()
        listener.poll(timeout=0)
        assert wake.is_set() and len(out.lines("listen")) == 2
        enqueue(conn)
        assert listener.poll(timeout=5, stop_after=1) == ["default"]
    finally:
        listener.close()
