"""What the Django app reads from the project's settings: where the queue is, which task modules it runs,
and the queue's migrate with its failures said in one line.

The queue's database, first match wins:
  1. settings.PGQW_DATABASE_URL: a libpq URL or key=value conninfo
  2. the environment's PGQW_DATABASE_URL (or its alias DATABASE_URL), as for the pgqw command
  3. settings.DATABASES[settings.PGQW_DATABASE_ALIAS] (default "default"), which must be PostgreSQL: its
     NAME, USER, PASSWORD, HOST and PORT, and those OPTIONS that are libpq keywords (sslmode, options,
     application_name, service, ...). The others (isolation_level, assume_role, pool,
     server_side_binding, a driver's cursor_factory) are Django's or its driver's and are left out.

Task modules, first match wins: --tasks; settings.PGQW_TASKS (a list, or a comma-separated text); the
environment's PGQW_TASKS; else the `tasks` module of every installed app that has one.

The queue's own connections are psycopg 3 (a pgqw dependency) whichever driver Django uses, psycopg 3 or
psycopg2: only the parameters are shared, never a connection. Every failure is a CommandError, which
manage.py prints as one line, also when it happens inside `manage.py migrate`.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg
from django.core.management.base import CommandError
from psycopg.conninfo import make_conninfo

from pgqw.migrate import MigrateResult, MigrationError

APP_NAME = "pgqw.contrib.django"
APP_LABEL = "pgqw"
AUTODISCOVERED = "the tasks module of each installed app"


def _libpq_keywords() -> frozenset[str]:
    return frozenset(o.keyword.decode() for o in psycopg.pq.Conninfo.get_defaults())


def conninfo_from_settings(settings_dict: Mapping[str, Any], alias: str = "default") -> str:
    """A libpq conninfo for one entry of DATABASES (as Django's PostgreSQL backend reads it)."""
    options = dict(settings_dict.get("OPTIONS") or {})
    name = settings_dict.get("NAME")
    if not name and not options.get("service"):
        raise CommandError(f"DATABASES[{alias!r}] has no NAME (nor OPTIONS['service']): "
                           "the queue cannot tell which database to use")
    keywords = _libpq_keywords()
    params: dict[str, str] = {k: str(v) for k, v in options.items() if k in keywords and v is not None}
    for setting, keyword in (("NAME", "dbname"), ("USER", "user"), ("PASSWORD", "password"),
                             ("HOST", "host"), ("PORT", "port")):
        value = settings_dict.get(setting)
        if value not in (None, ""):
            params[keyword] = str(value)
    return make_conninfo(**params)


def _setting(name: str, default: Any = None) -> Any:
    from django.conf import settings

    return getattr(settings, name, default)


def queue_alias() -> str:
    """The DATABASES entry the queue lives in when no URL names its database."""
    alias = _setting("PGQW_DATABASE_ALIAS", "default")
    if not isinstance(alias, str) or not alias:
        raise CommandError(f"PGQW_DATABASE_ALIAS must name an entry of DATABASES, got {alias!r}")
    return alias


def database_url_override() -> str | None:
    """settings.PGQW_DATABASE_URL, else the environment's (pgqw.config); None when neither is set."""
    url = _setting("PGQW_DATABASE_URL")
    if url is not None and not isinstance(url, str):
        raise CommandError(f"PGQW_DATABASE_URL must be a text (a libpq URL or conninfo), got {type(url).__name__}")
    from pgqw import config

    return url or config.read("database_url") or None


def queue_conninfo(connection: Any = None) -> str:
    """The conninfo of the queue's database (see the module's docstring). connection: the Django
    connection whose settings to use instead of DATABASES[queue_alias()]'s (a migration's, whose NAME is
    the test database's while Django's test runner creates one)."""
    url = database_url_override()
    if url:
        return url
    if connection is None:
        from django.db import connections
        from django.utils.connection import ConnectionDoesNotExist

        alias = queue_alias()
        try:
            connection = connections[alias]
        except ConnectionDoesNotExist:
            raise CommandError(f"DATABASES has no {alias!r} entry (PGQW_DATABASE_ALIAS) and neither "
                               "PGQW_DATABASE_URL nor DATABASE_URL is set: the queue has no database") from None
    if connection.vendor != "postgresql":
        engine = connection.settings_dict.get("ENGINE") or "none"
        raise CommandError(f"DATABASES[{connection.alias!r}] is not PostgreSQL (ENGINE {engine}): point it at "
                           "PostgreSQL, or name the queue's database in PGQW_DATABASE_URL or DATABASE_URL")
    return conninfo_from_settings(connection.settings_dict, connection.alias)


def task_modules(given: Sequence[str] | None = None) -> tuple[tuple[str, ...], str]:
    """The task modules to load, and where they came from (see the module's docstring). The autodiscovered
    list may be empty; the others never are."""
    from pgqw.tasks import parse_modules

    if given:
        modules = parse_modules(given)
        if not modules:
            raise CommandError("--tasks must name at least one module")
        return modules, "--tasks"
    setting = _setting("PGQW_TASKS")
    if setting:
        if not (isinstance(setting, str) or (isinstance(setting, (list, tuple))
                                             and all(isinstance(m, str) for m in setting))):
            raise CommandError(f"PGQW_TASKS must be a list of module paths or a comma-separated text, got {setting!r}")
        modules = parse_modules(setting)
        if modules:
            return modules, "settings.PGQW_TASKS"
    from pgqw import config

    modules = parse_modules(config.read("task_modules", ()))
    if modules:
        return modules, "the environment's PGQW_TASKS"
    from django.apps import apps
    from django.utils.module_loading import module_has_submodule

    found = tuple(f"{app.name}.tasks" for app in apps.get_app_configs()
                  if app.name != APP_NAME and module_has_submodule(app.module, "tasks"))
    return found, AUTODISCOVERED


def create_roles() -> bool:
    """Whether migrate makes the pgqw_api, pgqw_worker and pgqw_admin roles: settings.PGQW_CREATE_ROLES,
    else the environment's PGQW_CREATE_ROLES (default: yes)."""
    value = _setting("PGQW_CREATE_ROLES")
    if value is not None:
        if not isinstance(value, bool):
            raise CommandError(f"PGQW_CREATE_ROLES must be True or False, got {value!r}")
        return value
    from pgqw import config

    try:
        return config.load().create_roles
    except config.ConfigError as exc:
        raise CommandError(str(exc)) from None


def database_error(exc: psycopg.Error) -> CommandError:
    """A psycopg error as the one line the pgqw command prints for it."""
    if isinstance(exc, psycopg.OperationalError):
        text = str(exc).strip()
        return CommandError("cannot reach the queue's database: "
                            + (text.splitlines()[0] if text else type(exc).__name__))
    return CommandError(f"database error {exc.sqlstate}: {exc.diag.message_primary or exc}")


def migrate_queue(conninfo: str, *, log: Callable[[str], None] = lambda _m: None,
                  roles: bool | None = None) -> MigrateResult:
    """pgqw's migrate (pgqw.migrate.migrate) on its own psycopg 3 connection: new migrations, every function,
    roles (unless roles is False, or create_roles() says no) and grants."""
    from pgqw.migrate import migrate

    try:
        return migrate(conninfo, log=log, create_roles=create_roles() if roles is None else roles)
    except MigrationError as exc:
        raise CommandError(f"pgqw migrate: {exc}") from None
    except psycopg.Error as exc:
        raise database_error(exc) from None
