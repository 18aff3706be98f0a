"""Operators' commands for dependent jobs, batches and per-key limits: retry and cancel by filter, a
queue's limit per concurrency key, a workflow's tree, a batch's counts. Each is one stored function or
a loop of bounded ones (retry_dead_jobs, cancel_jobs); this module only parses and prints."""
from __future__ import annotations

import argparse
import re
import uuid
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any, Iterator, Sequence

import psycopg

from . import config, db, errors
from .errors import UsageError
from .tables import format_table
from .tools import _connect, _job_id, _queue_call, _queue_line, _running_limit

# The filters pgqw retry and pgqw cancel share: option → the keyword of retry_dead_all / cancel_all.
FILTERS = {"type": "type", "queue": "queue", "error": "error", "since": "since", "until": "until",
           "workflow": "workflow_id", "batch": "batch_id"}
CANCELLABLE = ("blocked", "pending", "failed", "processing")  # what cancel_jobs takes in p_statuses
LINE_ERROR_MAX = 60  # the most of a job's last_error the workflow tree shows


def _filters(args: argparse.Namespace, conn: psycopg.Connection) -> dict[str, Any]:
    """The given filters as keywords; a time ago is taken from the database server's clock (the
    functions check the rest: check_bulk_filter)."""
    given = {key: getattr(args, option) for option, key in FILTERS.items() if getattr(args, option) is not None}
    if any(isinstance(given.get(key), timedelta) for key in ("since", "until")):
        now = db.server_now(conn)
        for key in ("since", "until"):
            if isinstance(given.get(key), timedelta):
                given[key] = now - given[key]
    return given


def _one_or_filters(args: argparse.Namespace, command: str, extra: Sequence[str] = ()) -> bool:
    """True for one job (JOB given), False for filters; anything else is a usage error."""
    named = [f"--{o}" for o in FILTERS if getattr(args, o) is not None] + [o for o in extra if getattr(
        args, o.lstrip("-").replace("-", "_"))]
    if args.job_id is not None:
        if named or args.all:
            raise UsageError(f"give a job id or filters, not both (got {', '.join(named or ['--all'])})")
        return True
    if args.all and named:
        raise UsageError(f"--all takes no filters (got {', '.join(named)})")
    if not named and not args.all:
        raise UsageError(f"name a job, or the jobs to {command} with at least one filter (--type, --queue, "
                         "--error, --since, --until, --workflow, --batch), or --all")
    return False


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


@contextmanager
def _usage_errors(*kinds: type[errors.PgqwError]) -> Iterator[None]:
    """A stored function's refusal of one of these kinds becomes a usage error: its message, one line."""
    try:
        yield
    except psycopg.Error as exc:
        if errors.is_error(exc, *kinds):
            raise UsageError(exc.diag.message_primary or str(exc)) from None
        raise


def cmd_retry(args: argparse.Namespace) -> int:
    """retry_dead for one job; retry_dead_all (bounded batches, each its own transaction) for filters."""
    one = _one_or_filters(args, "retry")
    settings = config.load()
    with _connect(settings) as conn:
        if one:
            job_id = _job_id(conn, args.job_id)
            with _usage_errors(errors.JobStateConflict, errors.JobNotFound):
                job = db.retry_dead(conn, job_id=job_id)
            print(f"job {job.id} retried: {job.status}, {_plural(job.max_attempts - job.attempts, 'attempt')} left")
            return 0
        with _usage_errors(errors.InvalidArgument):
            total = db.retry_dead_all(conn, **_filters(args, conn))
    print(f"retried {_plural(total, 'dead job')}")
    return 0


def _statuses(given: Sequence[str] | None) -> list[str] | None:
    """--status, repeated or comma-separated, as cancel_jobs' p_statuses (None: all four)."""
    if not given:
        return None
    found = [s.strip().lower() for text in given for s in text.split(",") if s.strip()]
    wrong = [s for s in found if s not in CANCELLABLE]
    if wrong or not found:
        raise UsageError(f"--status takes {', '.join(CANCELLABLE)}; got {', '.join(wrong) or repr(','.join(given))}")
    return list(dict.fromkeys(found))


def cmd_cancel(args: argparse.Namespace) -> int:
    """cancel_job for one job (pgqw.tools.cmd_cancel); cancel_all (bounded batches) for filters."""
    from .tools import cmd_cancel as cancel_one

    if _one_or_filters(args, "cancel", extra=("--status",)):
        return cancel_one(args)
    statuses = _statuses(args.status)
    settings = config.load()
    with _connect(settings) as conn:
        with _usage_errors(errors.InvalidArgument):
            total = db.cancel_all(conn, statuses=statuses, **_filters(args, conn))
    line = f"cancelled {_plural(total, 'job')}"
    if total and (statuses is None or "processing" in statuses):
        line += " (a running one is asked to stop, and ends cancelled when its worker stops)"
    print(line)
    return 0


