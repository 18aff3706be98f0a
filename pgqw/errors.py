"""pgqw's errors, in one place: the ones the pgqw command reports as one line (pgqw.cli catches
them), and the project's SQLSTATEs (CODES) with the exceptions the client raises for them
(PgqwError and its subclasses, from_psycopg). Library code: no Flask here."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
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


def require_task_extras(modules: tuple[str, ...] | list[str], otherwise: str) -> None:
    """Raises MissingExtra when a task module declares an extra its tasks need (its EXTRAS: {extra: what
    needs it}, as the demo's tasks need reportlab) and that extra is not installed: a worker would
    start, then fail every such job. A module that cannot be imported is left to the loader to report."""
    import importlib

    for name in modules:
        try:
            module = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - pgqw.tasks.load says why, with the module's name
            continue
        for extra, what in getattr(module, "EXTRAS", {}).items():
            require_extra(extra, f"{{command}} running {what}", otherwise)


# What a database without the queue (never migrated, or migrated into another schema) answers.
NO_QUEUE = (psycopg.errors.UndefinedFunction, psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName)


def no_queue_message(exc: psycopg.Error) -> str:
    return (f"the database has no queue in schema {schema.name()} ({exc.diag.message_primary}); "
            "run `pgqw migrate` first (or set PGQW_SCHEMA to the schema it was migrated into)")


# ---- What a handler raises to put its job off ----

INTEGER_MAX = 2**31 - 1  # the most milliseconds snooze_job's p_delay_ms (an integer) takes


class Snooze(Exception):
    """Raised by a handler: put this job off and run it again later, without spending an attempt.

        raise Snooze(30_000)                           # 30 s from now (milliseconds)
        raise Snooze(delay_ms=30_000)                  # the same
        raise Snooze(timedelta(minutes=5))
        raise Snooze(until=datetime(2030, 1, 1, tzinfo=timezone.utc))

    The worker records it with snooze_job: the attempt ends `snoozed`, the job is pending again with
    run_at at that time (a delay counted on the database's clock; a time already past: now), and it
    does not count against max_attempts nor lengthen a later failure's backoff. Past the job's snooze
    limit (task_types.max_snoozes, else queue_settings.max_snoozes) the job ends dead instead.
    `.delay_ms` or `.until` is set, the other None."""

    def __init__(self, delay: int | timedelta | None = None, *, until: datetime | None = None,
                 delay_ms: int | None = None) -> None:
        if delay_ms is not None:  # Snooze(delay_ms=30_000): the delay by its name
            if delay is not None:
                raise TypeError("Snooze takes a delay or delay_ms=, not both")
            if not isinstance(delay_ms, int) or isinstance(delay_ms, bool):
                raise TypeError(f"Snooze(delay_ms=) takes whole milliseconds, got {delay_ms!r}")
            delay = delay_ms
        if (delay is None) == (until is None):
            raise TypeError("Snooze takes a delay (milliseconds or a timedelta) or until=, exactly one")
        self.delay_ms: int | None = None
        self.until: datetime | None = None
        if until is not None:
            if not isinstance(until, datetime) or until.tzinfo is None or until.utcoffset() is None:
                raise TypeError(f"Snooze(until=) takes a timezone-aware datetime, got {until!r}")
            self.until = until
            super().__init__(f"snoozed until {until.isoformat()}")
            return
        if isinstance(delay, timedelta):
            ms = round(delay.total_seconds() * 1000)
        elif isinstance(delay, int) and not isinstance(delay, bool):
            ms = delay
        else:
            raise TypeError(f"Snooze takes a delay in whole milliseconds or a timedelta, got {delay!r}")
        if not 0 <= ms <= INTEGER_MAX:
            raise ValueError(f"Snooze's delay must be between 0 and {INTEGER_MAX} ms (about 24 days; for later, "
                             f"give until=), got {ms}")
        self.delay_ms = ms
        super().__init__(f"snoozed for {ms} ms")


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
    otherwise; the late result is ignored. `.table_name` is the table the refusal names, if any."""

    table_name: str | None = None


class CancelRequested(LeaseLost):
    """mark_succeeded refused a success because the job was asked to cancel while the attempt ran
    (QK409): nothing was stored, and the attempt ends cancelled (mark_cancelled). A LeaseLost too:
    the result is not the attempt's to give. `.table_name` is "job_cancel_requests"."""


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


class InvalidDependency(PgqwError, ValueError):
    """A dependency that cannot be (QW422): a parent that does not exist, a job naming itself or a later
    element of the same call, more than 1000 parents."""


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
    Code("QK409", 409, "cancel_requested", "the job was asked to cancel while the attempt ran: its success is refused",
         CancelRequested),
    Code("QC400", 400, "invalid_cron", "a schedule's cron expression does not parse"),
    Code("QR404", 404, "schedule_not_found", "no schedule has this name"),
    Code("QT422", 422, "unknown_task_type", "the task type is not registered", UnknownTaskType),
    Code("QU404", 404, "queue_not_found", "the queue is not known", UnknownQueue),
    Code("QW422", 422, "invalid_dependency", "a dependency that cannot be: an unknown parent, or a cycle",
         InvalidDependency),
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


# The SQLSTATE of each exception class that stands for one code (PgqwError itself stands for the rest).
SQLSTATE_OF: dict[type[PgqwError], str] = {c.error: c.sqlstate for c in CODES.values() if c.error is not PgqwError}


def is_error(exc: BaseException, *kinds: type[PgqwError]) -> bool:
    """Whether a database error (a driver's, through its wrappers, or a PgqwError) has the SQLSTATE of one
    of these classes: its own code exactly, so a CancelRequested (QK409) is not a LeaseLost (QL409) here.
    PgqwError itself, which stands for no one code, matches nothing."""
    state = exc.sqlstate if isinstance(exc, PgqwError) else sqlstate_of(exc)
    return state is not None and any(SQLSTATE_OF.get(kind) == state for kind in kinds)


def cancel_requested(exc: BaseException) -> bool:
    """Whether a database error is mark_succeeded's refusal of a job a person asked to cancel (QK409):
    the attempt then ends cancelled (mark_cancelled) instead of failing."""
    return is_error(exc, CancelRequested)


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
