"""GET /metrics: Prometheus text built from queue_stats(), the same numbers psql sees; kept per API process
for METRICS_CACHE_MS, one queue_stats() at a time; behind METRICS_TOKEN when it is set."""
from __future__ import annotations

import threading
from typing import Iterator

import psycopg
import pytest
from flask import Flask
from prometheus_client.parser import text_string_to_metric_families

from pgqw import config, db
from pgqw.app import close_pool, create_app
from pgqw.app import metrics as metrics_module
from tests.helpers import enqueue, job_row


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


def test_metrics_count_expired_jobs_and_timed_out_and_snoozed_attempts(app: Flask, conn: psycopg.Connection) -> None:
    late = enqueue(conn, expire_after_ms=1)
    timed = enqueue(conn, queue="slow", timeout_ms=1000, max_attempts=2)
    napping = enqueue(conn, queue="later")
    claimed = db.claim_job(conn, worker_id="w1", queues=["later"])
    assert claimed is not None and claimed.id == napping.id
    db.snooze_job(conn, job_id=napping.id, lease_token=claimed.lease_token, delay_ms=60_000)
    assert db.claim_job(conn, worker_id="w1", queues=["slow"]) is not None
    # As of a minute on: the first job expired unstarted, the second's attempt timed out.
    conn.execute("select * from sweep_stuck_at(now() + interval '1 minute')")
    assert [job_row(conn, j.id)["status"] for j in (late, timed)] == ["expired", "failed"]
    samples = _samples(app.test_client().get("/metrics").get_data(as_text=True))
    assert samples[("pgqw_jobs", (("queue", "default"), ("status", "expired")))] == 1
    assert samples[("pgqw_job_attempts", (("outcome", "timed_out"),))] == 1
    assert samples[("pgqw_job_attempts", (("outcome", "snoozed"),))] == 1
    assert samples[("pgqw_job_attempts", (("outcome", "cancelled"),))] == 0


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


def test_metrics_history_above_the_exact_limit_is_an_estimate_and_says_so(app: Flask, conn: psycopg.Connection) -> None:
    # Below 10,000 rows every figure is exact and pgqw_stats_estimated is 0 for both tables.
    # (queue_stats() itself: the app would serve the second scrape below from its cache.)
    assert {(s.label, s.value) for s in db.queue_stats(conn) if s.metric == "stats_estimated"} == {
        ("jobs", 0), ("job_attempts", 0)}
    # 12,000 succeeded jobs in one queue, one attempt each, and the statistics an ANALYZE gives.
    conn.execute(
        "insert into jobs (type, status, attempts, max_attempts, started_at, finished_at, idempotency_key, queue)"
        " select 'listing_flyer', 'succeeded', 1, 5, now(), now(), 'big-' || i, 'bulk'"
        "   from generate_series(1, 12000) i")
    conn.execute(
        "insert into job_attempts (job_id, attempt, worker_id, started_at, finished_at, outcome)"
        " select id, 1, 'w1', started_at, finished_at, 'succeeded' from jobs where queue = 'bulk'")
    conn.execute("analyze jobs")
    conn.execute("analyze job_attempts")
    enqueue(conn, queue="bulk")
    samples = _samples(app.test_client().get("/metrics").get_data(as_text=True))
    assert samples[("pgqw_stats_estimated", (("table", "jobs"),))] == 1
    assert samples[("pgqw_stats_estimated", (("table", "job_attempts"),))] == 1
    # The estimates are near the truth (the planner's, from the statistics); live figures stay exact.
    assert 12000 * 0.8 <= samples[("pgqw_jobs", (("queue", "bulk"), ("status", "succeeded")))] <= 12000 * 1.2
    assert 12000 * 0.8 <= samples[("pgqw_job_attempts", (("outcome", "succeeded"),))] <= 12000 * 1.2
    assert samples[("pgqw_jobs", (("queue", "bulk"), ("status", "pending")))] == 1
    assert samples[("pgqw_jobs", (("queue", "bulk"), ("status", "dead")))] == 0
    assert samples[("pgqw_job_attempts", (("outcome", "running"),))] == 0


# ---- the cache: one queue_stats() per window, however many scrape ----

class Clock:
    """A clock the test moves (seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def cached_app(db_url: str) -> Iterator[Flask]:
    application = create_app({"DATABASE_URL": db_url, "TESTING": True, "METRICS_CACHE_MS": 5000})
    yield application
    close_pool(application)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts db.queue_stats calls (the wrapper calls the real one)."""
    made: list[int] = []
    real = db.queue_stats

    def counted(conn: psycopg.Connection) -> list[db.Stat]:
        made.append(1)
        return real(conn)

    monkeypatch.setattr(db, "queue_stats", counted)
    return made


