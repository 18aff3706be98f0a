"""QV400 names the argument: every invalid-argument refusal in db/functions sets the error's column field
to the argument's name without its p_ (what pgqw.errors.InvalidArgument reads into `.argument`)."""
from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest

from pgqw import errors
from tests.helpers import enqueue

FUNCTIONS_DIR = Path(__file__).resolve().parents[2] / "db" / "functions"
# The one QV400 that no argument causes: a claim in a transaction that is not read committed.
NO_ARGUMENT = {("claim_jobs_at", "a claim must run in a read committed transaction")}


def _raises(sql: str) -> list[str]:
    """Each `raise exception using errcode = ...QV400...;` statement of a function file."""
    found = []
    for start in (m.start() for m in re.finditer(r"raise exception using errcode = ", sql)):
        statement = sql[start:sql.index(";\n", start)]
        if "'QV400'" in statement:
            found.append(statement)
    return found


def test_every_invalid_argument_raise_names_one_of_its_functions_arguments() -> None:
    checked = 0
    for path in sorted(FUNCTIONS_DIR.glob("*.sql")):
        sql = path.read_text()
        signature = sql[sql.index("create or replace function"):sql.index("\nas $$")]
        arguments = {name for name in re.findall(r"\bp_([a-z_]+)\s", signature)}
        for statement in _raises(sql):
            column = re.search(r"column = (.*)$", statement, re.S)
            if column is None:
                assert any(f == path.stem and m in statement for f, m in NO_ARGUMENT), (path.name, statement)
                continue
            named = set(re.findall(r"'([a-z_]+)'", column.group(1)))
            assert named and named <= arguments, (path.name, named - arguments, statement)
            checked += 1
    assert checked > 90


@pytest.mark.parametrize(("statement", "argument"), [
    ("select * from claim_job('')", "worker_id"),
    ("select * from claim_jobs('w1', 0)", "limit"),
    ("select * from claim_job('w1', p_lease_ms => 0)", "lease_ms"),
    ("select * from claim_jobs('w1', 1, array[]::text[])", "queues"),
    ("select * from enqueue_job('t', '[]', 'k')", "payload"),
    ("select * from enqueue_job('t', '{}', 'k', p_max_attempts => 0)", "max_attempts"),
    ("select * from enqueue_jobs('{}')", "jobs"),
    ("select * from mark_succeeded(null, gen_random_uuid())", "job_id"),
    ("select * from mark_succeeded(gen_random_uuid(), null)", "lease_token"),
    ("select * from mark_succeeded(gen_random_uuid(), gen_random_uuid(), 'no-slash', '1')", "result_type"),
    ("select * from mark_failed(gen_random_uuid(), gen_random_uuid(), ' ')", "error"),
    ("select * from mark_failed(gen_random_uuid(), gen_random_uuid(), 'x', true, 0, -1)", "max_jitter_ms"),
    ("select * from heartbeat(null, '{}')", "job_ids"),
    ("select * from heartbeat('{}', '{}', 0)", "lease_ms"),
    ("select * from set_queue_limit('default', 0)", "max_running"),
    ("select * from retry_dead(gen_random_uuid(), 0)", "extra_attempts"),
    ("select backoff_delay(0)", "attempt"),
])
def test_invalid_argument_names_the_argument(conn: psycopg.Connection, statement: str, argument: str) -> None:
    enqueue(conn)
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(statement)
    assert exc.value.sqlstate == "QV400"
    assert exc.value.diag.column_name == argument
    error = errors.from_psycopg(exc.value)
    assert isinstance(error, errors.InvalidArgument) and error.argument == argument
