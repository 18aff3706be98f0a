"""`manage.py pgqw_migrate`: `pgqw migrate` on the queue's database, with the project's task types.

pgqw's own migrate (pgqw.migrate: new migrations, every function, roles and grants), then the task types of
the project's task modules registered as a worker's start registers them, so their jobs are accepted before
any worker runs. The options are `pgqw migrate`'s; the database and the task modules are found as for
pgqw_worker (pgqw.contrib.django.conf). `manage.py migrate` applies the same migrations; this command also
registers the task types, so a deploy may run it after `manage.py migrate`.
"""
from __future__ import annotations

from typing import Any

import psycopg
from django.core.management.base import BaseCommand, CommandError

from pgqw.contrib.django import conf
from pgqw.contrib.django.options import add_pgqw_options

TASKS_HELP = ("then register the task types (and code schedules) of these modules, comma-separated or repeated "
              "(default: settings.PGQW_TASKS, else the environment's PGQW_TASKS, else the tasks module of each "
              "installed app)")


class Command(BaseCommand):
    help = ("Apply the queue's migrations (pgqw migrate) to the queue's database, then register the project's "
            "task types.")

    def add_arguments(self, parser: Any) -> None:
        add_pgqw_options(parser, "migrate", helps={"tasks": TASKS_HELP})

    def handle(self, *args: Any, **options: Any) -> None:
        from pgqw.cli import register_tasks
        from pgqw.errors import UsageError

        modules, _source = conf.task_modules(options.get("tasks"))
        conninfo = conf.queue_conninfo()
        result = conf.migrate_queue(conninfo, log=self.stdout.write,
                                    roles=False if options.get("no_roles") else None)
        if not result.applied:
            self.stdout.write(f"migrations up to date ({len(result.skipped)} applied before)")
        if not modules:
            self.stdout.write("no task modules to register (no installed app has a tasks module): a worker "
                              "registers its task types when it starts")
            return
        try:
            register_tasks(conninfo, modules)  # prints what it registered
        except UsageError as exc:
            raise CommandError(str(exc)) from None
        except psycopg.Error as exc:
            raise conf.database_error(exc) from None
