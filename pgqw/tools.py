"""Operators' commands: burst, report, prune and check-idempotency. The numbers come from stored
functions (queue_stats, report_*), so psql gives the same answers; this module only prints them."""
from __future__ import annotations

import argparse
import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation

import psycopg

from . import config, db
from .embedded import database_url
from .errors import UsageError
from .listing import EXAMPLE_LISTING
from .tables import format_table


@dataclass
class Sent:
    key: str
    status: int
    job_id: str | None
    error: str | None


def _api_token() -> str | None:
    """The first of API_TOKENS, so burst works against an API that asks for a token."""
    found = config.tokens("API_TOKENS")
    return found[0] if found else None


def post_job(base_url: str, key: str, payload: dict | None = None, timeout: float = 30.0) -> Sent:
    """One POST /api/jobs; never raises for an HTTP or network failure, it reports it."""
    body = json.dumps({"type": "listing_flyer", "payload": payload or EXAMPLE_LISTING}).encode()
    headers = {"Content-Type": "application/json", "Idempotency-Key": key}
    token = _api_token()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(f"{base_url}/api/jobs", data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            data = json.loads(response.read())
            return Sent(key, response.status, data["data"]["id"], None)
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read())["error"]["message"]
        except Exception:  # noqa: BLE001 - any unreadable body
            message = exc.reason
        return Sent(key, exc.code, None, str(message))
    except (urllib.error.URLError, OSError) as exc:
        return Sent(key, 0, None, str(getattr(exc, "reason", exc)))


