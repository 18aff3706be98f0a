"""bench.history runs end to end at a tiny size (1,000 attempts) and reports its figures.

Timings are printed and kept in docs/evidence/stats-at-10m.txt by the real run, never asserted.
"""
from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest

from bench.history import main


def test_history_tiny_run_reports_every_figure_and_drops_its_database(
        pg_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "stats.txt"
    assert main(["--dsn", pg_server, "--attempts", "1000", "--runs", "2", "--scrapes", "2", "--out", str(out)]) == 0
    text = out.read_text()
    assert text == capsys.readouterr().out
    assert re.search(r"job_attempts [\d,]+ rows over [\d,]+ jobs", text)
    for name in ("select queue_stats()", "claim 10 + success", "GET /metrics", "GET /api/stats", "GET /api/queues",
                 "GET /api/jobs?limit=50", "GET /api/jobs?status=dead&limit=50",
                 "GET /api/jobs?queue=reports&type=noop&limit=50"):
        line = next(x for x in text.splitlines() if x.startswith(name))
        assert re.search(r"median +[\d.]+ ms, p95 +[\d.]+ ms", line), line
    # Every answer of every route was a 200 (the codes are on each GET line; the plans below hold numbers
    # of their own, so a status is looked for only there).
    for line in (x for x in text.splitlines() if x.startswith("GET ")):
        codes = re.search(r"\(([^;()]*); [\d,]+ bytes\)$", line)
        assert codes is not None and codes.group(1) == "3× 200", line
    # The plans of what it ran, from auto_explain; the embedded server's build lacks the module, and
    # the output says so.
    with psycopg.connect(pg_server, autocommit=True) as conn:
        try:
            conn.execute("load 'auto_explain'")
            has_auto_explain = True
        except psycopg.errors.UndefinedFile:
            has_auto_explain = False
    expected = ("Query Text: select * from queue_stats()" if has_auto_explain
                else "(no plans: this server has no auto_explain module)")
    assert expected in text
    database = re.search(r"^database: (\S+)", text, re.M).group(1)
    with psycopg.connect(pg_server, autocommit=True) as conn:
        assert conn.execute("select count(*) from pg_database where datname = %s", [database]).fetchone()[0] == 0