def cmd_key_limit(args: argparse.Namespace) -> int:
    """set_queue_key_limit: a whole number of at least 1, or none."""
    q = _queue_call(args, "set_queue_key_limit", max_running=_running_limit(args.max_running))
    per_key = ("no limit per concurrency key" if q.key_max_running is None
               else f"at most {q.key_max_running} running per concurrency key")
    print(f"{_queue_line(q)}, {per_key}")
    return 0


def _workflow_id(conn: psycopg.Connection, text: str) -> uuid.UUID:
    """The workflow's id as given (a full UUID), or the workflow of the job the text names (an id or the
    start of one): a job's workflow is its workflow_id, or its own id when its dependents name it."""
    digits = text.strip().replace("-", "").lower()
    if re.fullmatch(r"[0-9a-f]{32}", digits) and db.get_job(conn, job_id=digits) is None:
        return uuid.UUID(digits)  # not a job's id: a workflow id given at enqueue (p_workflow_id)
    job = db.get_job(conn, job_id=_job_id(conn, text))
    assert job is not None
    return job.workflow_id or job.id


def _job_line(job: Any) -> str:
    """One node of the tree: short id, type, status, and what explains a status a person looks into."""
    line = f"{str(job.id)[:8]}  {job.type}  {job.status}"
    if job.status in ("processing", "failed", "dead"):
        line += f"  attempt {job.attempts}/{job.max_attempts}"
    if job.last_error and job.status in ("failed", "dead", "cancelled", "expired"):
        error = " ".join(job.last_error.split())
        line += f": {error if len(error) <= LINE_ERROR_MAX else error[:LINE_ERROR_MAX - 3] + '...'}"
    return line


def workflow_tree(jobs: Sequence[Any]) -> list[str]:
    """The workflow's jobs (workflow_jobs' rows: parents before their dependents) as an indented tree:
    each job under the first of its parents in that order, its other parents named after it; jobs
    without a parent in the workflow are roots."""
    place = {j.id: n for n, j in enumerate(jobs)}
    by_id = {j.id: j for j in jobs}
    children: dict[uuid.UUID | None, list[Any]] = {}
    for j in jobs:
        inside = sorted((p for p in j.depends_on if p in by_id), key=place.__getitem__)
        children.setdefault(inside[0] if inside else None, []).append(j)
    lines: list[str] = []
    shown: set[uuid.UUID] = set()

    def show(job: Any, lead: str, branch: str) -> None:
        shown.add(job.id)
        notes = []
        if job.run_anyway:
            notes.append("run anyway")
        elif job.run_anyway_for:
            notes.append("run anyway after " + ", ".join(str(p)[:8] for p in job.run_anyway_for))
        others = sorted((p for p in job.depends_on if p in by_id), key=place.__getitem__)[1:]
        if others:
            notes.append("also after " + ", ".join(str(p)[:8] for p in others))
        outside = [p for p in job.depends_on if p not in by_id]
        if outside:
            notes.append("after " + ", ".join(str(p)[:8] for p in outside) + " (outside this workflow)")
        lines.append(lead + branch + _job_line(job) + (f"  ({'; '.join(notes)})" if notes else ""))
        below = [c for c in children.get(job.id, []) if c.id not in shown]
        deeper = lead + ("" if not branch else "|   " if branch == "|-- " else "    ")
        for i, child in enumerate(below):
            show(child, deeper, "`-- " if i == len(below) - 1 else "|-- ")

    for root in children.get(None, []):
        show(root, "", "")
    for j in jobs:  # none are left (a parent is always enqueued first); kept so a job is never hidden
        if j.id not in shown:
            show(j, "", "")
    return lines


def cmd_workflow(args: argparse.Namespace) -> int:
    """workflow_jobs as a tree, with the counts by status first."""
    settings = config.load()
    with _connect(settings) as conn:
        workflow_id = _workflow_id(conn, args.workflow_id)
        with _usage_errors(errors.JobNotFound):
            jobs = db.workflow_jobs(conn, workflow_id=workflow_id)
    if not jobs:
        raise UsageError(f"no workflow {workflow_id}")
    counts = {s: sum(1 for j in jobs if j.status == s) for s in db.STATUSES}
    print(f"workflow {workflow_id}: {_plural(len(jobs), 'job')}: "
          + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    print("\n".join(workflow_tree(jobs)))
    return 0


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def cmd_batch(args: argparse.Namespace) -> int:
    """batch_status: the batch's counts by status, when it finished, and its callback job (or why it
    could not be enqueued)."""
    settings = config.load()
    with _connect(settings) as conn:
        with _usage_errors(errors.JobNotFound):
            found = db.batch_status(conn, batch_id=args.batch_id)
    done = sum(getattr(found, s) for s in db.FINAL)
    print(f"batch {found.batch_id}: {_plural(found.total, 'job')}, {done} finished; created "
          f"{_when(found.created_at)}, " + (f"finished {_when(found.finished_at)}" if found.finished_at
                                             else "not finished"))
    print(format_table([{"status": s, "jobs": getattr(found, s)} for s in db.STATUSES], ["status", "jobs"]))
    if found.callback_job_id is not None:
        print(f"callback job {found.callback_job_id}")
    if found.callback_error is not None:
        print(f"callback not enqueued: {found.callback_error}")
    return 0
