"""The benchmark suite runs end to end in its tiny profile and produces well-formed results.

Nothing here looks at how fast anything was: timings on a shared machine are measured and
reported (docs/benchmarks.md), never asserted.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest

from bench import report
from bench.run import BenchError, cmd_bench, parse_sections, run
from bench.sections import SECTIONS


def _args(pg_server: str, tmp_path: Path, **extra) -> argparse.Namespace:
    base = dict(profile="tiny", quick=False, only=None, dsn=pg_server, reps=None, label="smoke",
                out=str(tmp_path), write_docs=False, chart=None, silent=True, command_line="smoke")
    return argparse.Namespace(**(base | extra))


def test_bench_tiny_run_records_every_section_well_formed(pg_server: str, tmp_path: Path) -> None:
    results = run(_args(pg_server, tmp_path))

    assert results.errors == []
    assert {row.section for row in results.rows.values()} == {
        "raw", "enqueue", "drain", "latency", "delayed", "depth", "bloat", "empty"}
    for row in results.rows.values():
        assert row.values, row.key
        assert all(math.isfinite(v) and v >= 0 for v in row.values), row
        assert row.min <= row.median <= row.max
        if row.baseline is not None:
            assert row.baseline in results.rows, f"{row.key} is compared with a row that was not measured"
            assert results.ratio(row.key) is not None
    for key in ("raw.single.p1", "raw.batch.p2", "fn.enqueue_job", "fn.enqueue_jobs", "api.enqueue",
                "worker.single.p2", "worker.batch.p2", "worker.latency.listen.p1.p50",
                "worker.latency.poll.p1.p99", "worker.delayed.listen.p99", "depth.small", "depth.large", "bloat.dead_per_job",
                "empty.after_drain.ms", "raw.empty.after_vacuum.blocks", "worker.c10.batch.p2", "worker.c1.single.p2"):
        assert key in results.rows, key
    # The tiny profile leaves out the idle pool's windows (each waits out the idle statistics timer).
    assert not {"idle.listen.claims_per_s", "idle.poll.claims_per_s"} & set(results.rows)
    assert {"worker.single.p1", "worker.batch.p2"} <= set(results.profiles)
    assert results.facts["commit"] and results.facts["server"]["settings"]["synchronous_commit"]

    verdicts = report.verdicts(results)
    # The tiny profile runs no peers, no brokers and no idle window: the targets against the peers and the
    # brokers and the idle pool's say "not measured", every other is judged.
    unmeasured = [v for v in verdicts if any(name in v.target for name in (
        "pgqueuer", "procrastinate", "Celery", "the peers", "Idle pool"))]
    assert len(verdicts) == 29 and len(unmeasured) == 9
    assert all(v.met is None and v.measured == "not measured" for v in unmeasured)
    assert all(v.met is not None for v in verdicts if v not in unmeasured)
    assert "Targets:" in "\n".join(report.table_lines(results))
    text = report.markdown(results, command="pgqw bench", notes="hand-written notes", chart_path="chart.png")
    assert text.startswith("# Benchmarks")
    assert f"{report.NOTES_START}\nhand-written notes\n{report.NOTES_END}" in text
    chart = tmp_path / "drain.png"
    assert report.chart(results, chart)
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_command_prints_table_and_writes_evidence(pg_server: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert cmd_bench(_args(pg_server, tmp_path, only="bloat")) == 0

    printed = capsys.readouterr().out
    assert "[Raw ceiling]" in printed and "[Bloat]" in printed and "Targets:" in printed
    evidence = (tmp_path / "bench-smoke.txt").read_text()
    data = json.loads(evidence.split("results (JSON):\n", 1)[1])
    assert {"raw.single.p1", "bloat.dead_per_job"} <= {r["key"] for r in data["rows"]}
    assert data["errors"] == []


def test_bench_sections_parse_and_unknown_is_refused() -> None:
    assert parse_sections("drain") == ["raw", "drain"]  # the ceiling is always measured
    assert parse_sections(None) == list(SECTIONS)
    with pytest.raises(BenchError):
        parse_sections("drain,nope")
