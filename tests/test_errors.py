"""pgqw.errors: the project's SQLSTATEs declared once (CODES), agreeing with docs/errors.md and with what
db/functions raise, and from_psycopg turning a stored function's refusal into its class."""
from __future__ import annotations

import re
import uuid
from pathlib import Path

import psycopg
import pytest

from pgqw import client, errors
from pgqw.app.errors import DB_ERRORS

ROOT = Path(__file__).resolve().parents[1]


def _documented() -> dict[str, int | None]:
    """docs/errors.md's table of the project's codes: SQLSTATE → HTTP status (None for "—")."""
    found: dict[str, int | None] = {}
    for line in (ROOT / "docs" / "errors.md").read_text().splitlines():
        row = re.match(r"\|\s*`(Q[A-Z0-9]{4})`\s*\|\s*([^|]*?)\s*\|", line)
        if row:
            found[row.group(1)] = int(row.group(2)) if row.group(2).isdigit() else None
    return found


def test_errors_the_docs_table_and_the_python_table_list_the_same_codes_and_statuses() -> None:
    documented = _documented()
    assert documented, "docs/errors.md has no table of Q codes"
    assert documented == {c.sqlstate: c.status for c in errors.CODES.values()}


def test_errors_every_code_the_functions_raise_is_declared() -> None:
    raised = {m for f in (ROOT / "db" / "functions").glob("*.sql")
              for m in re.findall(r"errcode\s*=\s*'(Q[A-Z0-9]{4})'", f.read_text())}
    assert raised and raised <= set(errors.CODES), raised - set(errors.CODES)


def test_errors_the_api_map_is_made_of_the_table() -> None:
    for code in errors.CODES.values():
        if code.status is None:
            assert code.sqlstate not in DB_ERRORS
        else:
            assert DB_ERRORS[code.sqlstate] == (code.status, code.api_code)
            assert code.sqlstate.endswith(str(code.status))  # the codes end in their HTTP status
    assert {s for s in DB_ERRORS if s.startswith("Q")} <= set(errors.CODES)


def test_errors_from_psycopg_maps_a_stored_functions_refusal_to_its_class(conn: psycopg.Connection) -> None:
    missing = uuid.uuid4()
    with pytest.raises(psycopg.Error) as refused:
        conn.execute("select * from cancel_job(%s)", [missing])
    error = errors.from_psycopg(refused.value)
    assert isinstance(error, errors.JobNotFound) and isinstance(error, LookupError)
    assert error.sqlstate == "QN404" and error.__cause__ is refused.value
    assert error.message == refused.value.diag.message_primary and str(error) == error.message

    with pytest.raises(psycopg.Error) as bad:
        conn.execute("select * from set_queue_limit('default', 0)")
    invalid = errors.from_psycopg(bad.value)
    assert isinstance(invalid, errors.InvalidArgument) and invalid.sqlstate == "QV400"
    assert invalid.argument == bad.value.diag.column_name  # the functions set no column yet: None
    assert "at least 1" in invalid.message

    with pytest.raises(psycopg.Error) as theirs:  # PostgreSQL's own code: not ours
        conn.execute("select 1/0")
    assert errors.from_psycopg(theirs.value) is None


def test_errors_the_client_raises_the_classes_with_the_job_id(conn: psycopg.Connection) -> None:
    missing = uuid.uuid4()
    with pytest.raises(errors.JobNotFound) as gone:
        client.cancel(conn, missing)
    assert gone.value.sqlstate == "QN404" and gone.value.job_id == missing
    assert isinstance(gone.value.__cause__, psycopg.Error) and gone.value.__cause__.sqlstate == "QN404"
    assert client.JobNotFound is errors.JobNotFound
    with pytest.raises(errors.PgqwError) as unknown:
        client.resume(conn, "no-such-queue")
    assert isinstance(unknown.value, errors.UnknownQueue) and unknown.value.sqlstate == "QU404"


def test_errors_pgqw_errors_imports_without_flask() -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import sys, pgqw.errors, pgqw.client; "
                           "assert 'flask' not in sys.modules, 'flask imported'"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_errors_the_api_answers_a_pgqw_error_as_the_database_error_it_came_from(db_url: str) -> None:
    from flask import Flask

    from pgqw.app.errors import init_app

    app = Flask(__name__)
    init_app(app)

    @app.get("/boom")
    def boom() -> None:
        with psycopg.connect(db_url, autocommit=True) as c:
            client.cancel(c, uuid.uuid4())

    r = app.test_client().get("/boom")
    assert r.status_code == 404
    assert (r.get_json()["error"]["code"], r.get_json()["error"]["details"]["sqlstate"]) == ("job_not_found", "QN404")


def test_is_error_matches_a_class_by_its_own_code_only() -> None:
    lost = errors.from_psycopg(_Fake("QL409"))
    assert lost is not None and errors.is_error(lost, errors.LeaseLost)
    assert errors.is_error(_Fake("QK409"), errors.CancelRequested)
    assert not errors.is_error(_Fake("QK409"), errors.LeaseLost)  # a subclass has a code of its own
    assert errors.is_error(_Fake("QN404"), errors.LeaseLost, errors.JobNotFound)
    assert not errors.is_error(_Fake("23505"), errors.JobNotFound)
    assert not errors.is_error(ValueError("no code"), errors.JobNotFound)
    assert errors.cancel_requested(_Fake("QK409")) and not errors.cancel_requested(_Fake("QL409"))
    # Every class but the base stands for exactly one code of CODES.
    assert sorted(errors.SQLSTATE_OF.values()) == sorted(c.sqlstate for c in errors.CODES.values()
                                                        if c.error is not errors.PgqwError)


class _Fake(Exception):
    """A driver's error as far as pgqw.errors reads one: its SQLSTATE."""

    def __init__(self, sqlstate: str) -> None:
        super().__init__(f"error {sqlstate}")
        self.sqlstate = sqlstate


def test_is_error_of_the_base_class_matches_nothing() -> None:
    assert not errors.is_error(_Fake("QV413"), errors.PgqwError)
