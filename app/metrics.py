"""GET /metrics in the Prometheus text format.

Every number comes from the stored function queue_stats(), so every API instance reports the same
truth and psql gives the same answers (`select * from queue_stats()`).

queue_stats() reads the waiting and running jobs, not the history: beyond 10,000 rows a history
figure is the planner's estimate (pgqw_stats_estimated says which table's are), and a call costs
a median 15 ms with ten million attempts in the history (docs/evidence/stats-at-10m.txt). Each API
process still keeps its answer for METRICS_CACHE_MS (default 5000; 0: every scrape runs it) and runs
it one at a time: scrapes that arrive while it runs wait for that run and share its rows, so many
scrapers cost one query per window, not one each. With METRICS_TOKEN set, a scrape needs
`Authorization: Bearer <token>` (401 in the JSON envelope otherwise).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable

from flask import Blueprint, Flask, Response, current_app
from flask.blueprints import BlueprintSetupState
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from pgqw import config, db

from . import POOL_KEY
from .auth import REALM, AuthError, Tokens, bearer

bp = Blueprint("metrics", __name__)

CACHE_KEY = "pgqw.metrics_cache"
TOKENS_KEY = "pgqw.metrics_tokens"


class QueueStatsCollector:
    """Turns queue_stats() rows into metric families."""

    def __init__(self, stats: list[db.Stat]) -> None:
        self.stats = stats

    def collect(self) -> Iterable[Metric]:
        jobs = GaugeMetricFamily("pgqw_jobs", "Jobs by queue and status.", labels=["queue", "status"])
        age = GaugeMetricFamily("pgqw_oldest_ready_job_age_seconds",
                                "Seconds the oldest job ready to run has been waiting, by queue (0: none).",
                                labels=["queue"])
        attempts = GaugeMetricFamily("pgqw_job_attempts",
                                     "Recorded attempts by outcome ('running' while unfinished).",
                                     labels=["outcome"])
        events = CounterMetricFamily("pgqw_worker_events",
                                     "What workers did, from job_attempts: claimed, succeeded, failed, "
                                     "swept (lease expired) and handed_back.", labels=["event"])
        stranded = GaugeMetricFamily("pgqw_jobs_waiting_without_worker",
                                     "Ready jobs no live worker can take (no live worker registered their type "
                                     "for their queue), by queue and type.", labels=["queue", "type"])
        alive = GaugeMetricFamily("pgqw_workers_alive", "Workers whose registration has not expired.")
        paused = GaugeMetricFamily("pgqw_queue_paused", "1 while the queue is paused (claims skip it), else 0.",
                                   labels=["queue"])
        estimated = GaugeMetricFamily("pgqw_stats_estimated",
                                      "1 when some history figures from this table are the planner's estimates "
                                      "(a finished status of a queue, or the attempts, above 10,000 rows), else 0.",
                                      labels=["table"])
        for s in self.stats:
            if s.metric == "jobs":
                jobs.add_metric([s.queue or "", s.label or ""], s.value)
            elif s.metric == "oldest_ready_age_seconds":
                age.add_metric([s.queue or ""], s.value)
            elif s.metric == "attempts":
                attempts.add_metric([s.label or ""], s.value)
            elif s.metric == "worker_events":
                events.add_metric([s.label or ""], s.value)
            elif s.metric == "waiting_without_worker":
                stranded.add_metric([s.queue or "", s.label or ""], s.value)
            elif s.metric == "workers_alive":
                alive.add_metric([], s.value)
            elif s.metric == "queue_paused":
                paused.add_metric([s.queue or ""], s.value)
            elif s.metric == "stats_estimated":
                estimated.add_metric([s.label or ""], s.value)
        return [jobs, age, attempts, events, stranded, alive, paused, estimated]


class StatsCache:
    """queue_stats() rows kept for ttl_ms, refreshed by one caller at a time.

    get() returns the kept rows while they are younger than ttl_ms (by `clock`, seconds, monotonic).
    Otherwise the first caller runs `fetch` outside the lock; callers that come meanwhile wait on
    `changed` and take its rows. When the fetch fails the error goes to its caller only, and one of
    the waiters tries again. ttl_ms 0: every call fetches, nothing is kept or shared.
    """

    def __init__(self, ttl_ms: int, fetch: Callable[[], list[db.Stat]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl_ms / 1000
        self.fetch = fetch
        self.clock = clock
        self.changed = threading.Condition()  # notified when a caller starts waiting and when a fetch ends
        self.waiting = 0  # callers waiting for a fetch in flight
        self._rows: list[db.Stat] | None = None
        self._at = 0.0
        self._fetching = False

    def _fresh(self) -> bool:
        return self._rows is not None and self.clock() - self._at < self.ttl

    def get(self) -> list[db.Stat]:
        if self.ttl <= 0:
            return self.fetch()
        with self.changed:
            while True:
                if self._fresh():
                    assert self._rows is not None
                    return self._rows
                if not self._fetching:
                    self._fetching = True  # this caller fetches
                    break
                self.waiting += 1
                self.changed.notify_all()
                try:
                    self.changed.wait()
                finally:
                    self.waiting -= 1
        rows: list[db.Stat] | None = None
        try:
            rows = self.fetch()
            return rows
        finally:
            with self.changed:
                self._fetching = False
                if rows is not None:
                    self._rows, self._at = rows, self.clock()
                self.changed.notify_all()


def _fetch_with(app: Any) -> Callable[[], list[db.Stat]]:  # the Flask app a blueprint is set up on
    def fetch() -> list[db.Stat]:
        with app.extensions[POOL_KEY].connection() as conn:
            return db.queue_stats(conn)
    return fetch


@bp.record_once
def _setup(state: BlueprintSetupState) -> None:
    """Reads METRICS_CACHE_MS and METRICS_TOKEN: the app's config when it has them (tests), else the settings."""
    app = state.app
    settings = config.load()
    ttl_ms = int(app.config.get("METRICS_CACHE_MS", settings.metrics_cache_ms))
    if ttl_ms < 0:
        raise config.ConfigError(f"METRICS_CACHE_MS must be at least 0, got {ttl_ms}")
    raw = app.config.get("METRICS_TOKEN", settings.metrics_tokens)
    tokens = config.tokens("METRICS_TOKEN", raw) if isinstance(raw, str) else tuple(raw)
    app.extensions[CACHE_KEY] = StatsCache(ttl_ms, _fetch_with(app))
    app.extensions[TOKENS_KEY] = Tokens.of(tokens, ())


def stats_cache(app: Flask) -> StatsCache:
    """The app's cache of queue_stats() rows (tests drive its clock)."""
    return app.extensions[CACHE_KEY]


def _check_token() -> None:
    tokens: Tokens = current_app.extensions[TOKENS_KEY]
    if tokens.enabled and tokens.scope(bearer()) is None:
        raise AuthError(401, "invalid_token", "the bearer token is not valid for /metrics (METRICS_TOKEN)",
                        f'{REALM}, error="invalid_token"')


@bp.get("/metrics")
def metrics() -> Response:
    _check_token()
    stats = stats_cache(current_app).get()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueStatsCollector(stats))  # type: ignore[arg-type,unused-ignore]  # a Collector by duck typing
    return Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST.split(";")[0],
                    headers={"Content-Type": CONTENT_TYPE_LATEST})
