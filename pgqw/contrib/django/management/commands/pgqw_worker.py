"""`manage.py pgqw_worker`: one pgqw worker in a process where Django is set up, so handlers use the ORM.

The options are `pgqw worker`'s (pgqw.contrib.django.options), and so is the worker: this command works out
the queue's database and the task modules from the project's settings (pgqw.contrib.django.conf), puts each
handler inside Django's connection cleanup (pgqw.contrib.django.attempts), then runs pgqw's own entry point,
`pgqw worker --tasks MODULES ...`, with DATABASE_URL set to that database. Every other setting is pgqw's
environment variable, as for `pgqw worker` (WORKER_CONCURRENCY, PGQW_SCHEMA, SHUTDOWN_GRACE_MS, ...).
The exit code is pgqw's: 0 after SIGTERM or Ctrl+C and a graceful stop.
"""
from __future__ import annotations

import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from pgqw.contrib.django import conf
from pgqw.contrib.django.options import add_pgqw_options, pgqw_argv

TASKS_HELP = ("import paths of the modules whose @task definitions this worker runs, comma-separated or repeated "
              "(default: settings.PGQW_TASKS, else the environment's PGQW_TASKS, else the tasks module of each "
              "installed app)")


class Command(BaseCommand):
    help = ("Run one pgqw worker with Django set up: the options of `pgqw worker`; the queue's database is "
            "settings.PGQW_DATABASE_URL, else the environment's PGQW_DATABASE_URL (or DATABASE_URL), else "
            "DATABASES['default'].")

    def add_arguments(self, parser: Any) -> None:
        self.pgqw_options = add_pgqw_options(parser, "worker", helps={"tasks": TASKS_HELP})

    def handle(self, *args: Any, **options: Any) -> None:
        from pgqw import cli, config
        from pgqw.contrib.django.attempts import wrap_registry
        from pgqw.tasks import TaskDefinitionError, load

        modules, source = conf.task_modules(options.get("tasks"))
        if not modules:
            raise CommandError("no task modules: no installed app has a tasks module; pass --tasks or set "
                               "PGQW_TASKS")
        conninfo = conf.queue_conninfo()
        try:
            registry = load(modules)
        except TaskDefinitionError as exc:
            raise CommandError(str(exc)) from None
        wrap_registry(registry)
        self.stdout.write(f"pgqw_worker: task modules {', '.join(modules)} (from {source})")
        self.stdout.flush()
        # pgqw's settings come from the environment (pgqw.config): the queue's database is handed over there.
        os.environ[config.by_field("database_url").env] = conninfo
        code = cli.main(["worker", *pgqw_argv(self.pgqw_options, options, tasks=[",".join(modules)])])
        if code:
            sys.exit(code)  # pgqw printed why, in one line
