"""pgqw's errors, in one place: the ones the pgqw command reports as one line (pgqw.cli catches
them), and the project's SQLSTATEs (CODES) with the exceptions the client raises for them
(PgqwError and its subclasses, from_psycopg). Library code: no Flask here."""
from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import psycopg

from . import schema

DISTRIBUTION = "pg-queue-worker"


class UsageError(RuntimeError):
    """A command was asked for something it cannot do; the message says what."""


class MissingExtra(UsageError):
    """Something needs an optional part of the package (an extra of pyproject.toml) that is not installed.

    `subject` says what needs it; "{command}" in it stands for the command that ran (pgqw.cli fills it
    in, as in "pgqw api needs the api extra: pip install 'pg-queue-worker[api]'")."""

    def __init__(self, extra: str, subject: str = "{command}", otherwise: str = "") -> None:
        self.extra, self.subject, self.otherwise = extra, subject, otherwise
        super().__init__(self.line())

    def line(self, command: str = "this command") -> str:
        text = (f"{self.subject.format(command=command)} needs the {self.extra} extra: "
                f"pip install '{DISTRIBUTION}[{self.extra}]'")
        return f"{text} ({self.otherwise})" if self.otherwise else text


def missing_from_extra(extra: str) -> list[str]:
    """The distributions the installed package's metadata lists for the extra that are not installed
    (pyproject.toml is the one declaration of the extras). Without the package's metadata (a source
    tree on the path, not installed) nothing is known missing."""
    try:
        requires = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    missing: list[str] = []
    for line in requires:
        found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?[^;]*;\s*(.*)$", line)
        if found is None or not re.search(rf"""extra\s*==\s*["']{re.escape(extra)}["']""", found.group(3)):
            continue
        name, extras = found.group(1), found.group(2)
        if re.sub(r"[-_.]+", "-", name).lower() == DISTRIBUTION:  # all = pg-queue-worker[api,embedded,demo]
            missing += [m for e in (extras or "").split(",") if e.strip() for m in missing_from_extra(e.strip())]
            continue
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    return missing


def require_extra(extra: str, subject: str = "{command}", otherwise: str = "") -> None:
    """Raises MissingExtra unless every distribution of the extra is installed."""
    if missing_from_extra(extra):
        raise MissingExtra(extra, subject, otherwise)


DEMO_MODULE = "pgqw.demo"


def require_task_extras(modules: tuple[str, ...] | list[str], otherwise: str) -> None:
    """Raises MissingExtra when the task modules name the demo's (its flyer needs reportlab) and the
    demo extra is not installed: a worker would start, then fail every flyer job."""
    if DEMO_MODULE in modules:
        require_extra("demo", "{command} running the demo's tasks (pgqw.demo)", otherwise)


# What a database without the queue (never migrated, or migrated into another schema) answers.
NO_QUEUE = (psycopg.errors.UndefinedFunction, psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName)


def no_queue_message(exc: psycopg.Error) -> str:
    return (f"the database has no queue in schema {schema.name()} ({exc.diag.message_primary}); "
            "run `pgqw migrate` first (or set PGQW_SCHEMA to the schema it was migrated into)")


# ---- The project's SQLSTATEs and the exceptions pgqw raises for them ----
#
# db/functions/*.sql raise these codes; CODES below is their one declaration (the API's error map in
# app/errors.py and the client's exceptions are made from it, docs/errors.md's table is checked against
# it by tests/test_errors.py). Match on the class or on `.sqlstate`, never on message text.


class PgqwError(Exception):
    """An error a stored function raised with one of the project's SQLSTATEs (CODES).

    `.sqlstate` is the code; `.message`, `.detail` and `.hint` are the database's message parts
    (detail and hint None when it gave none). from_psycopg() makes one from a driver's error and keeps
    that error as __cause__."""

    def __init__(self, message: str, *, sqlstate: str | None = None, detail: str | None = None,
                 hint: str | None = None) -> None:
        super().__init__(message)
        self.message, self.sqlstate, self.detail, self.hint = message, sqlstate, detail, hint

    @classmethod
    def _from_database(cls, message: str, *, sqlstate: str, detail: str | None, hint: str | None,
                       column: str | None) -> PgqwError:
        return cls(message, sqlstate=sqlstate, detail=detail, hint=hint)


class JobNotFound(PgqwError, LookupError):
    """No job has this id (QN404). `.job_id` is the id when the caller knew it, else None."""

    def __init__(self, job_id: Any = None, message: str | None = None, *, sqlstate: str | None = "QN404",
                 detail: str | None = None, hint: str | None = None) -> None:
        super().__init__(message or f"no job {job_id}", sqlstate=sqlstate, detail=detail, hint=hint)
        self.job_id = job_id

    @classmethod
    def _from_database(cls, message: str, *, sqlstate: str, detail: str | None, hint: str | None,
                       column: str | None) -> PgqwError:
        return cls(None, message, sqlstate=sqlstate, detail=detail, hint=hint)


