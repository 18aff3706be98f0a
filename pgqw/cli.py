"""The pgqw command: one console script, one subcommand per job.

Every failure a user can cause ends as one line on stderr and a non-zero exit, never a traceback.
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable, NoReturn, Sequence

import psycopg

from . import config
from .config import ConfigError
from .argtypes import port, whole
from .errors import UsageError
from .migrate import MigrationError


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and a pointer to --help), not the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def cmd_migrate(args: argparse.Namespace) -> int:
    from .embedded import database_url
    from .migrate import migrate

    settings = config.load()
    create_roles = settings.create_roles and not args.no_roles
    result = migrate(database_url(settings), log=print, create_roles=create_roles)
    if not result.applied:
        print(f"migrations up to date ({len(result.skipped)} applied before)")
    return 0


def _lazy(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        import importlib

        return getattr(importlib.import_module(module), name)(args)

    return run


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="pgqw", description="pg-queue-worker: a job queue where PostgreSQL is the queue.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)

    p = sub.add_parser("migrate", help="apply db/migrations once each, then re-apply db/functions",
                       description="Apply every db/migrations file not yet applied (each once, in its own "
                       "transaction, under an advisory lock), then re-apply every db/functions file.")
    p.add_argument("--no-roles", action="store_true",
                   help="do not create the pgqw_api, pgqw_worker and pgqw_admin roles (a managed database that "
                   "forbids CREATE ROLE; also PGQW_CREATE_ROLES=0); grants still go to those that exist")
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("api", help="serve the JSON API and the web page",
                       description="Serve the JSON API and the web page with waitress (production server).")
    p.add_argument("--port", type=port, help="port to listen on (default PORT or 3000)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1); any address that is not loopback "
                   "needs API_TOKENS set, or the API refuses to start")
    p.add_argument("--dev", action="store_true", help="use Flask's development server instead")
    p.set_defaults(func=_lazy("app.serve", "cmd_api"))

    p = sub.add_parser("worker", help="run one worker",
                       description="Run one worker: claim jobs, run them, record every attempt.")
    p.add_argument("--id", dest="worker_id", help="worker id (default WORKER_ID, else host-pid)")
    p.add_argument("--concurrency", type=whole(1), help="jobs at once (default WORKER_CONCURRENCY or 5)")
    p.add_argument("--queues", help="comma-separated queues to take jobs from (default: all)")
    p.set_defaults(func=_lazy("worker.main", "cmd_worker"))

    p = sub.add_parser("up", help="bring the whole system up: database, migrate, API and workers",
                       description="Start the embedded PostgreSQL (unless DATABASE_URL is set), migrate, "
                       "then the API and N workers with their logs interleaved. Ctrl+C stops everything.")
    p.add_argument("--workers", type=whole(1), default=1, help="number of worker processes (default 1)")
    p.add_argument("--port", type=port, help="API port (default PORT or 3000)")
    p.add_argument("--host", default="127.0.0.1",
                   help="API address (default 127.0.0.1); not loopback needs API_TOKENS set")
    p.set_defaults(func=_lazy("pgqw.up", "cmd_up"))

    p = sub.add_parser("burst", help="send N jobs at once through the API",
                       description="Send N listing_flyer jobs at once through the API, each with its own "
                       "idempotency key, and print a summary.")
    p.add_argument("n", type=whole(1), help="how many jobs")
    p.add_argument("--url", help="API base URL (default http://127.0.0.1:PORT)")
    p.set_defaults(func=_lazy("pgqw.tools", "cmd_burst"))

    p = sub.add_parser("report", help="counts by status and the latest jobs; timeline; concurrency",
                       description="Print the queue reports. Without a subcommand: counts by status and "
                       "the latest jobs.")
    rsub = p.add_subparsers(dest="report", metavar="REPORT", parser_class=Parser)
    rp = rsub.add_parser("timeline", help="every attempt of one job with the wait before each")
    rp.add_argument("job_id")
    rp = rsub.add_parser("concurrency", help="peak jobs at once per worker, and double-run checks")
    rp.add_argument("prefix", nargs="?", default="", help="worker id prefix (default: all workers)")
    p.set_defaults(func=_lazy("pgqw.tools", "cmd_report"))

    p = sub.add_parser("check-idempotency", help="run one job's flyer work twice and count the flyers",
                       description="Run the flyer work of one job twice, one after the other and then at "
                       "the same moment, and count the flyers (must be 1).")
    p.set_defaults(func=_lazy("pgqw.tools", "cmd_check_idempotency"))

    p = sub.add_parser("evidence", help="run the break-it scenarios and write docs/evidence/",
                       description="Run the break-it scenarios with real API and worker processes, each in a "
                       "scratch database, and write one file per scenario to docs/evidence/.")
    p.add_argument("names", nargs="*", metavar="NAME",
                   help="scenarios to run (default: all): concurrency-50-jobs, backoff-to-dead, "
                   "stuck-job-recovery, idempotency-key, two-workers, idempotent-work, every-status")
    p.add_argument("--fast", action="store_true", help="the test suite's short latencies instead of the demo's")
    p.add_argument("--out", default="docs/evidence", help="folder to write to (default docs/evidence)")
    p.set_defaults(func=_lazy("pgqw.evidence", "cmd_evidence"))

    from . import soak

    soak.add_parser(sub)

    p = sub.add_parser("bench", help="run the benchmark suite and write docs/benchmarks.md",
                       description="Measure the queue against the raw SKIP LOCKED ceiling of this machine.")
    p.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    p.add_argument("--only", help="comma-separated sections to run")
    p.set_defaults(func=_lazy("bench.run", "cmd_bench"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (ConfigError, MigrationError, UsageError) as exc:
        print(f"pgqw {args.command}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, (ConfigError, UsageError)) else 1
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"pgqw {args.command}: cannot reach the database: {first}", file=sys.stderr)
        return 1
    except psycopg.Error as exc:
        print(f"pgqw {args.command}: database error {exc.sqlstate}: {exc.diag.message_primary or exc}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
