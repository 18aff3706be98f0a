"""The A/B and profiling tools of the benchmark (bench.functions_ab, bench.sql_cost, bench.profile) run end to end against a real
server and print their figures. Nothing here looks at how fast anything was."""
from __future__ import annotations

import re

import pytest

from bench import functions_ab, profile, sql_cost


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


def test_profile_summary_counts_each_function_once_per_sample_inclusive_and_at_the_top() -> None:
    raw = [
        "Thread.run (threading.py:1);Recorder.loop (worker/recorder.py:10);Queue.put (queue.py:133) 3",
        "Thread.run (threading.py:1);Recorder.loop (worker/recorder.py:12);Recorder.loop (worker/recorder.py:14) 1",
        "not a sample line",
        "",
    ]
    text = profile.summarize(raw)
    on_stack, at_top = text.split("at the top of the stack:")
    assert text.startswith("4 samples while holding the interpreter lock")
    # Recorder.loop is on every sample's stack, counted once even where it appears twice.
    assert "100.0%  Recorder.loop (worker/recorder.py" in on_stack
    assert " 75.0%  Queue.put (queue.py" in on_stack
    assert " 75.0%  Queue.put (queue.py" in at_top and " 25.0%  Recorder.loop (worker/recorder.py" in at_top
    assert profile.summarize([]) == "no samples"
