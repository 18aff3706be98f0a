"""Celery and Dramatiq on their brokers (bench/brokers.py): a tiny drain of each, where its broker
answers; a skip (with the reason) where it does not. Figures are not asserted, only that every job
ran once, was timed, and that no worker process outlives the drain."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import brokers, report
from bench.common import PROFILES, Results
from bench.run import parse_sections
from bench.sections import RUNNERS, SECTIONS

JOBS = 200


def _descendants_of_session(sid: int) -> list[int]:
    """Live processes (zombies aside) of the session the workers led (started with start_new_session)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if os.getsid(int(entry.name)) == sid and state != "Z":
                    out.append(int(entry.name))
            except (OSError, IndexError):
                pass
    return out


@pytest.mark.timeout(90)
@pytest.mark.parametrize("name", [s.name for s in brokers.SYSTEMS])
def test_brokers_tiny_drain_runs_every_job_once(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    system = brokers.BY_NAME[name]
    why = system.unavailable()
    if why:
        pytest.skip(f"{name}: {why}")
    started: list[int] = []
    real_popen = brokers.subprocess.Popen

    def popen(*args, **kwargs):
        process = real_popen(*args, **kwargs)
        started.append(process.pid)
        return process

    monkeypatch.setattr(brokers.subprocess, "Popen", popen)
    try:
        d = brokers.drain(system, JOBS, 1, tmp_path, timeout_s=60)
    finally:
        for pid in started:
            brokers.stop_workers_by_pid(pid)

    assert d.depth_before == JOBS and d.done == JOBS and d.executors == 1
    assert 0 < d.span_s <= d.wall_s and d.ramp_s == 0 and d.worker_cpu_s > 0 and d.enqueue_s > 0
    assert started and all(not _descendants_of_session(pid) for pid in started)
    assert system.depth() == 0
    assert "Redis" in system.durability() or "durable" in system.durability()
    system.flush()


def test_brokers_section_is_registered_and_left_out_of_the_smoke_profile() -> None:
    assert "brokers" in SECTIONS and RUNNERS["brokers"] is brokers.section_brokers
    assert "brokers" in parse_sections("brokers") and not PROFILES["tiny"].peers


def test_brokers_report_says_what_was_skipped_and_each_durability() -> None:
    r = Results(facts={"brokers": {
        "skipped": ["celery-rabbitmq: skipped, RabbitMQ does not answer on 127.0.0.1:5672"],
        "systems": {"celery-redis": {"version": "5.7.0", "workers": "`celery -A x worker`", "settings": "s",
                                     "durability": "Redis 7, appendonly no, save \"\": no persistence",
                                     "ours": "worker.c1.single.p4"}},
        "postgres": "PostgreSQL, synchronous_commit on, fsync on: every commit is flushed", "sizes": "20 jobs"}})
    r.add("raw.single.p4", "raw", "raw 1", "jobs/s", 2000, baseline="raw.single.p4")
    r.add("worker.c1.single.p4", "drain", "pgqw worker, concurrency 1, 4 proc", "jobs/s", 1500, baseline="raw.single.p4")
    r.add("broker.celery-redis.drain.p4", "brokers", "celery 5.7.0, redis, s, 4 proc", "jobs/s", 1000,
          baseline="raw.single.p4")
    r.profiles["broker.celery-redis.drain.p4"] = [{"db_span_s": 1.0, "poll_wall_s": 2.0, "ramp_s": 0.1,
                                                    "worker_cpu_ms_per_job": 0.5}]

    printed = "\n".join(report.table_lines(r))
    assert "celery-rabbitmq: skipped, RabbitMQ does not answer on 127.0.0.1:5672" in printed
    assert "celery-redis: Redis 7, appendonly no" in printed and "ours: PostgreSQL" in printed
    text = report.markdown(r, command="pgqw bench --only brokers", notes="", chart_path=None)
    assert "### Peers on brokers: Celery and Dramatiq" in text
    assert "| celery 5.7.0, redis, s, 4 proc | 1,000 | 0.500 | 2.00 | 0.10 | Redis 7, appendonly no" in text
    assert "| pgqw worker, concurrency 1, 4 proc (ours, same run) | 1,500 |" in text
    assert "- celery-rabbitmq: skipped, RabbitMQ does not answer" in text


def test_brokers_missing_broker_is_a_skip_not_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    system = brokers.System("celery-redis", "celery", "redis", lambda: "redis://127.0.0.1:1/0", "pgqw-bench-x",
                            "s", "worker.c1.single")
    assert system.unavailable() == "Redis does not answer on 127.0.0.1:1"
    gone = brokers.System("nope-redis", "no-such-dist-pgqw", "redis", lambda: "redis://127.0.0.1:1/0", "q", "s", "")
    assert "no-such-dist-pgqw" in (gone.unavailable() or "")
