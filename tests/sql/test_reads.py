"""The read functions behind the API and the console (list_queues, list_worker_status, list_task_types,
count_jobs_by_status, get_job_result), called directly as a DBA would from psql."""
from __future__ import annotations

import psycopg

from pgqw import db
from tests.helpers import enqueue, one, rows


def test_list_queues_gives_each_known_queue_with_its_numbers(conn: psycopg.Connection) -> None:
    enqueue(conn, queue="emails")
    enqueue(conn, queue="emails", run_at=None, delay=None)
    db.claim_job(conn, worker_id="w1", queues=["emails"])
    db.pause_queue(conn, queue="idle", create=True)
    found = {r["name"]: r for r in rows(conn, "select * from list_queues()")}
    assert found["emails"]["depth"] == 1 and found["emails"]["running"] == 1
    assert found["emails"]["paused"] is False and found["emails"]["oldest_ready_age_seconds"] >= 0
    assert found["idle"]["paused"] is True and found["idle"]["depth"] == 0 and found["idle"]["running"] == 0
    assert list(found) == sorted(found)


def test_list_worker_status_puts_the_live_first_and_honours_the_limit(conn: psycopg.Connection) -> None:
    db.register_worker(conn, worker_id="w-live", task_types=["noop"])
    db.register_worker(conn, worker_id="w-stopped", task_types=["noop"])
    db.stop_worker(conn, worker_id="w-stopped")
    found = rows(conn, "select id, alive from list_worker_status() where id like 'w-%'")
    assert [(r["id"], r["alive"]) for r in found] == [("w-live", True), ("w-stopped", False)]
    assert one(conn, "select count(*) as n from list_worker_status(1)")["n"] == 1


def test_list_task_types_gives_the_effective_settings(conn: psycopg.Connection) -> None:
    db.register_task_types(conn, types=[{"name": "reads_t", "payload_schema": {}, "description": "d",
                                         "queue": "q-code", "max_attempts": 4}])
    conn.execute("update task_types set queue = 'q-dba' where name = 'reads_t'")
    row = one(conn, "select * from list_task_types('reads_t')")
    assert (row["queue"], row["max_attempts"], row["description"]) == ("q-dba", 4, "d")
    every = [r["name"] for r in rows(conn, "select name from list_task_types()")]
    assert "reads_t" in every and every == sorted(every)
    assert rows(conn, "select * from list_task_types('no-such-type')") == []


def test_count_jobs_by_status_gives_every_status_in_order(conn: psycopg.Connection) -> None:
    enqueue(conn)
    found = rows(conn, "select status, jobs from count_jobs_by_status()")
    assert [r["status"] for r in found] == list(db.STATUSES)
    assert {r["status"]: r["jobs"] for r in found}["pending"] >= 1
    assert db.count_by_status(conn) == {r["status"]: round(r["jobs"]) for r in found}


def test_get_job_result_tells_no_result_from_no_job(conn: psycopg.Connection) -> None:
    job = enqueue(conn)
    assert one(conn, "select * from get_job_result(%s)", [job.id]) == {
        "status": "pending", "content_type": None, "value": None, "data": None}
    assert rows(conn, "select * from get_job_result(gen_random_uuid())") == []


def test_queue_throughput_counts_the_jobs_that_finished_in_the_window(conn: psycopg.Connection) -> None:
    enqueue(conn, queue="tp")
    claimed = db.claim_job(conn, worker_id="w1", queues=["tp"])
    assert claimed is not None
    db.mark_succeeded(conn, job_id=claimed.id, lease_token=claimed.lease_token)
    found = rows(conn, "select * from queue_throughput(now() - interval '1 hour', now() + interval '1 second', 4)"
                       " where queue = 'tp'")
    assert found == [{"queue": "tp", "bucket": 3, "succeeded": 1, "failed": 0}]
    assert rows(conn, "select * from queue_throughput('2000-01-01', '2000-01-02', 4)") == []