def burst(base_url: str, n: int, *, prefix: str | None = None, progress: bool = True) -> list[Sent]:
    """Sends n jobs at once (distinct idempotency keys) and returns what each request got."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    prefix = prefix or f"burst-{int(time.time() * 1000)}"
    bar = Progress(TextColumn("sending"), BarColumn(), MofNCompleteColumn(), console=Console(stderr=True),
                   disable=not progress, transient=False)
    lock = threading.Lock()

    with bar:
        task = bar.add_task("burst", total=n)

        def one(i: int) -> Sent:
            sent = post_job(base_url, f"{prefix}-{i}")
            with lock:
                bar.advance(task)
            return sent

        with ThreadPoolExecutor(max_workers=min(n, 50)) as pool:
            results = list(pool.map(one, range(n)))
    return results


def _base_url(args: argparse.Namespace, settings: config.Settings) -> str:
    return (args.url or config.public_base_url(settings)).rstrip("/")


def cmd_burst(args: argparse.Namespace) -> int:
    settings = config.load()
    base = _base_url(args, settings)
    started = time.monotonic()
    results = burst(base, args.n)
    took = time.monotonic() - started
    codes = Counter(r.status for r in results)
    unreachable = codes.pop(0, 0)
    print(f"sent {args.n} jobs to {base} in {took:.2f}s")
    for code, count in sorted(codes.items()):
        print(f"  HTTP {code}: {count}")
    if unreachable:
        first = next(r.error for r in results if r.status == 0)
        print(f"  not reached: {unreachable} ({first})")
    errors = [r for r in results if r.error and r.status]
    for r in errors[:5]:
        print(f"  {r.key}: {r.status} {r.error}")
    ids = [r.job_id for r in results if r.job_id]
    if ids:
        print(f"  first job: {ids[0]}  (pgqw report timeline {ids[0]})")
    return 0 if codes.get(202, 0) + codes.get(200, 0) == args.n else 1


def _connect(settings: config.Settings) -> psycopg.Connection:
    return psycopg.connect(database_url(settings), autocommit=True)


SHOWN_MATCHES = 5  # ids listed when a prefix matches several jobs


def _job_id(conn: psycopg.Connection, text: str) -> uuid.UUID:
    """The one job whose id is text or starts with it: the 8 characters the reports print are enough."""
    digits = text.strip().replace("-", "").lower()
    if not 1 <= len(digits) <= 32 or any(c not in "0123456789abcdef" for c in digits):
        raise UsageError(f"not a job id: {text!r} (a job id is a UUID, or the start of one, "
                         "such as the 8 characters the reports print)")
    found = db.find_job_ids_by_prefix(conn, prefix=digits, limit=SHOWN_MATCHES + 1)
    if not found:
        raise UsageError(f"no job with an id starting {text.strip()}")
    if len(found) > 1:
        shown = ", ".join(str(j) for j in found[:SHOWN_MATCHES])
        count = f"more than {SHOWN_MATCHES}" if len(found) > SHOWN_MATCHES else str(len(found))
        raise UsageError(f"{count} jobs have an id starting {text.strip()} ({shown}"
                         f"{', ...' if len(found) > SHOWN_MATCHES else ''}): give more of the id")
    return found[0]


def cmd_prune(args: argparse.Namespace) -> int:
    """Batches of prune_jobs, each its own transaction (autocommit), until one deletes nothing."""
    settings = config.load()
    statuses = None if args.status is None else [t.strip() for t in args.status.split(",")]
    total = 0
    with _connect(settings) as conn:
        while deleted := db.prune_jobs(conn, older_than=args.older_than, statuses=statuses, batch=args.batch):
            total += deleted
    print(f"pruned {total} jobs")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    """cancel_job: one line, the job's status after it (cancelled, or processing until its worker stops)."""
    settings = config.load()
    with _connect(settings) as conn:
        job_id = _job_id(conn, args.job_id)
        try:
            job = db.cancel_job(conn, job_id=job_id)
        except psycopg.Error as exc:
            if exc.sqlstate in ("QS409", "QN404"):
                raise UsageError(exc.diag.message_primary or str(exc)) from None
            raise
    if job.status == "cancelled":
        print(f"job {job.id} cancelled")
    else:
        print(f"job {job.id} is {job.status}: its worker is asked to stop, and it ends cancelled")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    settings = config.load()
    with _connect(settings) as conn:
        if args.report == "timeline":
            job_id = _job_id(conn, args.job_id)
            try:
                rows = db.report_timeline(conn, job_id=job_id)
            except psycopg.Error as exc:
                if exc.sqlstate == "QN404":
                    raise UsageError(f"no job {job_id}") from None
                raise
            job = db.get_job(conn, job_id=job_id)
            assert job is not None
            print(f"job {job.id}  {job.type}  {job.status}  attempt {job.attempts}/{job.max_attempts}")
            print(format_table(rows, ["attempt", "worker_id", "started_at", "finished_at", "wait_before_s",
                                      "duration_s", "outcome", "error"]))
            return 0
        if args.report == "concurrency":
            peaks = db.report_concurrency(conn, prefix=args.prefix)
            runs = db.report_double_runs(conn, prefix=args.prefix)
            print(format_table(peaks, ["worker_id", "peak_at_once", "attempts_run"]))
            print()
            print(f"jobs looked at:                                {runs.jobs_seen}")
            print(f"attempts looked at:                            {runs.attempts_seen}")
            print(f"jobs worked on by two workers at the same time: {runs.overlapping_jobs}")
            print(f"jobs that succeeded more than once:             {runs.succeeded_twice}")
            print(f"jobs succeeded:                                 {runs.succeeded_jobs}")
            print(f"flyers produced:                                {runs.flyers}")
            return 0 if runs.overlapping_jobs == 0 and runs.succeeded_twice == 0 else 1
        counts = db.count_by_status(conn)
        print(format_table([{"status": s, "jobs": n} for s, n in counts.items()], ["status", "jobs"]))
        print()
        stats = db.queue_stats(conn)
        waiting = [s for s in stats if s.metric == "waiting_without_worker"]
        alive = next((int(s.value) for s in stats if s.metric == "workers_alive"), 0)
        print(f"live workers: {alive}")
        for w in db.list_workers(conn):
            if w.stopped_at is None and w.expires_at > datetime.now(timezone.utc):
                print(f"  {w.id}: tasks {','.join(w.task_types)}; queues {','.join(w.queues) if w.queues else 'all'}")
        if waiting:
            print("ready jobs that no live worker can take (their type or queue has no worker):")
            print(format_table([{"queue": s.queue, "type": s.label, "jobs": int(s.value)} for s in waiting],
                               ["queue", "type", "jobs"]))
        print()
        latest = db.report_latest_jobs(conn, limit=15)
        print(format_table(
            [{**r.__dict__, "id": str(r.id)[:8], "attempt": f"{r.attempts}/{r.max_attempts}"} for r in latest],
            ["id", "type", "status", "attempt", "locked_by", "created_at", "run_at", "last_error"],
        ))
    return 0


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
    with psycopg.connect(conninfo) as conn:
        return db.count_flyers(conn, job_id=job.id)


def check_idempotency(conninfo: str, settings: config.Settings) -> IdempotencyCheck:
    """Runs the listing_flyer work twice for one job, one after the other (a worker that crashed
    after the work but before recording it, then the retry), then twice at the same moment for
    another job (the sweep handed a slow job to a second worker), and counts the flyers: the result
    is stored only with the success of the attempt that holds the job, so it is one each time."""
    from .demo import Listing, render

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


