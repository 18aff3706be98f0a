"""GET /metrics: Prometheus text built from queue_stats(), the same numbers psql sees."""
from __future__ import annotations

from typing import Iterator

import psycopg
import pytest
from flask import Flask
from prometheus_client.parser import text_string_to_metric_families

from pgqw.app import close_pool, create_app
from pgqw import db
from tests.helpers import enqueue


@pytest.fixture
def app(db_url: str) -> Iterator[Flask]:
    application = create_app({"DATABASE_URL": db_url, "TESTING": True})
    yield application
    close_pool(application)


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_metrics_report_queue_stats_in_prometheus_format(app: Flask, conn: psycopg.Connection) -> None:
    done = enqueue(conn)
    enqueue(conn, queue="emails")
    claimed = db.claim_job(conn, worker_id="w1", queues=["default"])
    assert claimed is not None and claimed.id == done.id
    db.mark_succeeded(conn, job_id=done.id, lease_token=claimed.lease_token)
    response = app.test_client().get("/metrics")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    samples = _samples(response.get_data(as_text=True))
    assert samples[("pgqw_jobs", (("queue", "default"), ("status", "succeeded")))] == 1
    assert samples[("pgqw_jobs", (("queue", "emails"), ("status", "pending")))] == 1
    assert samples[("pgqw_jobs", (("queue", "emails"), ("status", "dead")))] == 0
    assert samples[("pgqw_job_attempts", (("outcome", "succeeded"),))] == 1
    assert samples[("pgqw_worker_events_total", (("event", "claimed"),))] == 1
    assert samples[("pgqw_worker_events_total", (("event", "swept"),))] == 0
    assert samples[("pgqw_oldest_ready_job_age_seconds", (("queue", "emails"),))] >= 0


def test_metrics_match_queue_stats_exactly(app: Flask, conn: psycopg.Connection) -> None:
    for _ in range(3):
        enqueue(conn)
    samples = _samples(app.test_client().get("/metrics").get_data(as_text=True))
    for stat in db.queue_stats(conn):
        if stat.metric == "jobs":
            assert samples[("pgqw_jobs", (("queue", stat.queue), ("status", stat.label)))] == stat.value
        elif stat.metric == "waiting_without_worker":
            assert samples[("pgqw_jobs_waiting_without_worker", (("queue", stat.queue), ("type", stat.label)))] \
                == stat.value
        elif stat.metric == "workers_alive":
            assert samples[("pgqw_workers_alive", ())] == stat.value


def test_metrics_report_workers_alive_and_jobs_no_live_worker_can_take(app: Flask, conn: psycopg.Connection) -> None:
    # w1 takes listing_flyer jobs of the default queue; w2 took noop jobs too but has stopped.
    db.register_worker(conn, worker_id="w1", task_types=["listing_flyer"], queues=["default"])
    db.register_worker(conn, worker_id="w2", task_types=["listing_flyer", "noop"])
    db.stop_worker(conn, worker_id="w2")
    enqueue(conn)  # listing_flyer in default: w1 can take it
    enqueue(conn, queue="emails")  # a queue w1 does not take
    enqueue(conn, queue="emails")
    enqueue(conn, type="noop", payload={})  # a type no live worker registered
    samples = _samples(app.test_client().get("/metrics").get_data(as_text=True))
    assert samples[("pgqw_workers_alive", ())] == 1
    stranded = {labels: value for (name, labels), value in samples.items()
                if name == "pgqw_jobs_waiting_without_worker"}
    assert stranded == {(("queue", "emails"), ("type", "listing_flyer")): 2,
                        (("queue", "default"), ("type", "noop")): 1}


def test_metrics_with_no_worker_and_no_job(app: Flask) -> None:
    samples = _samples(app.test_client().get("/metrics").get_data(as_text=True))
    assert samples[("pgqw_workers_alive", ())] == 0
    assert not [name for name, _ in samples if name == "pgqw_jobs_waiting_without_worker"]
