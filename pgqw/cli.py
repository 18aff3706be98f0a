"""The pgqw command: one console script, one subcommand per job.

Every failure a user can cause ends as one line on stderr and a non-zero exit, never a traceback.
This module imports nothing from an extra (pyproject.toml): a command that needs one checks for it
before it imports it, and says which to install (MissingExtra).
"""
from __future__ import annotations

import argparse
import os
import sys
import uuid
from datetime import datetime, timedelta, timezone
from typing import Callable, NoReturn, Sequence

import psycopg

from . import config
from .argtypes import duration, port, whole
from .config import ConfigError
from .errors import NO_QUEUE, MissingExtra, UsageError, no_queue_message, require_extra, require_task_extras
from .migrate import MigrationError


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and a pointer to --help), not the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def moment(text: str) -> timedelta | datetime:
    """--since / --until: a length of time ago (as --older-than: 30m, 12h, 7d) or an ISO 8601 time
    (2026-01-31T12:00:00+00:00; one without an offset is UTC)."""
    try:
        return duration(text)
    except argparse.ArgumentTypeError:
        pass
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a time ago (a whole number and a unit: 30m, 12h, 7d) or an ISO 8601 time such as "
            f"2026-01-31T12:00:00Z, got {text!r}") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def an_id(text: str) -> uuid.UUID:
    """A full UUID (a workflow's or a batch's id)."""
    try:
        return uuid.UUID(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a UUID, got {text!r}") from None


def add_filters(p: argparse.ArgumentParser, *, times_of: str) -> None:
    """The filters of pgqw retry and pgqw cancel (pgqw.tools_orchestration.FILTERS maps them to the
    keywords of retry_dead_all and cancel_all); `times_of`: what --since and --until compare."""
    p.add_argument("--type", help="jobs of this task type")
    p.add_argument("--queue", help="jobs of this queue")
    p.add_argument("--error", metavar="TEXT", help="jobs whose last error contains TEXT (case-insensitive)")
    p.add_argument("--since", type=moment, metavar="AGE|TIME",
                   help=f"jobs {times_of} at or after this: a time ago (30m, 12h, 7d) or an ISO 8601 time")
    p.add_argument("--until", type=moment, metavar="AGE|TIME",
                   help=f"jobs {times_of} before this: a time ago (30m, 12h, 7d) or an ISO 8601 time")
    p.add_argument("--workflow", type=an_id, metavar="ID", help="jobs of this workflow (its id, a UUID)")
    p.add_argument("--batch", type=an_id, metavar="ID", help="jobs of this batch (its id, a UUID)")


def _task_modules(args: argparse.Namespace, settings: config.Settings) -> tuple[str, ...]:
    """--tasks (repeatable, comma-separated), else PGQW_TASKS, else the demo's."""
    from .tasks import parse_modules

    if getattr(args, "tasks", None):
        modules = parse_modules(args.tasks)
        if not modules:
            raise ConfigError("--tasks must name at least one module")
        return modules
    return settings.task_modules


def register_tasks(url: str, modules: Sequence[str]) -> None:
    """The task types (and their code schedules) of the modules into the database, as a worker's start
    writes them; prints what was registered. A module that cannot be loaded is one line (UsageError)."""
    from .tasks import TaskDefinitionError, register_modules

    with psycopg.connect(url) as conn:  # one transaction
        try:
            done = register_modules(conn, modules)
        except TaskDefinitionError as exc:
            raise UsageError(str(exc)) from None
    print(f"registered task types: {', '.join(done.task_types)} (from {', '.join(modules)})")
    for s in done.schedules:
        print(f"registered schedule {s.name}: {s.task_type} at {s.cron!r}"
              + (" (a DBA's schedule of that name wins)" if s.source == "sql" else ""))


def cmd_migrate(args: argparse.Namespace) -> int:
    from .embedded import database_url
    from .migrate import migrate

    settings = config.load()
    modules = _task_modules(args, settings)
    create_roles = settings.create_roles and not args.no_roles
    url = database_url(settings)
    result = migrate(url, log=print, create_roles=create_roles)
    if not result.applied:
        print(f"migrations up to date ({len(result.skipped)} applied before)")
    register_tasks(url, modules)
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    from .embedded import database_url

    settings = config.load()
    url = database_url(settings)
    if args.action == "register":
        register_tasks(url, _task_modules(args, settings))
        return 0
    from . import db
    from .tables import format_table

    with psycopg.connect(url, autocommit=True) as conn:
        found = db.get_task_types(conn)
    print(format_table(found, ["name", "queue", "priority", "max_attempts", "lease_ms", "timeout_ms", "expire_after_ms",
                              "max_snoozes", "description"]))
    return 0


def _lazy(module: str, name: str, needs: str | None = None) -> Callable[[argparse.Namespace], int]:
    """The command `name` of `module`, imported when it runs; `needs`: the extra it cannot run without."""
    def run(args: argparse.Namespace) -> int:
        import importlib

        if needs:
            require_extra(needs)
        return getattr(importlib.import_module(module), name)(args)

    return run


def cmd_worker(args: argparse.Namespace) -> int:
    """pgqw.worker.main's, once the extras its task modules need are known to be installed."""
    from .worker.main import cmd_worker, settings_from_args

    require_task_extras(settings_from_args(args).task_modules, "or name your own task modules with --tasks or "
                        "PGQW_TASKS")
    return cmd_worker(args)


def run_repository_command(prog: str, main: Callable[[list[str]], int | None],
                           argv: Sequence[str] | None = None) -> int:
    """One of the repository's own commands (./run soak, ./run bench, ./run evidence: the lab in tests/lab
    and bench/, which are not installed with the package), run as `python -m MODULE` from a checkout:
    main(argv) with pgqw's handling of failures, one line on stderr headed `prog` and a non-zero exit."""
    args = argparse.Namespace(command=prog, func=lambda _a: main(list(sys.argv[1:] if argv is None else argv)))
    return _dispatch(args, prog)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="pgqw", description="pg-queue-worker: a job queue where PostgreSQL is the queue.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)

    p = sub.add_parser("migrate", help="apply db/migrations once each, then re-apply db/functions",
                       description="Apply every db/migrations file not yet applied (each once, in its own "
                       "transaction, under an advisory lock), then re-apply every db/functions file.")
    p.add_argument("--no-roles", action="store_true",
                   help="do not create the pgqw_api, pgqw_worker and pgqw_admin roles (a managed database that "
                   "forbids CREATE ROLE; also PGQW_CREATE_ROLES=0); grants still go to those that exist")
    p.add_argument("--tasks", action="append", metavar="MODULES",
                   help="then register the task types (and code schedules) of these modules, as a worker's start "
                   "does, so their jobs are accepted before any worker runs; comma-separated or repeated "
                   "(default PGQW_TASKS, else the demo's pgqw.demo)")
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("tasks", help="register task types at deploy time, or list the registered ones",
                       description="Task types: `register` writes the payload schemas, code defaults and code "
                       "schedules of the given modules into the database, as a worker's start does (a DBA's "
                       "overrides stay); `list` shows the registered ones.")
    tsub = p.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=Parser)
    tp = tsub.add_parser("register", help="register the task types of modules (as a worker's start does)",
                         description="Register the task types and code schedules of the modules, as a worker's "
                         "start does, so jobs of those types are accepted before any worker runs.")
    tp.add_argument("--tasks", action="append", metavar="MODULES",
                    help="import paths of the task modules, comma-separated or repeated (default PGQW_TASKS, else "
                    "the demo's pgqw.demo); the current folder is on the path")
    tsub.add_parser("list", help="the registered task types and their effective settings",
                    description="List the registered task types with their effective queue, priority, attempts "
                    "and lease.")
    p.set_defaults(func=cmd_tasks)

    p = sub.add_parser("api", help="serve the JSON API and the web page",
                       description="Serve the JSON API and the web page with waitress (production server).")
    p.add_argument("--port", type=port, help="port to listen on (default PORT or 3000)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1); any address that is not loopback "
                   "needs API_TOKENS set, or the API refuses to start")
    p.add_argument("--processes", type=whole(1),
                   help="server processes sharing the port, one core each at most (default API_PROCESSES or 1)")
    p.add_argument("--dev", action="store_true", help="use Flask's development server instead")
    p.set_defaults(func=_lazy("pgqw.app.serve", "cmd_api", needs="api"))

    p = sub.add_parser("worker", help="run one worker",
                       description="Run one worker: register its task types, claim jobs of those types, run "
                       "them, record every attempt and every result.")
    p.add_argument("--id", dest="worker_id", help="worker id (default WORKER_ID, else host-pid)")
    p.add_argument("--concurrency", type=whole(1), help="jobs at once (default WORKER_CONCURRENCY or 5)")
    p.add_argument("--queues", help="comma-separated queues to take jobs from (default: all)")
    p.add_argument("--processes", type=whole(1), metavar="N",
                   help="run N worker processes under a supervisor that replaces each one that ends (recycled, "
                   "or crashed: after a backoff); with --id, process n is ID-n")
    p.add_argument("--tasks", action="append", metavar="MODULES",
                   help="import paths of the modules whose @task definitions this worker runs, comma-separated "
                   "or repeated (default PGQW_TASKS, else the demo's pgqw.demo); the current folder is on the path")
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("up", help="bring the whole system up: database, migrate, API and workers",
                       description="Start the embedded PostgreSQL (unless DATABASE_URL is set), migrate, "
                       "then the API and N workers with their logs interleaved. Ctrl+C stops everything, "
                       "the embedded PostgreSQL included. Its data is kept between runs in PGQW_DATA_DIR "
                       "(default: .pgdata in the current folder). While it runs, the other pgqw commands "
                       "started in the same folder (or with the same PGQW_DATA_DIR) and without "
                       "DATABASE_URL use it; no other command starts a server.")
    p.add_argument("--workers", type=whole(1), default=1, help="number of worker processes (default 1)")
    p.add_argument("--port", type=port, help="API port (default PORT or 3000)")
    p.add_argument("--host", default="127.0.0.1",
                   help="API address (default 127.0.0.1); not loopback needs API_TOKENS set")
    p.set_defaults(func=_lazy("pgqw.up", "cmd_up"))

    p = sub.add_parser("burst", help="send N jobs at once through the API",
                       description="Send N of the demo's jobs at once through the API, each with its own "
                       "idempotency key, and print a summary.")
    p.add_argument("n", type=whole(1), help="how many jobs")
    p.add_argument("--url", help="API base URL (default http://127.0.0.1:PORT)")
    p.set_defaults(func=_lazy("pgqw.demo.burst", "cmd_burst"))  # the demo's

    p = sub.add_parser("report", help="counts by status and the latest jobs; timeline; concurrency",
                       description="Print the queue reports. Without a subcommand: counts by status and "
                       "the latest jobs.")
    rsub = p.add_subparsers(dest="report", metavar="REPORT", parser_class=Parser)
    rp = rsub.add_parser("timeline", help="every attempt of one job with the wait before each")
    rp.add_argument("job_id", help="the job's id, or enough of its start to name one job (such as the 8 "
                    "characters the reports print; dashes optional)")
    rp = rsub.add_parser("concurrency", help="peak jobs at once per worker, and double-run checks")
    rp.add_argument("prefix", nargs="?", default="", help="worker id prefix (default: all workers)")
    p.set_defaults(func=_lazy("pgqw.tools", "cmd_report"))

    p = sub.add_parser("cancel", help="cancel a job, or every job matching filters (a running one is asked to stop)",
                       description="Cancel a job: a blocked, pending or failed job ends cancelled at once, and so "
                       "does a dead one (its blocked dependents are cancelled with it); a processing one is asked "
                       "to stop, and ends cancelled when its worker stops. Any other finished job is refused (exit "
                       "status 2). With filters instead of JOB: every blocked, pending, failed or processing job "
                       "matching all of them, in batches (one transaction each, locked rows skipped), and print "
                       "how many. At least one filter, or --all.")
    p.add_argument("job_id", nargs="?", metavar="JOB",
                   help="the job's id, or enough of its start to name one job (dashes optional)")
    add_filters(p, times_of="created")
    p.add_argument("--status", action="append", metavar="STATUSES",
                   help="only jobs in these statuses: blocked, pending, failed, processing (comma-separated or "
                   "repeated; default all four)")
    p.add_argument("--all", action="store_true", help="every blocked, pending, failed or processing job")
    p.set_defaults(func=_lazy("pgqw.tools_orchestration", "cmd_cancel"))

    p = sub.add_parser("retry", help="retry a dead job, or every dead job matching filters",
                       description="Retry dead jobs: each goes back to pending with more attempts "
                       "(queue_settings.retry_extra_attempts). With JOB, that job (any other status is refused, "
                       "exit status 2); with filters, every dead job matching all of them, in batches (one "
                       "transaction each, locked rows skipped), and print how many. At least one filter, or --all.")
    p.add_argument("job_id", nargs="?", metavar="JOB",
                   help="the job's id, or enough of its start to name one job (dashes optional)")
    add_filters(p, times_of="that died")
    p.add_argument("--all", action="store_true", help="every dead job")
    p.set_defaults(func=_lazy("pgqw.tools_orchestration", "cmd_retry"))

    p = sub.add_parser("workflow", help="a workflow's jobs as a tree, with each one's status",
                       description="Print the jobs of a workflow (jobs enqueued with depends_on, and their parents) "
                       "as a tree: each job under the job it waits for, with its status.")
    p.add_argument("workflow_id", metavar="ID",
                   help="the workflow's id, or the id of any of its jobs (or enough of its start to name one job)")
    p.set_defaults(func=_lazy("pgqw.tools_orchestration", "cmd_workflow"))

    p = sub.add_parser("batch", help="a batch's jobs counted by status, and its callback job",
                       description="Print a batch's jobs counted by status, when every one of them had finished, "
                       "and the callback job enqueued then.")
    p.add_argument("batch_id", type=an_id, metavar="ID", help="the batch's id (a UUID)")
    p.set_defaults(func=_lazy("pgqw.tools_orchestration", "cmd_batch"))

    p = sub.add_parser("check-idempotency", help="the demo's check: run one job's work twice, count its results",
                       description="Run the demo task's work of one job twice, one after the other and then at "
                       "the same moment, and count the results it stored (must be 1).")
    p.set_defaults(func=_lazy("pgqw.demo.idempotency", "cmd_check_idempotency", needs="demo"))  # the demo's

    p = sub.add_parser("prune", help="delete old finished jobs with their attempts and results",
                       description="Delete the finished jobs (succeeded, dead, cancelled, expired) that finished longer "
                       "ago than --older-than, with their attempts and results, in batches (one transaction "
                       "each, locked rows skipped), and print how many. Workers also prune by themselves "
                       "(PRUNE; their ages are each task type's retain_succeeded and retain_failed, else "
                       "queue_settings.prune_succeeded_after and prune_finished_after).")
    p.add_argument("--older-than", type=duration, required=True, metavar="AGE",
                   help="how long ago a job must have finished: a number and a unit, such as 7d, 12h, 30m")
    p.add_argument("--status", metavar="STATUSES",
                   help="comma-separated final statuses (default: succeeded,dead,cancelled,expired)")
    p.add_argument("--batch", type=whole(1), metavar="N", help="jobs per transaction (default 1000, at most 100000)")
    p.set_defaults(func=_lazy("pgqw.tools", "cmd_prune"))

    p = sub.add_parser("pause", help="pause a queue: claims skip it, enqueues still land in it",
                       description="Pause a queue: no worker claims its jobs until it is resumed; jobs still "
                       "enqueue into it and running ones finish. Pausing a paused queue is fine.")
    p.add_argument("queue", help="the queue's name")
    p.add_argument("--create", action="store_true",
                   help="set up a queue that has no job, setting, worker, task type or schedule yet (else refused)")
    p.set_defaults(func=_lazy("pgqw.tools", "cmd_pause"))

    p = sub.add_parser("resume", help="resume a paused queue",
                       description="Resume a queue: workers claim its jobs again. Resuming a running queue is fine.")
    p.add_argument("queue", help="the queue's name")
    p.add_argument("--create", action="store_true",
                   help="set up a queue that has no job, setting, worker, task type or schedule yet (else refused)")
    p.set_defaults(func=_lazy("pgqw.tools", "cmd_resume"))

    p = sub.add_parser("limit", help="at most N of a queue's jobs running at once, across all workers",
                       description="Limit how many of a queue's jobs may be processing at once, across all "
                       "workers (none removes the limit). Running jobs above a lowered limit finish.")
    p.add_argument("queue", help="the queue's name")
    p.add_argument("max_running", metavar="N|none", help="a whole number of at least 1, or none")
    p.add_argument("--create", action="store_true",
                   help="set up a queue that has no job, setting, worker, task type or schedule yet (else refused)")
    p.set_defaults(func=_lazy("pgqw.tools", "cmd_limit"))

    p = sub.add_parser("key-limit", help="at most N of a queue's jobs running at once per concurrency key",
                       description="Limit how many of a queue's jobs with the same concurrency key may be processing "
                       "at once, across all workers (none removes the limit). A claim skips a key at its limit "
                       "and takes other keys' jobs; jobs without a key are not limited by it.")
    p.add_argument("queue", help="the queue's name")
    p.add_argument("max_running", metavar="N|none", help="a whole number of at least 1, or none")
    p.add_argument("--create", action="store_true",
                   help="set up a queue that has no job, setting, worker, task type or schedule yet (else refused)")
    p.set_defaults(func=_lazy("pgqw.tools_orchestration", "cmd_key_limit"))

    p = sub.add_parser("schedules", help="list the periodic jobs: cron, state, last and next slot",
                       description="List the schedules: task type, cron expression (UTC), catch-up rule, paused "
                       "or not, the last slot enqueued and the next one, and whether the code or a DBA defines it.")
    p.set_defaults(func=_lazy("pgqw.tools", "cmd_schedules"))

    p = sub.add_parser("schedule", help="set, pause, resume or delete a periodic job",
                       description="Change one schedule (each subcommand has --help). Schedules can also be "
                       "defined in code: @task(..., schedule='*/5 * * * *').")
    ssub = p.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=Parser)
    sp = ssub.add_parser("set", help="make or replace a schedule (a DBA's: a worker's code does not overwrite it)",
                         description="Make or replace a schedule. Its pause is kept; a new cron expression starts "
                         "from now. A schedule of the same name defined in code is taken over until deleted.")
    sp.add_argument("name", help="1 to 100 letters, digits, _ . : or -")
    sp.add_argument("task_type", help="a registered task type")
    sp.add_argument("cron", help="five fields (minute hour day-of-month month day-of-week, UTC), e.g. '*/5 * * * *', "
                    "or @hourly, @daily, @weekly, @monthly, @yearly")
    sp.add_argument("--payload", default="{}", metavar="JSON", help="the jobs' payload, a JSON object (default {})")
    sp.add_argument("--queue", help="the jobs' queue (default: the task type's)")
    sp.add_argument("--priority", type=int, help="the jobs' priority (default: the task type's)")
    sp.add_argument("--catch-up", choices=["latest", "all", "none"], default="latest",
                    help="after a stop, enqueue the latest missed slot (default), all of them (up to 100), or none")
    for action, text in (("pause", "stop enqueueing (jobs already enqueued are untouched)"),
                         ("resume", "enqueue again from the next slot (the slots passed while paused are skipped)"),
                         ("delete", "remove it (one defined in code comes back at the next worker start)")):
        sp = ssub.add_parser(action, help=text, description=text[0].upper() + text[1:] + ".")
        sp.add_argument("name", help="the schedule's name")
    p.set_defaults(func=_lazy("pgqw.tools", "cmd_schedule"))
    p = sub.add_parser("rate", help="at most N of a queue's jobs started per second, across all workers",
                       description="Limit how many of a queue's jobs may start per second, across all workers "
                       "(none removes the rate). A bucket of one second's worth (at least one job) refills at "
                       "that rate; each claim checks it, so a job the rate held back starts at a worker's next "
                       "claim round.")
    p.add_argument("queue", help="the queue's name")
    p.add_argument("jobs_per_second", metavar="N|none",
                   help="a number above 0, at most 1000000, with at most 6 decimal places (0.5: one job every "
                   "2 s), or none")
    p.add_argument("--create", action="store_true",
                   help="set up a queue that has no job, setting, worker, task type or schedule yet (else refused)")
    p.set_defaults(func=_lazy("pgqw.tools", "cmd_rate"))

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _run(argv)
        sys.stdout.flush()  # here, not at exit, so a reader that went away is caught below
        return code
    except BrokenPipeError:
        # Whoever read stdout stopped early (pgqw report | head): end quietly. Python flushes stdout
        # again at exit, so point it at devnull first (the recipe in the documentation of Python's
        # signal module, "Note on SIGPIPE").
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _run(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed
        return exc.code if isinstance(exc.code, int) else 0
    return _dispatch(args, f"pgqw {args.command}")


def _dispatch(args: argparse.Namespace, prog: str) -> int:
    """args.func(args), its failures one line on stderr headed `prog` (pgqw worker: ...)."""
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except MissingExtra as exc:
        print(f"pgqw: {exc.line(prog)}", file=sys.stderr)
        return 2
    except (ConfigError, MigrationError, UsageError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, (ConfigError, UsageError)) else 1
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"{prog}: cannot reach the database: {first}", file=sys.stderr)
        return 1
    except NO_QUEUE as exc:
        print(f"{prog}: {no_queue_message(exc)}", file=sys.stderr)
        return 1
    except psycopg.Error as exc:
        print(f"{prog}: database error {exc.sqlstate}: {exc.diag.message_primary or exc}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
