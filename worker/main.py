"""`pgqw worker`: reads the settings, applies the command-line overrides and runs one Worker.

Startup problems (a bad setting, an unreachable or unmigrated database) propagate to pgqw.cli,
which prints them as one line and exits non-zero. Once running, the worker only stops on
SIGTERM/SIGINT (exit 0 after a graceful stop) or a second signal (exit at once).
"""
from __future__ import annotations

import argparse
import dataclasses
import os

from pgqw import config
from pgqw.config import ConfigError, Settings, env_names
from pgqw.errors import NO_QUEUE, no_queue_message


def settings_from_args(args: argparse.Namespace) -> Settings:
    """The environment's settings with --id, --concurrency, --queues and --tasks applied."""
    settings = config.load()
    overrides: dict[str, object] = {}
    if getattr(args, "worker_id", None) is not None:
        overrides["worker_id"] = args.worker_id.strip()
    if getattr(args, "concurrency", None) is not None:
        overrides["concurrency"] = args.concurrency
    if getattr(args, "queues", None) is not None:
        queues = tuple(q.strip() for q in args.queues.split(",") if q.strip())
        if not queues:
            raise ConfigError("--queues must name at least one queue")
        overrides["queues"] = queues
    if getattr(args, "tasks", None):
        from pgqw.tasks import parse_modules

        modules = parse_modules(args.tasks)
        if not modules:
            raise ConfigError("--tasks must name at least one module")
        overrides["task_modules"] = modules
    settings = dataclasses.replace(settings, **overrides)  # type: ignore[arg-type]  # each value checked above
    if not settings.worker_id or len(settings.worker_id) > 200:
        raise ConfigError("the worker id (--id or WORKER_ID) must be 1 to 200 characters")
    return settings


def cmd_worker(args: argparse.Namespace) -> int:
    from pgqw.embedded import database_url
    from pgqw.errors import UsageError
    from pgqw.tasks import TaskDefinitionError, load
    from pgqw.worker.runner import Worker

    settings = settings_from_args(args)
    if getattr(args, "processes", None) is not None:
        return supervise(args, settings)
    try:
        tasks = load(settings.task_modules)
    except TaskDefinitionError as exc:
        raise UsageError(str(exc)) from None
    try:
        return Worker(settings, database_url(settings), tasks=tasks).run()
    except NO_QUEUE as exc:
        raise UsageError(no_queue_message(exc)) from None


def supervise(args: argparse.Namespace, settings: Settings) -> int:
    """`pgqw worker --processes N`: N children of this command without --processes (supervisor.py)."""
    from pgqw import launch
    from pgqw.errors import UsageError
    from pgqw.tasks import TaskDefinitionError, load
    from pgqw.worker.log import Log
    from pgqw.worker.supervisor import Supervisor

    try:
        load(settings.task_modules)  # a module that does not import is one line here, not N crash loops
    except TaskDefinitionError as exc:
        raise UsageError(str(exc)) from None
    common: list[str] = []
    if args.concurrency is not None:
        common += ["--concurrency", str(args.concurrency)]
    if args.queues is not None:
        common += ["--queues", args.queues]
    for modules in args.tasks or ():
        common += ["--tasks", modules]

    # An id given (--id or the environment, which every child inherits) gets each child's number, so that no
    # two processes speak under one id (a clean stop of one would end the others' wait_for_jobs).
    given_id = args.worker_id is not None or any(name in os.environ for name in env_names("WORKER_ID"))

    def argv(n: int) -> list[str]:
        named = ["--id", f"{settings.worker_id}-{n}"] if given_id else []
        return launch.command(["worker", *named, *common])

    log = Log(settings.worker_id if given_id else f"supervisor-{os.getpid()}",
              log_format=settings.log_format)
    return Supervisor(argv, args.processes, log).run()
