"""The A/B tools of the benchmark (bench.functions_ab, bench.sql_cost) run end to end against a real
server and print their figures. Nothing here looks at how fast anything was."""
from __future__ import annotations

import re

import pytest

from bench import functions_ab, sql_cost


def test_functions_ab_drains_the_functions_and_the_raw_ceiling(pg_server: str) -> None:
    line = functions_ab.measure(pg_server, jobs=200, batch=1, procs=2)
    assert re.match(r"1 per claim, 2 proc: functions [\d,]+ jobs/s .*, raw [\d,]+ jobs/s .*, ratio \d+\.\d\d$", line), line


def test_sql_cost_measures_each_step_with_the_cpu_meter(pg_server: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert sql_cost.main(["--dsn", pg_server, "--jobs", "200", "--rounds", "1", "--warmup", "5",
                          "--variant", "base", "--variant", "no_attempts_fkey"]) == 0
    out = capsys.readouterr().out
    for step in sql_cost.STEPS:
        assert re.search(rf"^  {re.escape(step.name)} +-?\d+\.\d", out, re.M), (step.name, out)
    assert "\nno_attempts_fkey\n" in out
