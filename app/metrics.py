"""GET /metrics in the Prometheus text format.

Every number comes from one call of the stored function queue_stats(), at scrape time, so every
API instance reports the same truth and psql gives the same answers (`select * from queue_stats()`).
"""
from __future__ import annotations

from typing import Iterable

from flask import Blueprint, Response, current_app
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from pgqw import db

from . import POOL_KEY

bp = Blueprint("metrics", __name__)


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
        return [jobs, age, attempts, events, stranded, alive]


@bp.get("/metrics")
def metrics() -> Response:
    with current_app.extensions[POOL_KEY].connection() as conn:
        stats = db.queue_stats(conn)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueStatsCollector(stats))  # type: ignore[arg-type]
    return Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST.split(";")[0],
                    headers={"Content-Type": CONTENT_TYPE_LATEST})
