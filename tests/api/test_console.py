"""The console's reads: GET /api/workers, GET /api/throughput, and the job search of GET /api/jobs
(id_prefix, type, queue with status). Bad input is a 400 in the error envelope, never a 500."""
from __future__ import annotations

import time
from typing import Any, Iterator

import psycopg
import pytest
from flask.testing import FlaskClient

from pgqw import db
from tests.helpers import enqueue


def test_workers_lists_each_worker_alive_or_gone_by_its_own_heartbeat(
    client: FlaskClient, conn: psycopg.Connection
) -> None:
    db.register_worker(conn, worker_id="w-live", task_types=["listing_flyer"], queues=["default", "emails"],
                       concurrency=4, hostname="box-1", pid=4242, ttl_ms=60_000)
    db.register_worker(conn, worker_id="w-stopped", task_types=["listing_flyer"], ttl_ms=60_000)
    db.stop_worker(conn, worker_id="w-stopped")
    db.register_worker(conn, worker_id="w-silent", task_types=["send_email"], ttl_ms=1)  # no heartbeat since
    time.sleep(0.01)
    r = client.get("/api/workers")
    assert r.status_code == 200
    found = r.get_json()["data"]
    assert [w["id"] for w in found][0] == "w-live"  # the live ones first
    by_id = {w["id"]: w for w in found}
    assert {k: by_id["w-live"][k] for k in ("hostname", "pid", "queues", "taskTypes", "concurrency", "alive",
                                            "stoppedAt")} == {
        "hostname": "box-1", "pid": 4242, "queues": ["default", "emails"], "taskTypes": ["listing_flyer"],
        "concurrency": 4, "alive": True, "stoppedAt": None}
    assert by_id["w-stopped"]["alive"] is False and by_id["w-stopped"]["stoppedAt"] is not None
    assert by_id["w-silent"]["alive"] is False and by_id["w-silent"]["stoppedAt"] is None
    assert by_id["w-silent"]["queues"] is None  # every queue
    # A heartbeat (register_worker again) brings a silent worker back.
    db.register_worker(conn, worker_id="w-silent", task_types=["send_email"], ttl_ms=60_000)
    assert {w["id"]: w["alive"] for w in client.get("/api/workers").get_json()["data"]}["w-silent"] is True


def test_workers_empty_is_an_empty_list(shared_client: FlaskClient, unchanged: None) -> None:
    r = shared_client.get("/api/workers")
    assert r.status_code == 200 and r.get_json() == {"data": []}


def _run(conn: psycopg.Connection, queue: str, *, succeed: bool) -> None:
    job = enqueue(conn, queue=queue)
    claimed = db.claim_job(conn, worker_id="w", queues=[queue])
    assert claimed is not None and claimed.id == job.id
    if succeed:
        db.mark_succeeded(conn, job_id=job.id, lease_token=claimed.lease_token)
    else:
        db.mark_failed(conn, job_id=job.id, lease_token=claimed.lease_token, error="boom", retryable=False)


def test_throughput_counts_finished_jobs_per_queue_in_the_last_hour(
    client: FlaskClient, conn: psycopg.Connection
) -> None:
    for _ in range(3):
        _run(conn, "emails", succeed=True)
    _run(conn, "emails", succeed=False)
    _run(conn, "reports", succeed=True)
    _run(conn, "old", succeed=True)
    conn.execute("update jobs set finished_at = now() - interval '110 minutes' where queue = 'old'")
    _run(conn, "retried", succeed=True)
    retried = enqueue(conn, queue="emails")
    claimed = db.claim_job(conn, worker_id="w", queues=["emails"])
    assert claimed is not None and claimed.id == retried.id
    db.mark_failed(conn, job_id=retried.id, lease_token=claimed.lease_token, error="again")  # waits: not counted
    conn.execute("update jobs set finished_at = now() - interval '30 hours' where queue = 'retried'")
    enqueue(conn, queue="emails")
    db.claim_job(conn, worker_id="w", queues=["emails"])  # running: not finished, not counted

    r = client.get("/api/throughput")
    assert r.status_code == 200
    data = r.get_json()["data"]
    assert (data["minutes"], data["buckets"], data["bucketSeconds"]) == (60, 60, 60)
    assert [q["name"] for q in data["queues"]] == ["emails", "reports"]  # "old" finished 110 min ago
    emails = data["queues"][0]
    assert len(emails["succeeded"]) == len(emails["failed"]) == 60
    assert (emails["totalSucceeded"], emails["totalFailed"]) == (3, 1)
    assert sum(emails["succeeded"][-2:]) == 3  # just now: the newest buckets

    day = client.get("/api/throughput?minutes=1440").get_json()["data"]
    assert (day["buckets"], day["bucketSeconds"]) == (60, 1440)
    old = {q["name"]: q for q in day["queues"]}["old"]
    assert old["totalSucceeded"] == 1 and old["succeeded"][-5] == 1  # 1330 of 1440 min: bucket 55 of 60

    short = client.get("/api/throughput?minutes=5").get_json()["data"]
    assert (short["buckets"], short["bucketSeconds"]) == (5, 60)