class LeaseLost(PgqwError):
    """The lease token does not hold the job (QL409): the attempt lost its lease, or the job finished
    otherwise; the late result is ignored. `.table_name` is "job_cancel_requests" for a success
    reported for a job asked to cancel."""

    table_name: str | None = None


class IdempotencyConflict(PgqwError):
    """The idempotency key was already used for a different job (QI409)."""


class InvalidArgument(PgqwError, ValueError):
    """An argument is null, empty, negative, too long or out of range (QV400); the message names it.
    `.argument` is the argument's name when the database said which (its `column` field), else None."""

    argument: str | None = None

    @classmethod
    def _from_database(cls, message: str, *, sqlstate: str, detail: str | None, hint: str | None,
                       column: str | None) -> PgqwError:
        error = cls(message, sqlstate=sqlstate, detail=detail, hint=hint)
        error.argument = column
        return error


class UnknownTaskType(PgqwError):
    """The task type is not registered (QT422); the message says how to register it."""


class UnknownQueue(PgqwError, LookupError):
    """The queue is not known and the call did not ask to create it (QU404)."""


class JobStateConflict(PgqwError):
    """The job is not in the state the operation needs (QS409): cancelling a finished job, retrying one
    that is not dead."""


@dataclass(frozen=True)
class Code:
    """One of the project's SQLSTATEs: the HTTP status and error code the API answers with (None: not
    an API error), what it means, and the exception from_psycopg() makes of it."""

    sqlstate: str
    status: int | None
    api_code: str | None
    meaning: str
    error: type[PgqwError] = PgqwError


CODES: dict[str, Code] = {c.sqlstate: c for c in (
    Code("QV400", 400, "invalid_argument", "an argument is null, empty, negative, too long or out of range",
         InvalidArgument),
    Code("QV413", 413, "payload_too_large", "the payload is larger than queue_settings.max_payload_bytes"),
    Code("QN404", 404, "job_not_found", "no job has this id", JobNotFound),
    Code("QI409", 409, "idempotency_key_reused", "the idempotency key was already used for a different job",
         IdempotencyConflict),
    Code("QI422", 422, "idempotency_key_reserved", "the idempotency key has the stored form of another kind of key"),
    Code("QS409", 409, "job_not_in_state", "the job is not in the state the operation needs", JobStateConflict),
    Code("QL409", 409, "lease_lost", "the lease token does not hold the job", LeaseLost),
    Code("QC400", 400, "invalid_cron", "a schedule's cron expression does not parse"),
    Code("QR404", 404, "schedule_not_found", "no schedule has this name"),
    Code("QT422", 422, "unknown_task_type", "the task type is not registered", UnknownTaskType),
    Code("QU404", 404, "queue_not_found", "the queue is not known", UnknownQueue),
    Code("QM409", None, None, "pgqw migrate cannot move an install out of public while a job holds a live lease"),
)}


def sqlstate_of(exc: BaseException) -> str | None:
    """The SQLSTATE of a driver's error: psycopg's and asyncpg's `.sqlstate`, psycopg2's `.pgcode`,
    looking through SQLAlchemy's (`.orig`) and Django's (`__cause__`) wrappers."""
    return _driver_error(exc)[1]


def _driver_error(exc: BaseException) -> tuple[BaseException, str | None]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        for attribute in ("sqlstate", "pgcode"):
            value = getattr(current, attribute, None)
            if isinstance(value, str) and value:
                return current, value
        orig = getattr(current, "orig", None)
        current = orig if isinstance(orig, BaseException) else current.__cause__
    return exc, None


def _diag(exc: BaseException, name: str) -> str | None:
    diag = getattr(exc, "diag", None)  # psycopg, psycopg2
    value = getattr(diag, name, None) if diag is not None else None
    if value is None:  # asyncpg: the fields are attributes of the error
        value = getattr(exc, {"message_primary": "message", "message_detail": "detail", "message_hint": "hint",
                              "column_name": "column_name", "table_name": "table_name"}[name], None)
    return value if isinstance(value, str) else None


def from_psycopg(exc: BaseException) -> PgqwError | None:
    """The PgqwError for a database error with one of the project's SQLSTATEs, else None. Takes psycopg's
    errors, and psycopg2's and asyncpg's and their SQLAlchemy and Django wrappers; the error given is
    the result's __cause__. Raise it with `raise error from exc` (which sets the same)."""
    driver, sqlstate = _driver_error(exc)
    code = CODES.get(sqlstate or "")
    if code is None or sqlstate is None:
        return None
    error = code.error._from_database(
        _diag(driver, "message_primary") or str(driver), sqlstate=sqlstate, detail=_diag(driver, "message_detail"),
        hint=_diag(driver, "message_hint"), column=_diag(driver, "column_name"))
    if isinstance(error, LeaseLost):
        error.table_name = _diag(driver, "table_name")
    error.__cause__ = exc
    return error
