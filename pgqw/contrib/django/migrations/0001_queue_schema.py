"""Installs the queue: pgqw's own migrate (its schema, migrations, functions, roles and grants).

pgqw's migrate runs on a psycopg 3 connection of its own, whichever driver Django uses, with the parameters
of the database this migration is applied to (or PGQW_DATABASE_URL / DATABASE_URL: pgqw.contrib.django.conf).
It commits file by file, outside Django's migration transaction, so this migration is not atomic. It runs
only for the queue's database (PGQW_DATABASE_ALIAS, default "default"); on any other it does nothing.
Reversing it does nothing either: the queue's schema holds jobs, and dropping it is a DBA's decision.
"""
from __future__ import annotations

from typing import Any

from django.db import migrations


def install_queue(apps: Any, schema_editor: Any) -> None:
    from pgqw.contrib.django import conf

    if schema_editor.connection.alias != conf.queue_alias():
        return
    conf.migrate_queue(conf.queue_conninfo(schema_editor.connection))


class Migration(migrations.Migration):
    atomic = False
    initial = True
    dependencies = ()
    operations = (migrations.RunPython(install_queue, migrations.RunPython.noop),)
