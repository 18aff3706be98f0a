"""pgqw_queue_paused{queue}: 1 while a queue is paused, 0 otherwise, for every known queue."""
from __future__ import annotations

from typing import Iterator

import psycopg
import pytest
from flask import Flask
from prometheus_client.parser import text_string_to_metric_families

from pgqw import db
from pgqw.app import close_pool, create_app
from tests.helpers import enqueue


@pytest.fixture
def app(db_url: str) -> Iterator[Flask]:
    application = create_app({"DATABASE_URL": db_url, "TESTING": True, "METRICS_CACHE_MS": 0})
    yield application
    close_pool(application)


def _paused(app: Flask) -> dict[str, float]:
    text = app.test_client().get("/metrics").get_data(as_text=True)
    return {s.labels["queue"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "pgqw_queue_paused"}


def test_metrics_queue_paused_follows_pause_and_resume(app: Flask, conn: psycopg.Connection) -> None:
    enqueue(conn, queue="emails")
    assert _paused(app) == {"default": 0, "emails": 0}
    db.pause_queue(conn, queue="emails")
    db.pause_queue(conn, queue="reports", create=True)  # no job yet: shows all the same
    assert _paused(app) == {"default": 0, "emails": 1, "reports": 1}
    db.resume_queue(conn, queue="emails")
    assert _paused(app) == {"default": 0, "emails": 0, "reports": 1}


def test_metrics_every_status_series_is_present_for_a_paused_queue(app: Flask, conn: psycopg.Connection) -> None:
    db.pause_queue(conn, queue="reports", create=True)
    text = app.test_client().get("/metrics").get_data(as_text=True)
    statuses = {s.labels["status"] for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == "pgqw_jobs" and s.labels["queue"] == "reports"}
    assert statuses == set(db.STATUSES)
