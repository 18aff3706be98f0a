"""worker/connection/database.py: a transient error is retried with a capped backoff and logged; nothing else is."""
from __future__ import annotations

import threading
from typing import Iterator

import psycopg
import pytest

from pgqw.worker.connection.database import Backoff, Database, WorkerExiting, connect_kwargs, is_transient
from tests.worker.parts import log, settings


@pytest.fixture
def database(db_url: str) -> Iterator[tuple[Database, list[float], object]]:
    """A Database on this test's database whose waits between retries are recorded, not slept."""
    waits: list[float] = []
    worker_log, out = log()
    found = Database(db_url, settings(listen=False), worker_log, threading.Event(),
                     wait=lambda delay: waits.append(delay) or False)
    assert found.open() is None  # WORKER_LISTEN=0: no listening connection
    yield found, waits, out
    found.close()


def test_backoff_doubles_from_a_tenth_of_a_second_to_five() -> None:
    b = Backoff()
    assert [b.next() for _ in range(8)] == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    b.reset()
    assert b.next() == 0.1


def test_is_transient_covers_connection_errors_only() -> None:
    assert is_transient(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert is_transient(psycopg.errors.AdminShutdown())
    assert is_transient(psycopg.errors.SerializationFailure())
    assert is_transient(psycopg.errors.TooManyConnections())
    assert not is_transient(psycopg.errors.RaiseException())
    assert not is_transient(ValueError("x"))


def test_connect_kwargs_name_the_connection_and_let_the_url_win() -> None:
    kwargs = connect_kwargs("host=db dbname=q tcp_user_timeout=900", "w1", "pool", listen=False)
    assert kwargs["application_name"] == "pgqw-worker w1 pool" and kwargs["autocommit"]
    assert "tcp_user_timeout" not in kwargs and kwargs["connect_timeout"] == 5
    assert kwargs["prepare_threshold"] is None  # PgBouncer in transaction mode
    assert "prepare_threshold" not in connect_kwargs("dbname=q", "w1", "listen", listen=True)


def test_database_call_retries_a_lost_connection_with_backoff_then_returns(database) -> None:
    found, waits, out = database
    tries = []

    def flaky(conn: psycopg.Connection) -> int:
        tries.append(1)
        if len(tries) < 3:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return conn.execute("select 42").fetchone()[0]

    assert found.call("claim", flaky) == 42
    assert waits == [0.1, 0.2]
    assert out.lines("db error") == [
        "claim: server closed the connection unexpectedly; reconnecting in 0.1s",
        "claim: server closed the connection unexpectedly; reconnecting in 0.2s"]


def test_database_call_raises_any_other_error_at_once(database) -> None:
    found, waits, out = database
    with pytest.raises(psycopg.Error) as exc:
        found.call("mark", lambda conn: conn.execute("select 1/0"))
    assert exc.value.sqlstate == "22012"
    assert waits == [] and out.lines("db error") == []


def test_database_call_gives_up_at_its_deadline(database) -> None:
    found, waits, _ = database
    now = [100.0]

    def wait(delay: float) -> bool:  # an injected clock that the waits move on
        waits.append(delay)
        now[0] += delay
        return False

    found.clock, found.wait = lambda: now[0], wait

    def lost(conn: psycopg.Connection) -> None:
        raise psycopg.OperationalError("gone")

    with pytest.raises(psycopg.OperationalError):
        found.call("release_job", lost, deadline=100.25)  # 0.1 fits, 0.1 + 0.2 does not
    assert waits == [0.1]


def test_database_call_stops_when_the_process_exits(database) -> None:
    found, _, _ = database
    found.wait = lambda delay: True  # the wait ended because the process is exiting

    def lost(conn: psycopg.Connection) -> None:
        raise psycopg.OperationalError("gone")

    with pytest.raises(WorkerExiting):
        found.call("heartbeat", lost)
    found.exiting.set()
    with pytest.raises(WorkerExiting):
        found.call("claim", lambda conn: 1)