def _queue_call(args: argparse.Namespace, call: str, **kwargs: object) -> db.QueueRow:
    """One of pause_queue, resume_queue, set_queue_limit, set_queue_rate; bad input (QV400) and a queue
    not known yet without --create (QU404) are usage errors."""
    settings = config.load()
    with _connect(settings) as conn:
        try:
            return getattr(db, call)(conn, queue=args.queue, create=args.create, **kwargs)
        except psycopg.Error as exc:
            if exc.sqlstate == "QU404":
                raise UsageError(f"{exc.diag.message_primary}; check its name, or add --create to set it "
                                 "up before its first job") from None
            if exc.sqlstate == "QV400":
                raise UsageError(exc.diag.message_primary or str(exc)) from None
            raise


def _queue_line(q: db.QueueRow, *, rate: bool = False) -> str:
    """The queue's settings in one line; the rate only when it has one, or when rate is asked for."""
    limit = "no limit" if q.max_running is None else f"at most {q.max_running} running"
    line = f"queue {q.name}: {'paused' if q.paused else 'running'}, {limit}"
    if q.jobs_per_second is not None:
        line += f", at most {format(q.jobs_per_second.normalize(), 'f')} started per second"
    elif rate:
        line += ", no rate"
    return line


def cmd_pause(args: argparse.Namespace) -> int:
    print(_queue_line(_queue_call(args, "pause_queue")))
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    print(_queue_line(_queue_call(args, "resume_queue")))
    return 0


def cmd_schedules(args: argparse.Namespace) -> int:
    """The schedules as a table, with each one's next slot (croniter, from the server's clock)."""
    from .cron import next_slot_of

    settings = config.load()
    with _connect(settings) as conn:
        now = db.server_now(conn)
        found = db.list_schedules(conn)
    print(format_table([{
        "name": s.name, "task type": s.task_type, "cron": s.cron, "catch up": s.catch_up,
        "state": "paused" if s.paused else "active", "last slot": s.last_slot, "next slot": next_slot_of(s, now),
        "defined by": "code" if s.source == "code" else "dba",
    } for s in found], ["name", "task type", "cron", "catch up", "state", "last slot", "next slot", "defined by"]))
    return 0


def cmd_schedule(args: argparse.Namespace) -> int:
    """pgqw schedule set|pause|resume|delete: one line out; bad input (its SQLSTATE) is one line and exit 2."""
    settings = config.load()
    kwargs: dict[str, object] = {}
    if args.action == "set":
        try:
            payload = json.loads(args.payload)
        except ValueError as exc:
            raise UsageError(f"--payload is not JSON: {exc}") from None
        kwargs = {"task_type": args.task_type, "cron": args.cron, "payload": payload, "queue": args.queue,
                  "priority": args.priority, "catch_up": args.catch_up}
        if not isinstance(payload, dict):
            raise UsageError("--payload must be a JSON object")
    with _connect(settings) as conn:
        try:
            s = getattr(db, f"{args.action}_schedule")(conn, name=args.name, **kwargs)
        except psycopg.Error as exc:
            if exc.sqlstate in ("QV400", "QV413", "QC400", "QT422", "QR404"):
                raise UsageError(exc.diag.message_primary or str(exc)) from None
            raise
    done = {"set": "set", "pause": "paused", "resume": "resumed", "delete": "deleted"}[args.action]
    print(f"schedule {s.name} {done}: {s.task_type} at {s.cron!r} (UTC), catch up {s.catch_up}"
          + (", paused" if s.paused and args.action != "delete" else ""))
    return 0


def cmd_limit(args: argparse.Namespace) -> int:
    text = args.max_running.strip().lower()
    if text == "none":
        n = None
    elif text.isdigit() and int(text) >= 1:
        n = int(text)
    else:
        raise UsageError(f"the limit must be a whole number of at least 1, or none; got {args.max_running!r}")
    print(_queue_line(_queue_call(args, "set_queue_limit", max_running=n)))
    return 0


def cmd_rate(args: argparse.Namespace) -> int:
    """A number (set_queue_rate checks its range and decimal places) or none."""
    text = args.jobs_per_second.strip().lower()
    if text == "none":
        rate = None
    else:
        try:
            rate = Decimal(text)
        except InvalidOperation:
            raise UsageError("the rate must be a number of jobs per second above 0, or none; "
                             f"got {args.jobs_per_second!r}") from None
    print(_queue_line(_queue_call(args, "set_queue_rate", jobs_per_second=rate), rate=True))
    return 0
