"""A soak with everything on (tests/lab/soak_everything.py): schedules, cancels, retries, a bulk
prune, pause/resume and a running limit, all exercised while workers are SIGKILLed every 15 s and the
server it owns is restarted twice. It checks what the chaos soak checks (nothing lost or unfinished,
no success twice, no overlapping attempts) and: no attempt starts after its job's cancel committed,
none starts in a paused queue, `limited` is never above its limit, each schedule slot gets one job.

Behind --run-slow (about two minutes). PGQW_SOAK_EVIDENCE=<file> writes the figures and the timeline
there (docs/evidence/soak-everything.txt was made so; docs/soak-and-partition.md has the command).
Without PostgreSQL binaries for a server of its own the test is skipped, except in CI, where it fails.
"""
from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.helpers import cannot_run
from tests.lab import ROOT
from tests.lab.cluster import OwnedCluster
from tests.lab.replication import find_bindir
from tests.lab.soak_everything import evidence_text, run_soak, table

pytestmark = pytest.mark.slow

COMMAND = ("PGQW_SOAK_EVIDENCE=docs/evidence/soak-everything.txt .venv/bin/python -m pytest "
           "tests/acceptance/test_soak_everything.py --run-slow -q -p no:cacheprovider")


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[OwnedCluster]:
    found, why = find_bindir()
    if found is None:
        cannot_run(f"there are no PostgreSQL binaries for a server of the test's own: {why}")
    monkeypatch.setenv("PGQW_PG_BINDIR", str(found))
    owned = OwnedCluster()  # in a folder of its own under /tmp: the server's system user must reach it
    owned.start()
    try:
        yield owned
    finally:
        owned.cleanup()


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _server(bindir: Path) -> str:
    done = subprocess.run([str(bindir / "postgres"), "--version"], capture_output=True, text=True, check=False)
    found = re.search(r"\d+(\.\d+)+", done.stdout)
    return found.group(0) if found else "?"


@pytest.mark.timeout(300)
def test_soak_everything_keeps_every_invariant_through_kills_and_restarts(
        cluster: OwnedCluster, tmp_path: Path) -> None:
    started = time.monotonic()
    res = run_soak(cluster, tmp_path / "run", progress=print)
    took = time.monotonic() - started
    print("\n" + table(res))
    evidence = os.environ.get("PGQW_SOAK_EVIDENCE")
    if evidence:
        Path(evidence).write_text(evidence_text(res, command=COMMAND, commit=_commit(),
                                                server=_server(cluster.bindir), took_s=took))
    assert not res.failures, "\n".join(res.failures) + "\n" + table(res)
    f = res.figures
    # The faults and the features really happened.
    assert f["workers SIGKILLed (each replaced)"] >= 3
    assert f["server restarts (immediate, fast)"] == 2
    assert f["prune_jobs runs (age 0, succeeded + cancelled)"] >= 3 and f["jobs pruned (prune_jobs' answers summed)"] > 0
    assert f["retry_dead calls that revived a job"] > 0
    assert f["pauses of 'pausable' (each resumed)"] >= 3
    pending, processing = (int(x) for x in f["cancels committed: of pending / of processing jobs"].split(" / "))
    assert pending > 0 and processing > 0
    assert f["'limited' most processing at once (limit 2)"] == 2  # the limit was reached, never passed
    assert f["schedule slots due (minutes since slots_after)"] >= 10
    assert took < 240, f"the soak took {took:.0f}s"
