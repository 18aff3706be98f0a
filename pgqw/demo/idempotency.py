"""`pgqw check-idempotency`: the flyer work of one job run twice, one after the other and then at the
same moment, and the flyers counted (one each time). The CLI delegates here; it needs the demo extra
(the work renders real flyers)."""
from __future__ import annotations

import argparse
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import psycopg

from .. import config, db
from ..embedded import database_url
from . import Listing, render
from .listing import EXAMPLE_LISTING


@dataclass
class IdempotencyCheck:
    sequential_flyers: list[int]
    concurrent_flyers: int
    notes: list[str]
    text: str

    @property
    def ok(self) -> bool:
        return self.sequential_flyers == [0, 1] and self.concurrent_flyers == 1


def _check_job(conn: psycopg.Connection, key: str, worker_id: str, *, lease_ms: int | None = None) -> db.ClaimedJob:
    """A job of its own queue, due in a year, so no running worker takes it; then claimed by
    this check (p_now = its run_at) so its attempts are recorded like any other."""
    job = db.enqueue_job(conn, type="listing_flyer", payload=EXAMPLE_LISTING, idempotency_key=key,
                         queue="check-idempotency", run_at=datetime.now(timezone.utc) + timedelta(days=365))
    claimed = db.claim_job_at(conn, worker_id=worker_id, queues=["check-idempotency"], now=job.run_at,
                              lease_ms=lease_ms)
    assert claimed is not None and claimed.id == job.id
    return claimed


def _record(conninfo: str, job: db.ClaimedJob, worker_id: str, pdf: bytes) -> str:
    """The work's result recorded with its success, as a worker does; what the database answered."""
    try:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token,
                              result=("application/pdf", None, pdf))
    except psycopg.Error as exc:
        return f"refused ({exc.sqlstate}: {exc.diag.message_primary})"
    return "recorded"


def _flyers(conninfo: str, job: db.Job) -> int:
    """The job's stored PDF results: a job has at most one result, so 0 or 1."""
    with psycopg.connect(conninfo) as conn:
        result = db.get_result(conn, job_id=job.id)
    return int(result is not None and result.content_type == "application/pdf")


def check_idempotency(conninfo: str, settings: config.Settings) -> IdempotencyCheck:
    """Runs the listing_flyer work twice for one job, one after the other (a worker that crashed
    after the work but before recording it, then the retry), then twice at the same moment for
    another job (the sweep handed a slow job to a second worker), and counts the flyers: the result
    is stored only with the success of the attempt that holds the job, so it is one each time."""
    listing = Listing.model_validate(EXAMPLE_LISTING)
    stamp = int(time.time() * 1000)
    notes: list[str] = []
    lines = ["Case 1, one after the other: worker A renders, then dies before recording; the job is "
             "handed on; worker B renders and records; A's late result comes last."]
    with psycopg.connect(conninfo, autocommit=True) as conn:
        job_a = _check_job(conn, f"check-idempotency-{stamp}-sequential", "check-idempotency-a")
    render(listing, job_a.id, settings)
    counts = [_flyers(conninfo, job_a)]
    lines.append(f"  after run 1: {counts[-1]} flyer(s)   (A rendered; nothing recorded)")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        db.release_job(conn, job_id=job_a.id, lease_token=job_a.lease_token,
                       reason="check-idempotency: worker A died after the work")
        job_b = db.claim_job_at(conn, worker_id="check-idempotency-b", queues=["check-idempotency"], now=job_a.run_at)
    assert job_b is not None and job_b.id == job_a.id
    said_b = _record(conninfo, job_b, "check-idempotency-b", render(listing, job_b.id, settings))
    counts.append(_flyers(conninfo, job_b))
    notes.append(f"sequential run 2: {said_b}")
    lines.append(f"  after run 2: {counts[-1]} flyer(s)   (B rendered: {said_b})")
    said_a = _record(conninfo, job_a, "check-idempotency-a", render(listing, job_a.id, settings))
    notes.append(f"sequential late result of A: {said_a}")
    lines.append(f"  A's late result: {said_a}; {_flyers(conninfo, job_a)} flyer(s)")

    lines.append("Case 2, two runs at the same moment: A's lease runs out while it renders, the sweep hands "
                 "the job to B, and both finish together.")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        job_a = _check_job(conn, f"check-idempotency-{stamp}-concurrent", "check-idempotency-a", lease_ms=1)
        later = job_a.run_at + timedelta(seconds=1)
        db.sweep_stuck_at(conn, now=later)
        job_b = db.claim_job_at(conn, worker_id="check-idempotency-b", queues=["check-idempotency"], now=later)
    assert job_b is not None and job_b.id == job_a.id
    barrier = threading.Barrier(2)
    said: list[str] = ["", ""]

    def run(i: int, job: db.ClaimedJob, worker_id: str) -> None:
        pdf = render(listing, job.id, settings)
        barrier.wait(timeout=30)  # both record at the same moment
        said[i] = _record(conninfo, job, worker_id, pdf)

    threads = [threading.Thread(target=run, args=(0, job_a, "check-idempotency-a")),
               threading.Thread(target=run, args=(1, job_b, "check-idempotency-b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    concurrent = _flyers(conninfo, job_b)
    for i, note in enumerate(said):
        notes.append(f"concurrent run {'AB'[i]}: {note}")
        lines.append(f"  run {'AB'[i]}: {note}")
    lines.append(f"  after both runs: {concurrent} flyer(s)")
    return IdempotencyCheck(counts, concurrent, notes, "\n".join(lines))


def cmd_check_idempotency(args: argparse.Namespace) -> int:
    settings = config.load()
    report = check_idempotency(database_url(settings), settings)
    print(report.text)
    print("OK: one flyer per job" if report.ok else "FAILED: a job has more than one flyer")
    return 0 if report.ok else 1
