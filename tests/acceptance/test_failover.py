"""A primary that dies: a real primary and streaming standby (PostgreSQL's own binaries, started by
the test), `pgqw api` and four `pgqw worker` processes on libpq's multi-host URL
(`…@primary,standby/…?target_session_attrs=read-write`), 2,000 jobs draining and more arriving through
the API, then the primary SIGKILLed and the standby promoted, as a failover manager would
(tests/lab/failover.py has the scenario and what each figure means).

Four runs: synchronous and asynchronous replication, each once as it comes and once with the standby
stalled for a second before the kill (its WAL sender stopped, as a slow link or a busy standby would).
With synchronous replication nothing acknowledged may be lost: no accepted job missing or unfinished,
no success seen before the kill undone, none recorded twice. With asynchronous replication the
numbers are reported; the stalled run must lose something, or the count could not see a loss.

Slow (`--run-slow`). Without a PostgreSQL bin folder that has pg_basebackup it is skipped, except in
CI (CI=true), where it fails. PGQW_FAILOVER_EVIDENCE=<file> writes the runs' table and timelines
there (docs/evidence/failover.txt was made so; docs/soak-and-partition.md has the command);
PGQW_FAILOVER_PROMOTE_AFTER_S=<s> waits that long between the kill and the promotion, as a failover
manager's detection does.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers import cannot_run
from tests.lab import ROOT
from tests.lab.failover import FailoverRun, Plan, evidence_text, run_failover, table
from tests.lab.replication import find_bindir

pytestmark = pytest.mark.slow

RUNS = [(True, 0.0), (False, 0.0), (True, 1.0), (False, 1.0)]  # (synchronous, standby stalled s)
# For runs by hand: seconds between the kill and the promotion, as a failover manager's detection takes.
PROMOTE_AFTER_S = float(os.environ.get("PGQW_FAILOVER_PROMOTE_AFTER_S") or 0)
COMMAND = ("CI=true PGQW_FAILOVER_EVIDENCE=docs/evidence/failover.txt "
           ".venv/bin/python -m pytest tests/acceptance/test_failover.py --run-slow -q -p no:cacheprovider")


@pytest.fixture
def bindir() -> Path:
    found, why = find_bindir()
    if found is None:
        cannot_run(f"the PostgreSQL binaries for a primary and a standby are missing: {why}")
    return found


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _server(bindir: Path) -> str:
    done = subprocess.run([str(bindir / "postgres"), "--version"], capture_output=True, text=True, check=False)
    found = re.search(r"\d+(\.\d+)+", done.stdout)  # postgres (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)
    return found.group(0) if found else "?"


@pytest.mark.timeout(420 + 4 * PROMOTE_AFTER_S)
def test_failover_sync_standby_keeps_every_acknowledged_job_async_loss_is_measured(
        bindir: Path, tmp_path: Path) -> None:
    runs: list[FailoverRun] = []
    for synchronous, stall in RUNS:
        plan = Plan(standby_stall_s=stall, promote_after_s=PROMOTE_AFTER_S)
        runs.append(run_failover(synchronous=synchronous, run_dir=tmp_path / f"run-{len(runs) + 1}", plan=plan,
                                 bindir=bindir, progress=print))
    print("\n" + table(runs))
    evidence = os.environ.get("PGQW_FAILOVER_EVIDENCE")
    if evidence:
        Path(evidence).write_text(evidence_text(runs, command=COMMAND, commit=_commit(), server=_server(bindir)))

    for run in runs:
        why = f"{run.mode}\n{table([run])}"
        # Whatever the replication, the queue's own rules hold on the new primary.
        assert run["jobs accepted through the database"] == Plan().jobs, why
        assert run["jobs accepted through the API (202/200)"] > 0, why
        assert run["jobs whose success was recorded twice"] == 0, why
        assert run["lost: accepted jobs present but not succeeded"] == 0, why
        assert run["attempts left open"] == 0, why
        assert run["workers connected to the new primary"] == Plan().workers, why
        assert run["exit codes on the final SIGTERM"] == [0], why
        # The queue came back by itself, within seconds of the promotion.
        for figure in ("seconds from the kill to the first claim", "seconds from the kill to the first POST answered"):
            assert run[figure] is not None and run[figure] < 15, (figure, why)

    for run in runs[0], runs[2]:  # synchronous: every acknowledged commit survived the promotion
        why = f"{run.mode}\n{table([run])}"
        assert run["lost: accepted jobs missing on the new primary"] == 0, why
        assert run["successes lost (seen before the kill, gone after)"] == 0, why
        assert run["jobs with overlapping attempts"] == 0, why
        assert run["handler runs whose claim the new primary lacks"] == 0, why
        assert run["succeeded attempts without their effect row"] == 0, why

    stalled_async = runs[3]
    assert stalled_async["lost: accepted jobs missing on the new primary"] > 0, (
        "asynchronous replication with the standby a second behind lost nothing: the count cannot see a loss\n"
        + table([stalled_async]))
