"""docs/examples/fastapi_app.py as a user runs it: its requests enqueue (in the request's transaction,
and through the pgqw.Queue on the app's pool), the job is run by pgqw.testing.run_jobs through the real
stored functions, and the app answers its status and result."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterator

import psycopg
import pytest
from fastapi.testclient import TestClient

import pgqw
from pgqw import db, testing
from pgqw.schema import qualify
from pgqw.tasks import register

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "fastapi_app.py"


@pytest.fixture
def example(db_url: str, conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.setenv("DATABASE_URL", db_url)
    spec = importlib.util.spec_from_file_location("fastapi_app_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    register(conn, [module.send_receipt])  # as `pgqw migrate --tasks fastapi_app` does at deploy
    pgqw.Queue._default = None
    yield module
    pgqw.Queue._default = None


def test_example_fastapi_enqueue_in_a_request_then_read_the_result(example: ModuleType,
                                                                   conn: psycopg.Connection) -> None:
    with TestClient(example.app) as http:
        r = http.post("/orders", json={"email": "ada@example.com", "total_minor": 1250})
        assert r.status_code == 202
        order_id, job_id = r.json()["order_id"], r.json()["job_id"]
        assert conn.execute("select email from shop_orders where id = %s", [order_id]).fetchone() == ("ada@example.com",)
        assert http.get(f"/jobs/{job_id}").json() == {"status": "pending", "finished": False}

        [ran] = testing.run_jobs(conn, tasks=[example.send_receipt])
        assert ran.outcome == "succeeded"
        assert http.get(f"/jobs/{job_id}").json() == {
            "status": "succeeded", "finished": True, "result": {"sent_to": "ada@example.com", "order_id": order_id}}

        again = http.post(f"/receipts/{order_id}/resend", params={"email": "ada@example.com"})
        assert again.status_code == 202
        assert db.get_job(conn, job_id=again.json()["job_id"]).status == "pending"
        assert http.get("/jobs/00000000-0000-0000-0000-000000000000").status_code == 404


def test_example_fastapi_unknown_type_leaves_no_order(example: ModuleType, conn: psycopg.Connection) -> None:
    conn.execute(qualify("delete from pgqw.task_types where name = 'send_receipt'"))
    with TestClient(example.app) as http:
        r = http.post("/orders", json={"email": "bob@example.com", "total_minor": 99})
        assert r.status_code == 422 and r.json()["sqlstate"] == "QT422"
    assert conn.execute("select count(*) from shop_orders").fetchone() == (0,)  # rolled back with the job