@pytest.mark.parametrize("query", ["minutes=0", "minutes=1441", "minutes=abc", "minutes=-5", "minutes=%D9%A1",
                                   "minutes=", "minutes=99999999999", "window=60"])
def test_throughput_bad_query_is_a_400(shared_client: FlaskClient, unchanged: None, query: str) -> None:
    r = shared_client.get(f"/api/throughput?{query}")
    assert r.status_code == 400
    error = r.get_json()["error"]
    assert error["code"] == "invalid_query" and error["details"][0]["field"] in ("minutes", "window")


def test_jobs_search_by_id_prefix_type_queue_and_status(client: FlaskClient, conn: psycopg.Connection) -> None:
    db.register_task_types(conn, types=[{"name": "send_email", "payload_schema": {}}])
    a = enqueue(conn, queue="emails", type="send_email", payload={"to": "a@example.com"})
    b = enqueue(conn, queue="emails")
    c = enqueue(conn, queue="reports")
    claimed = db.claim_job(conn, worker_id="w", queues=["reports"])
    assert claimed is not None and claimed.id == c.id

    def ids(query: str) -> list[str]:
        r = client.get(f"/api/jobs?{query}")
        assert r.status_code == 200, r.get_json()
        return [j["id"] for j in r.get_json()["data"]["jobs"]]

    assert ids(f"id_prefix={str(a.id)[:8]}") == [str(a.id)]
    assert ids(f"id_prefix={str(a.id)[:13].upper()}") == [str(a.id)]  # dashes and capitals are fine
    assert ids(f"id_prefix={a.id}") == [str(a.id)]
    assert ids("queue=emails") == [str(b.id), str(a.id)]  # newest first
    assert ids("queue=emails&type=listing_flyer") == [str(b.id)]
    assert ids("type=send_email") == [str(a.id)]
    assert ids("status=processing") == [str(c.id)]
    assert ids("status=processing&queue=reports") == [str(c.id)]
    assert ids("status=pending&queue=reports") == []
    assert ids("queue=nowhere") == []
    # The same keyset pages with filters: one job a page, the cursor handed on with the filters.
    r = client.get("/api/jobs?queue=emails&limit=1").get_json()["data"]
    assert [j["id"] for j in r["jobs"]] == [str(b.id)] and r["nextCursor"]
    r = client.get(f"/api/jobs?queue=emails&limit=1&cursor={r['nextCursor']}").get_json()["data"]
    assert [j["id"] for j in r["jobs"]] == [str(a.id)] and r["nextCursor"] is None


@pytest.mark.parametrize("query, field", [
    ("id_prefix=xyz", "id_prefix"),
    ("id_prefix=12g4", "id_prefix"),
    ("id_prefix=" + "a" * 33, "id_prefix"),
    ("id_prefix=" + "-" * 37, "id_prefix"),
    ("id_prefix=%00", "id_prefix"),
    ("id_prefix=%27%20or%201=1", "id_prefix"),
    ("status=exploded", "status"),
    ("queue=" + "q" * 101, "queue"),
    ("type=a%00b", "type"),
    ("owner=me", "owner"),
])
def test_jobs_search_bad_query_is_a_400(shared_client: FlaskClient, unchanged: None, query: str, field: str) -> None:
    r = shared_client.get(f"/api/jobs?{query}")
    assert r.status_code == 400, r.get_data(as_text=True)
    error = r.get_json()["error"]
    assert error["code"] == "invalid_query"
    assert [d["field"] for d in error["details"]] == [field]


# The throughput read at size: 50k finished jobs over a week, analyzed. The plan reads the window from
# jobs_type_finished_idx, type by type; no sequential scan.

@pytest.fixture
def many_attempts(conn: psycopg.Connection) -> Iterator[psycopg.Connection]:
    conn.execute(
        """
        with j as (
            insert into jobs (type, payload, status, attempts, max_attempts, run_at, created_at, started_at,
                              finished_at, idempotency_key, queue)
            select 'listing_flyer', '{}'::jsonb, 'succeeded', 1, 5, t, t, t, t + interval '1 second',
                   'plan-' || n, (array['default', 'emails', 'reports'])[1 + mod(n, 3)]
              from (select n, now() - n * interval '13 seconds' as t
                      from generate_series(1, %(n)s::integer) as n) s
            returning id, started_at, finished_at
        )
        insert into job_attempts (job_id, attempt, worker_id, started_at, finished_at, outcome)
        select id, 1, 'w1', started_at, finished_at, 'succeeded' from j
        """,
        {"n": 50_000},
    )
    conn.execute("analyze jobs")
    conn.execute("analyze job_attempts")
    yield conn


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


def test_throughput_reads_the_last_hour_by_index_not_the_history(many_attempts: psycopg.Connection) -> None:
    plan = db.explain_throughput(many_attempts, minutes=60)
    scans = [(n["Node Type"], n.get("Relation Name"), n.get("Index Name")) for n in _nodes(plan)]
    assert not any(t == "Seq Scan" for t, _, _ in scans), scans
    assert any(i == "jobs_type_finished_idx" for _, _, i in scans), scans
    found = db.throughput(many_attempts, minutes=60)
    assert 270 <= sum(c.succeeded for c in found.counts) <= 280  # 3600 s / 13 s
