"""Operators' commands: report, cancel, prune, queues and schedules. The numbers come from stored
functions (queue_stats, report_*), so psql gives the same answers; this module only prints them."""
from __future__ import annotations

import argparse
import json
import uuid
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation

import psycopg

from . import config, db, errors
from .embedded import database_url
from .errors import UsageError
from .tables import format_table


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
            if errors.is_error(exc, errors.JobStateConflict, errors.JobNotFound):
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
                if errors.is_error(exc, errors.JobNotFound):
                    raise UsageError(f"no job {job_id}") from None
                raise
            job = db.get_job(conn, job_id=job_id)
            assert job is not None
            print(f"job {job.id}  {job.type}  {job.status}  attempt {job.attempts}/{job.max_attempts}")
            print(format_table(rows, ["attempt", "worker_id", "started_at", "deadline_at", "finished_at",
                                      "wait_before_s", "duration_s", "outcome", "error"]))
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


def _queue_call(args: argparse.Namespace, call: str, **kwargs: object) -> db.QueueRow:
    """One of pause_queue, resume_queue, set_queue_limit, set_queue_rate; bad input (QV400) and a queue
    not known yet without --create (QU404) are usage errors."""
    settings = config.load()
    with _connect(settings) as conn:
        try:
            return getattr(db, call)(conn, queue=args.queue, create=args.create, **kwargs)
        except psycopg.Error as exc:
            if errors.is_error(exc, errors.UnknownQueue):
                raise UsageError(f"{exc.diag.message_primary}; check its name, or add --create to set it "
                                 "up before its first job") from None
            if errors.is_error(exc, errors.InvalidArgument):
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
            # Bad input, a payload too large, a cron that does not parse, an unknown type or schedule.
            if exc.sqlstate in ("QV400", "QV413", "QC400", "QT422", "QR404"):
                raise UsageError(exc.diag.message_primary or str(exc)) from None
            raise
    done = {"set": "set", "pause": "paused", "resume": "resumed", "delete": "deleted"}[args.action]
    print(f"schedule {s.name} {done}: {s.task_type} at {s.cron!r} (UTC), catch up {s.catch_up}"
          + (", paused" if s.paused and args.action != "delete" else ""))
    return 0


def _running_limit(given: str) -> int | None:
    """A limit of running jobs as the CLI takes it: a whole number of at least 1, or none (None). ASCII
    digits only (str.isdigit also takes '²', which int() refuses), and few enough for int(); the database
    says when the number is past what it holds."""
    text = given.strip().lower()
    if text == "none":
        return None
    if text.isascii() and text.isdigit() and len(text) <= 18 and int(text) >= 1:
        return int(text)
    raise UsageError(f"the limit must be a whole number of at least 1, or none; got {given!r}")


def cmd_limit(args: argparse.Namespace) -> int:
    print(_queue_line(_queue_call(args, "set_queue_limit", max_running=_running_limit(args.max_running))))
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