def _pending(app: Flask) -> float:
    response = app.test_client().get("/metrics")
    assert response.status_code == 200
    return _samples(response.get_data(as_text=True))[("pgqw_jobs", (("queue", "default"), ("status", "pending")))]


def test_metrics_concurrent_scrapes_share_one_queue_stats_call(cached_app: Flask, conn: psycopg.Connection,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    enqueue(conn)
    cache = metrics_module.stats_cache(cached_app)
    scrapers = 8
    made: list[int] = []
    real = db.queue_stats

    def held(c: psycopg.Connection) -> list[db.Stat]:
        # The first scrape's query does not end before every other scrape waits for it.
        made.append(1)
        with cache.changed:
            assert cache.changed.wait_for(lambda: cache.waiting == scrapers - 1, timeout=30), cache.waiting
        return real(c)

    monkeypatch.setattr(db, "queue_stats", held)
    answers: list[float] = []
    threads = [threading.Thread(target=lambda: answers.append(_pending(cached_app))) for _ in range(scrapers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert answers == [1] * scrapers
    assert len(made) == 1


def test_metrics_are_cached_within_the_window_and_refreshed_after(cached_app: Flask, conn: psycopg.Connection,
                                                                  calls: list[int]) -> None:
    clock = Clock()
    metrics_module.stats_cache(cached_app).clock = clock
    enqueue(conn)
    assert _pending(cached_app) == 1
    enqueue(conn)
    clock.now += 4.999
    assert _pending(cached_app) == 1  # still the kept answer
    assert len(calls) == 1
    clock.now += 0.001
    assert _pending(cached_app) == 2  # 5 s old: asked again
    assert _pending(cached_app) == 2
    assert len(calls) == 2


def test_metrics_a_failed_refresh_is_not_kept(cached_app: Flask, conn: psycopg.Connection,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    enqueue(conn)
    real = db.queue_stats

    def broken(c: psycopg.Connection) -> list[db.Stat]:
        raise psycopg.errors.QueryCanceled("canceling statement due to statement timeout")

    monkeypatch.setattr(db, "queue_stats", broken)
    response = cached_app.test_client().get("/metrics")
    assert response.status_code >= 500 and response.get_json()["error"]["code"]
    monkeypatch.setattr(db, "queue_stats", real)
    assert _pending(cached_app) == 1


def test_metrics_cache_off_asks_every_time(db_url: str, conn: psycopg.Connection, calls: list[int]) -> None:
    application = create_app({"DATABASE_URL": db_url, "TESTING": True, "METRICS_CACHE_MS": 0})
    try:
        assert _pending(application) == 0
        enqueue(conn)
        assert _pending(application) == 1
        assert len(calls) == 2
    finally:
        close_pool(application)


def test_metrics_cache_defaults_to_5_seconds_from_the_environment(db_url: str, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    monkeypatch.delenv("METRICS_CACHE_MS", raising=False)
    assert config.load().metrics_cache_ms == 5000
    monkeypatch.setenv("METRICS_CACHE_MS", "250")
    application = create_app({"DATABASE_URL": db_url, "TESTING": True})
    try:
        assert metrics_module.stats_cache(application).ttl == 0.25
    finally:
        close_pool(application)
    monkeypatch.setenv("METRICS_CACHE_MS", "-1")
    with pytest.raises(config.ConfigError, match="METRICS_CACHE_MS"):
        config.load()


# ---- METRICS_TOKEN ----

TOKEN = "metrics-token-0123456789abcdef"


def test_metrics_with_metrics_token_need_it(db_url: str) -> None:
    application = create_app({"DATABASE_URL": db_url, "TESTING": True, "METRICS_TOKEN": TOKEN})
    try:
        client = application.test_client()
        for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": TOKEN}):
            response = client.get("/metrics", headers=headers)
            assert response.status_code == 401, headers
            assert response.mimetype == "application/json"
            assert response.get_json()["error"]["code"] in ("unauthorized", "invalid_token")
            assert response.headers["WWW-Authenticate"].startswith('Bearer realm="pgqw"')
        response = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert response.status_code == 200
        assert "pgqw_jobs" in response.get_data(as_text=True)
    finally:
        close_pool(application)


def test_metrics_without_metrics_token_are_open(app: Flask) -> None:
    assert app.test_client().get("/metrics").status_code == 200
