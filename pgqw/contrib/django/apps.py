"""The app's config: the label `pgqw`, and the queue brought up to date by every `manage.py migrate`.

The Django migration pgqw.0001_queue_schema installs the queue the first time; a migration runs once, but
a newer pgqw release brings new queue migrations and changed functions, so after each later `manage.py
migrate` of the queue's database (post_migrate, which `manage.py flush` also sends: that one is left
alone) pgqw's migrate runs again. It applies what is new and re-applies every function; nothing new, it
changes nothing.
"""
from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate

from . import conf

QUEUE_MIGRATION = "0001_queue_schema"


class PgqwConfig(AppConfig):
    name = conf.APP_NAME
    label = conf.APP_LABEL
    verbose_name = "pg-queue-worker"

    def ready(self) -> None:
        post_migrate.connect(migrate_queue_after_migrate, sender=self,
                             dispatch_uid="pgqw.contrib.django.migrate_queue_after_migrate")


def migrate_queue_after_migrate(sender: AppConfig, using: str, verbosity: int = 1, plan: Any = None,
                                stdout: Any = None, **_kwargs: Any) -> None:
    if plan is None:  # manage.py flush, not migrate
        return
    if using != conf.queue_alias():  # another of DATABASES: the queue is not its business
        return
    if any(migration.app_label == conf.APP_LABEL for migration, _backwards in plan):
        return  # this run applied (or unapplied) pgqw's own migration: nothing more to do
    from django.db import connections
    from django.db.migrations.recorder import MigrationRecorder

    if (conf.APP_LABEL, QUEUE_MIGRATION) not in MigrationRecorder(connections[using]).applied_migrations():
        return  # the queue is not installed in this database (yet, or any more)
    result = conf.migrate_queue(conf.queue_conninfo(connections[using]))
    if stdout is not None and verbosity >= 1:
        for name in result.applied:
            stdout.write(f"  pgqw: applied {name}")
