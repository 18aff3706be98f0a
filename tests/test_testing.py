"""pgqw.testing: a user's tests run what they enqueued in-process, through the real stored functions
(run_jobs), and its pytest fixtures give a migrated throw-away schema (a real pytest run of a user-style
test module, in a subprocess)."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

from pgqw import PermanentError, Snooze, client, testing
from pgqw.schema import qualify
from pgqw.tasks import Registry, register

tasks = Registry()


class Order(BaseModel):
    order: int


@tasks.task("receipt", queue="mail")
def receipt(payload: Order, ctx: Any) -> dict[str, Any]:
    ctx.log.info("sending %s", payload.order)
    return {"sent": payload.order, "attempt": ctx.attempt}


@tasks.task("flaky", max_attempts=2)
def flaky(payload: Order, ctx: Any) -> None:
    raise ConnectionError(f"smtp down for {payload.order}")


@tasks.task("refused")
def refused(payload: Order, ctx: Any) -> None:
    raise PermanentError("no such customer")


@tasks.task("nothing")
def nothing(payload: Order, ctx: Any) -> None:
    return None


@tasks.task("snoozy")
def snoozy(payload: Order, ctx: Any) -> dict[str, Any]:
    if ctx.attempt == 1:
        raise Snooze(60_000)
    return {"attempt": ctx.attempt}


@tasks.task("async_receipt")
async def async_receipt(payload: Order, ctx: Any) -> dict[str, Any]:
    await asyncio.sleep(0)
    return {"async": payload.order}


@pytest.fixture(autouse=True)
def _registered(conn: psycopg.Connection) -> None:
    register(conn, tasks)


def test_testing_run_jobs_records_success_with_its_result(conn: psycopg.Connection) -> None:
    job = receipt.enqueue(conn, {"order": 1})
    [ran] = testing.run_jobs(conn, tasks=tasks)
    assert (ran.job.id, ran.outcome, ran.value) == (job.id, "succeeded", {"sent": 1, "attempt": 1})
    assert client.get_job(conn, job.id).status == "succeeded"
    assert client.result(conn, job.id) == {"sent": 1, "attempt": 1}
    [attempt] = client.attempts(conn, job.id)
    assert (attempt.outcome, attempt.worker_id) == ("succeeded", "pgqw-testing")
    assert testing.run_jobs(conn, tasks=tasks) == []  # nothing left


def test_testing_run_jobs_failures_follow_the_stored_functions(conn: psycopg.Connection) -> None:
    soft = flaky.enqueue(conn, {"order": 2})
    hard = refused.enqueue(conn, {"order": 3})
    ran = {r.job.id: r for r in testing.run_jobs(conn, tasks=tasks)}
    assert ran[soft.id].outcome == "failed" and ran[soft.id].error == "ConnectionError: smtp down for 2"
    assert isinstance(ran[soft.id].exception, ConnectionError)
    assert client.get_job(conn, soft.id).status == "failed"  # retried after its backoff: not run again now
    assert (ran[hard.id].outcome, ran[hard.id].error) == ("dead", "no such customer")
    assert client.get_job(conn, hard.id).status == "dead"
    with pytest.raises(client.JobNotFinished):
        client.result(conn, hard.id)
    # The retry, once due (moved by hand, as a test would): the last attempt dead-letters it.
    conn.execute(qualify("update pgqw.jobs set run_at = now() where id = %s"), [soft.id])
    [again] = testing.run_jobs(conn, tasks=tasks)
    assert (again.outcome, client.get_job(conn, soft.id).status) == ("dead", "dead")
    assert [a.outcome for a in client.attempts(conn, soft.id)] == ["failed", "failed"]


def test_testing_run_jobs_none_async_limit_and_which_tasks(conn: psycopg.Connection) -> None:
    none = nothing.enqueue(conn, {"order": 4})
    other = receipt.enqueue(conn, {"order": 5})
    [ran] = testing.run_jobs(conn, tasks=[nothing])  # only the tasks given
    assert ran.job.id == none.id and client.result(conn, none.id) is None
    assert client.get_job(conn, other.id).status == "pending"
    two = [async_receipt.enqueue(conn, {"order": n}) for n in (6, 7)]
    assert len(testing.run_jobs(conn, tasks=[async_receipt], limit=1)) == 1
    assert len(testing.run_jobs(conn, tasks=[async_receipt])) == 1
    assert [client.result(conn, j.id) for j in two] == [{"async": 6}, {"async": 7}]


def test_testing_run_jobs_async_handler_from_a_running_loop(conn: psycopg.Connection) -> None:
    job = async_receipt.enqueue(conn, {"order": 8})

    async def a_test() -> list[testing.Ran]:
        return testing.run_jobs(conn, tasks=[async_receipt])

    [ran] = asyncio.run(a_test())
    assert ran.outcome == "succeeded" and client.result(conn, job.id) == {"async": 8}


def test_testing_run_jobs_raise_errors_after_recording(conn: psycopg.Connection) -> None:
    job = refused.enqueue(conn, {"order": 9})
    with pytest.raises(PermanentError, match="no such customer"):
        testing.run_jobs(conn, tasks=tasks, raise_errors=True)
    assert client.get_job(conn, job.id).status == "dead"


def test_testing_run_jobs_a_snooze_puts_the_job_off_without_spending_its_attempt(conn: psycopg.Connection) -> None:
    job = snoozy.enqueue(conn, {"order": 11})
    [ran] = testing.run_jobs(conn, tasks=tasks, raise_errors=True)   # a snooze is not an error
    assert (ran.job.id, ran.outcome, ran.error, ran.job.status) == (job.id, "snoozed", None, "pending")
    assert isinstance(ran.exception, Snooze) and ran.job.max_attempts == job.max_attempts + 1
    assert testing.run_jobs(conn, tasks=tasks) == []   # not before its time
    conn.execute(qualify("update pgqw.jobs set run_at = now() where id = %s"), [job.id])
    [again] = testing.run_jobs(conn, tasks=tasks)
    assert (again.outcome, client.result(conn, job.id)) == ("succeeded", {"attempt": 2})
    assert [a.outcome for a in client.attempts(conn, job.id)] == ["snoozed", "succeeded"]


def test_testing_run_jobs_a_snooze_past_the_limit_is_dead(conn: psycopg.Connection) -> None:
    conn.execute(qualify("update pgqw.queue_settings set max_snoozes = 0"))
    job = snoozy.enqueue(conn, {"order": 12})
    [ran] = testing.run_jobs(conn, tasks=tasks)
    assert (ran.outcome, ran.error, client.get_job(conn, job.id).status) == ("dead", "snoozed more than 0 times", "dead")


def test_testing_run_jobs_in_the_callers_transaction_rolls_back_with_it(db_url: str, conn: psycopg.Connection) -> None:
    with psycopg.connect(db_url) as mine:
        job = receipt.enqueue(mine, {"order": 10})
        [ran] = testing.run_jobs(mine, tasks=tasks)
        assert ran.outcome == "succeeded"
        mine.rollback()
    assert client.get_job(conn, job.id) is None


USER_TESTS = '''
    import pytest
    from pydantic import BaseModel

    import pgqw
    from pgqw import client, testing

    pytest_plugins = ["pgqw.testing"]


    class Order(BaseModel):
        order: int


    @pgqw.task(queue="mail")
    def shop_receipt(payload: Order, ctx: pgqw.Context) -> dict:
        return {"sent": payload.order}


    def test_first(pgqw_conn, pgqw_schema):
        assert pgqw_schema.startswith("pgqw_test_")
        job = shop_receipt.enqueue(pgqw_conn, Order(order=1))
        [ran] = testing.run_jobs(pgqw_conn)
        assert ran.outcome == "succeeded"
        assert client.result(pgqw_conn, job.id) == {"sent": 1}


    def test_second_starts_empty(pgqw_conn):
        assert pgqw_conn.execute("select count(*) from jobs").fetchone() == (0,)
        shop_receipt.enqueue(pgqw_conn, {"order": 2})
        assert [r.value for r in testing.run_jobs(pgqw_conn)] == [{"sent": 2}]
'''


def test_testing_fixtures_in_a_users_pytest_run(empty_db_url: str, tmp_path: Path) -> None:
    (tmp_path / "test_shop.py").write_text(textwrap.dedent(USER_TESTS))
    env = {k: v for k, v in os.environ.items() if k not in ("PGQW_TEST_DATABASE_URL", "PGQW_SCHEMA")}
    env["DATABASE_URL"] = empty_db_url
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_shop.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 passed" in out.stdout
    with psycopg.connect(empty_db_url) as check:  # the throw-away schema is gone; nothing in public
        assert check.execute("select count(*) from pg_namespace where nspname like 'pgqw_test_%'").fetchone() == (0,)
        assert check.execute("select count(*) from pg_tables where schemaname = 'public'").fetchone() == (0,)


@tasks.task("progressing")
def progressing(payload: Order, ctx: Any) -> None:
    ctx.progress({"done": payload.order})


@tasks.task("transacted")
def transacted(payload: Order, ctx: Any) -> dict[str, Any]:
    with ctx.transaction(result={"saved": payload.order}) as tx:
        tx.execute("insert into testing_rows values (%s)", [payload.order])
        if payload.order < 0:
            raise ValueError("negative")
    return {"not": "stored"}


def test_testing_run_jobs_progress_is_written_under_the_token(conn: psycopg.Connection) -> None:
    job = progressing.enqueue(conn, {"order": 7})
    [ran] = testing.run_jobs(conn, tasks=tasks)
    assert ran.outcome == "succeeded" and client.get_job(conn, job.id).progress == {"done": 7}


def test_testing_run_jobs_transaction_commits_with_the_success_or_not_at_all(conn: psycopg.Connection) -> None:
    conn.execute("create table if not exists testing_rows (n integer not null)")
    good = transacted.enqueue(conn, {"order": 3})
    bad = transacted.enqueue(conn, {"order": -1})
    ran = {r.job.id: r for r in testing.run_jobs(conn, tasks=tasks, queues=None)}
    assert ran[good.id].outcome == "succeeded" and client.result(conn, good.id) == {"saved": 3}
    assert ran[bad.id].outcome == "failed" and ran[bad.id].error == "ValueError: negative"
    assert [r[0] for r in conn.execute("select n from testing_rows order by n")] == [3]
