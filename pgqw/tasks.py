"""Task types, defined in your own code.

    from pydantic import BaseModel
    from pgqw.tasks import Context, Retry, task

    class Welcome(BaseModel):
        email: str

    @task("send_welcome", queue="emails", max_attempts=5, lease_ms=30_000, timeout_ms=120_000,
          retry=Retry(base_ms=1_000, max_delay_ms=60_000, permanent=(LookupError,)))
    def send_welcome(payload: Welcome, ctx: Context) -> dict:
        ...
        return {"sent": True}          # the job's result (JSON), or File(data, content_type)

A task's payload model is the type of the handler's first parameter (or `model=`): any type pydantic
can validate whose JSON Schema describes an object (a BaseModel, a TypedDict, a dataclass). Its JSON
Schema is what the rest of the system sees: workers register it in the task_types table, the API
validates requests against it there, and the OpenAPI document is made from it.

`pgqw worker --tasks mypkg.tasks` (or PGQW_TASKS) imports the modules, which register their tasks in
`pgqw.tasks.registry`; the worker registers them in the database and claims only jobs of those types.
A definition that cannot work (a duplicate name, a model without a JSON Schema, a handler that is not
callable) raises TaskDefinitionError when the module is imported, so the worker stops at start.

A handler returns its result (None for none) or raises: PermanentError, a ValidationError of its
payload, or an exception listed in its Retry.permanent end the job at once (dead); Snooze puts the job
off without spending an attempt; anything else is a transient failure, retried with backoff while
attempts are left. `async def` handlers run on the
worker's event loop; plain ones on its threads. Handlers must be idempotent: a job can run more
than once (a worker dies mid-work, or loses its lease while it still runs); its result is stored
with its success, once.

timeout_ms bounds each attempt (a job's own timeout_ms wins, a DBA's task_types.timeout_ms over the
code's): the claim gives the attempt a deadline (`ctx.deadline`), the database extends its lease no
further, and the attempt ends `timed_out`, a failure retried with backoff. An `async def` handler is
cancelled at its deadline; a plain one's thread cannot be stopped, so the worker gives its slot back and
counts the thread as leaked (its late result is refused).

The parts of this module's API defined beside it, all importable from here: pgqw/task_options.py (Retry,
Schedule and the exceptions), pgqw/task_context.py (Context and progress values), pgqw/results.py (File).
"""
from __future__ import annotations

import importlib
import inspect
import re
import sys
import typing
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, Mapping, Sequence, TypeVar

import pydantic

from . import client
from .client import EnqueueOptions
from .errors import Snooze as Snooze  # re-exported: a handler raises it to put its job off
from .results import File as File  # re-exported: a handler returns one
from .results import result_row as result_row  # re-exported: the worker and pgqw.testing store results with it
from .task_context import PROGRESS_MAX_BYTES as PROGRESS_MAX_BYTES  # re-exported, as each name below
from .task_context import Context as Context
from .task_context import parent_value as parent_value
from .task_context import progress_json as progress_json
from .task_options import PermanentError as PermanentError
from .task_options import Retry as Retry
from .task_options import Schedule as Schedule
from .task_options import TaskDefinitionError as TaskDefinitionError
from .task_options import TransientError as TransientError

if TYPE_CHECKING:
    from typing import Unpack

    import psycopg

    from . import db

P = TypeVar("P")
NAME_MAX = 100
# A schedule's name goes into URLs and idempotency keys (the schedules_name_charset constraint's rule).
SCHEDULE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")
CATCH_UP = ("latest", "all", "none")



RETAIN_MAX = timedelta(days=36000)  # task_types_retain_range: 100 years, as PostgreSQL counts them (30-day months)


def _ms(age: timedelta | None) -> int | None:
    return None if age is None else age // timedelta(milliseconds=1)


def _settings_check(name: str, value: int | None, what: str, low: int, high: int | None = None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"{low} or more"
        raise TaskDefinitionError(f"task {name!r}: {what} must be a whole number {bound}, got {value!r}")


@dataclass
class Task(Generic[P]):
    """One task type: its handler, payload model and defaults. Made by `@task`."""

    name: str
    fn: Callable[..., Any]
    model: Any
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    retry: Retry = field(default_factory=Retry)
    lease_ms: int | None = None
    description: str | None = None
    schedules: tuple[Schedule, ...] = ()
    timeout_ms: int | None = None   # each attempt's timeout (a job's own wins, then a DBA's); None: none
    expire_after_ms: int | None = None  # a job not started this long after it may: expired (a job's own wins)
    max_snoozes: int | None = None      # how many times a job may snooze (a DBA's wins; None: queue_settings')
    retain_succeeded: timedelta | None = None  # how long succeeded jobs are kept (None: queue_settings')
    retain_failed: timedelta | None = None     # the same for dead, cancelled and expired ones
    # Each job's serial key and concurrency key, when the enqueue call gives none: a text, or a function
    # of the payload as stored (its JSON object, a dict) answering a text or None (no key), called at enqueue.
    serial_key: str | Callable[[dict[str, Any]], str | None] | None = None
    concurrency_key: str | Callable[[dict[str, Any]], str | None] | None = None
    adapter: pydantic.TypeAdapter = field(init=False, repr=False)
    payload_schema: dict[str, Any] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        name = self.name
        if not isinstance(name, str) or not name.strip() or len(name) > NAME_MAX:
            raise TaskDefinitionError(f"task name must be a non-blank text of at most {NAME_MAX} characters, "
                                      f"got {name!r}")
        if not callable(self.fn):
            raise TaskDefinitionError(f"task {name!r}: the handler {self.fn!r} is not callable")
        if self.queue is not None and (not isinstance(self.queue, str) or not self.queue.strip()
                                       or len(self.queue) > 100):
            raise TaskDefinitionError(f"task {name!r}: queue must be a non-blank text of at most 100 characters")
        _settings_check(name, self.priority, "priority", -2**31, 2**31 - 1)
        _settings_check(name, self.max_attempts, "max_attempts", 1, 1000)
        _settings_check(name, self.lease_ms, "lease_ms", 1, 2**31 - 1)
        _settings_check(name, self.timeout_ms, "timeout_ms", 1, 2**31 - 1)
        _settings_check(name, self.expire_after_ms, "expire_after_ms", 1, 2**31 - 1)
        _settings_check(name, self.max_snoozes, "max_snoozes", 0, 1000)
        for what, age in (("retain_succeeded", self.retain_succeeded), ("retain_failed", self.retain_failed)):
            if age is not None and (not isinstance(age, timedelta) or not timedelta(0) <= age <= RETAIN_MAX):
                raise TaskDefinitionError(f"task {name!r}: {what} must be a timedelta from 0 to 100 years, "
                                          f"got {age!r}")
        for what, key in (("serial_key", self.serial_key), ("concurrency_key", self.concurrency_key)):
            if key is not None and not callable(key) and (not isinstance(key, str) or not key.strip()):
                raise TaskDefinitionError(f"task {name!r}: {what} must be a non-blank text or a function of the "
                                          f"payload, got {key!r}")
        _settings_check(name, self.retry.base_ms, "retry base_ms", 0, 2**31 - 1)
        _settings_check(name, self.retry.max_delay_ms, "retry max_delay_ms", 0, 2**31 - 1)
        _settings_check(name, self.retry.max_jitter_ms, "retry max_jitter_ms", 0, 2**31 - 1)
        for exc in self.retry.permanent:
            if not (isinstance(exc, type) and issubclass(exc, BaseException)):
                raise TaskDefinitionError(f"task {name!r}: Retry.permanent lists {exc!r}, not an exception class")
        try:
            self.adapter = pydantic.TypeAdapter(self.model)
            schema = self.adapter.json_schema()
        except Exception as exc:  # noqa: BLE001 - pydantic raises several kinds; each is a bad model
            raise TaskDefinitionError(f"task {name!r}: payload model {self.model!r} has no JSON Schema: "
                                      f"{str(exc).splitlines()[0]}") from None
        if schema.get("type") != "object":
            raise TaskDefinitionError(f"task {name!r}: payload model {self.model!r} must describe a JSON "
                                      f"object, its schema has type {schema.get('type')!r}")
        schema.setdefault("title", name)
        from .payload_schema import PayloadSchemaError, check

        try:
            check(schema)  # what the database and the API refuse, refused where the task is defined
        except PayloadSchemaError as exc:
            raise TaskDefinitionError(f"task {name!r}: payload schema: {exc}") from None
        self.payload_schema = schema
        self._check_schedules()

    def _check_schedules(self) -> None:
        from croniter import croniter

        name = self.name
        seen: set[str] = set()
        for sch in self.schedules:
            if not isinstance(sch, Schedule):
                raise TaskDefinitionError(f"task {name!r}: schedules must be pgqw.tasks.Schedule, got {sch!r}")
            what = f"task {name!r}: schedule {sch.name or name!r}"
            if sch.name is None and len(self.schedules) > 1:
                raise TaskDefinitionError(f"task {name!r} has several schedules: give each a name")
            if not SCHEDULE_NAME.fullmatch(sch.name or name):
                raise TaskDefinitionError(f"{what}: a schedule name is 1 to 100 letters, digits, _ . : or -, starting "
                                          "with a letter or digit" + ("" if sch.name else " (pass name=)"))
            if (sch.name or name) in seen:
                raise TaskDefinitionError(f"{what} is defined twice")
            seen.add(sch.name or name)
            if not isinstance(sch.cron, str) or not croniter.is_valid(sch.cron):
                raise TaskDefinitionError(f"{what}: the cron expression {sch.cron!r} does not parse")
            if sch.catch_up not in CATCH_UP:
                raise TaskDefinitionError(f"{what}: catch_up must be latest, all or none, got {sch.catch_up!r}")
            if sch.queue is not None and (not isinstance(sch.queue, str) or not sch.queue.strip()
                                          or len(sch.queue) > 100):
                raise TaskDefinitionError(f"{what}: queue must be a non-blank text of at most 100 characters")
            _settings_check(name, sch.priority, "schedule priority", -2**31, 2**31 - 1)
            try:
                self.dump({} if sch.payload is None else sch.payload)
            except pydantic.ValidationError as exc:
                raise TaskDefinitionError(f"{what}: {describe_invalid(exc)}") from None

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    def parse(self, payload: Any) -> P:
        """The payload validated into the model; raises pydantic.ValidationError."""
        return self.adapter.validate_python(payload)

    def dump(self, payload: Any) -> dict[str, Any]:
        """A payload (model instance or dict) as the JSON object stored in the job, validated."""
        return self.adapter.dump_python(self.parse(payload) if isinstance(payload, Mapping) else payload,
                                        mode="json")

    def is_permanent(self, exc: BaseException) -> bool:
        return isinstance(exc, (PermanentError, pydantic.ValidationError, *self.retry.permanent))

    def registration(self) -> dict[str, Any]:
        """The row register_task_types writes: the schema and the code's defaults."""
        return {
            "name": self.name, "payload_schema": self.payload_schema, "description": self.description,
            "queue": self.queue, "priority": self.priority, "max_attempts": self.max_attempts,
            "backoff_base_ms": self.retry.base_ms, "backoff_max_delay_ms": self.retry.max_delay_ms,
            "backoff_max_jitter_ms": self.retry.max_jitter_ms, "lease_ms": self.lease_ms,
            "timeout_ms": self.timeout_ms, "expire_after_ms": self.expire_after_ms, "max_snoozes": self.max_snoozes,
            "retain_succeeded_ms": _ms(self.retain_succeeded), "retain_failed_ms": _ms(self.retain_failed),
        }

    def schedule_registrations(self) -> list[dict[str, Any]]:
        """The rows register_schedules writes for this task's schedules."""
        return [{"name": sch.name or self.name, "task_type": self.name, "cron": sch.cron,
                 "payload": self.dump({} if sch.payload is None else sch.payload), "queue": sch.queue,
                 "priority": sch.priority, "catch_up": sch.catch_up} for sch in self.schedules]

    # Enqueueing, typed with the payload model (pgqw.client does the work; it knows a Task only as a
    # client.TaskLike, so it imports nothing of this module).
    def enqueue(self, conn: Any, payload: P | Mapping[str, Any], **options: Unpack[EnqueueOptions]) -> db.EnqueuedJob:
        """A job of this task in the caller's transaction, on any connection pgqw.client takes."""
        return client.enqueue(conn, self, payload, **options)

    async def enqueue_async(self, conn: Any, payload: P | Mapping[str, Any],
                            **options: Unpack[EnqueueOptions]) -> db.EnqueuedJob:
        """enqueue() on an async connection."""
        return await client.enqueue_async(conn, self, payload, **options)

    def defer(self, payload: P | Mapping[str, Any], *, conn: Any = None, using: client.Queue | None = None,
              **options: Unpack[EnqueueOptions]) -> db.EnqueuedJob:
        """A job of this task: in conn's transaction when given, else in a short transaction of its own
        through `using` (default: pgqw.Queue.default())."""
        if conn is not None:
            return client.enqueue(conn, self, payload, **options)
        return (using or client.Queue.default()).enqueue(self, payload, **options)

    async def defer_async(self, payload: P | Mapping[str, Any], *, conn: Any = None,
                          using: client.Queue | None = None, **options: Unpack[EnqueueOptions]) -> db.EnqueuedJob:
        """defer() on an async connection, or through the queue's AsyncConnectionPool."""
        if conn is not None:
            return await client.enqueue_async(conn, self, payload, **options)
        return await (using or client.Queue.default()).enqueue_async(self, payload, **options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def _payload_model(fn: Callable[..., Any], name: str) -> Any:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        raise TaskDefinitionError(f"task {name!r}: cannot read the handler's parameters") from None
    if not params:
        raise TaskDefinitionError(f"task {name!r}: the handler takes no payload parameter")
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:  # noqa: BLE001 - an unresolvable annotation
        raise TaskDefinitionError(f"task {name!r}: cannot resolve the handler's annotations: {exc}") from None
    model = hints.get(params[0].name)
    if model is None:
        raise TaskDefinitionError(f"task {name!r}: annotate the handler's first parameter with the payload "
                                  "model, or pass model=")
    return model


class Registry:
    """Task types by name. `pgqw.tasks.registry` is the one `pgqw worker --tasks` reads."""

    def __init__(self) -> None:
        self.tasks: dict[str, Task[Any]] = {}

    def add(self, t: Task[Any]) -> Task[Any]:
        known = self.tasks.get(t.name)
        if known is not None and _origin(known.fn) != _origin(t.fn):
            raise TaskDefinitionError(f"task {t.name!r} is defined twice: by {_origin(known.fn)} and by "
                                      f"{_origin(t.fn)}")
        for row in t.schedule_registrations():
            other = next((o for o in self.tasks.values() if o.name != t.name
                          and any(r["name"] == row["name"] for r in o.schedule_registrations())), None)
            if other is not None:
                raise TaskDefinitionError(f"schedule {row['name']!r} is defined by task {other.name!r} and by "
                                          f"task {t.name!r}")
        self.tasks[t.name] = t
        return t

    def task(self, name: str | None = None, *, model: Any = None, queue: str | None = None,
             priority: int | None = None, max_attempts: int | None = None, retry: Retry | None = None,
             lease_ms: int | None = None, description: str | None = None, schedule: str | Schedule | None = None,
             schedules: Sequence[Schedule] = (), timeout_ms: int | None = None,
             expire_after_ms: int | None = None, max_snoozes: int | None = None,
             retain_succeeded: timedelta | None = None, retain_failed: timedelta | None = None,
             serial_key: str | Callable[[dict[str, Any]], str | None] | None = None,
             concurrency_key: str | Callable[[dict[str, Any]], str | None] | None = None,
             ) -> Callable[[Callable[..., Any]], Task[Any]]:
        """Decorator: registers the function as the task `name` (default: the function's name).
        schedule="*/5 * * * *" (or a Schedule), or schedules=[Schedule(...), ...]: enqueue it periodically.
        timeout_ms: each attempt's timeout (None: none, unless a DBA sets task_types.timeout_ms).
        expire_after_ms: a job not started this long after it may start ends expired (a job's own wins).
        max_snoozes: how many times one job may snooze. retain_succeeded, retain_failed: how long this type's
        succeeded jobs, and its dead, cancelled and expired ones, are kept (None: queue_settings').
        A DBA's task_types column wins over each of these. serial_key, concurrency_key: each job's keys
        when its enqueue gives none, a text or a function of the payload (a dict) such as
        `lambda payload: payload["customer"]`: one job of a serial key runs at a time, in enqueue order;
        a queue's key limit (set_queue_key_limit) counts running jobs per concurrency key."""
        if callable(name):
            raise TaskDefinitionError("use @task(...) with parentheses, e.g. @task('send_welcome')")

        def register(fn: Callable[..., Any]) -> Task[Any]:
            task_name = name if name is not None else (getattr(fn, "__name__", None) or "")
            if not callable(fn):
                raise TaskDefinitionError(f"task {task_name!r}: the handler {fn!r} is not callable")
            doc = description if description is not None else (inspect.getdoc(fn) or "").split("\n\n")[0] or None
            t: Task[Any] = Task(task_name, fn, model if model is not None else _payload_model(fn, task_name), queue=queue,
                     priority=priority, max_attempts=max_attempts, retry=retry or Retry(), lease_ms=lease_ms,
                     description=doc, schedules=_schedules(schedule, schedules), timeout_ms=timeout_ms,
                     expire_after_ms=expire_after_ms, max_snoozes=max_snoozes, retain_succeeded=retain_succeeded,
                     retain_failed=retain_failed, serial_key=serial_key, concurrency_key=concurrency_key)
            return self.add(t)

        return register

    def get(self, name: str) -> Task[Any] | None:
        return self.tasks.get(name)

    def names(self) -> list[str]:
        return sorted(self.tasks)

    def __contains__(self, name: object) -> bool:
        return name in self.tasks

    def __iter__(self):
        return iter(self.tasks.values())

    def __len__(self) -> int:
        return len(self.tasks)


def _schedules(schedule: str | Schedule | None, schedules: Sequence[Schedule]) -> tuple[Schedule, ...]:
    one = Schedule(schedule) if isinstance(schedule, str) else schedule
    return ((one,) if one is not None else ()) + tuple(schedules)


def schedule_registrations(tasks: Iterable[Task[Any]]) -> list[dict[str, Any]]:
    """Every schedule the tasks define, as register_schedules takes them."""
    return [row for t in tasks for row in t.schedule_registrations()]


def _origin(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


registry = Registry()
task = registry.task


def parse_modules(raw: str | Sequence[str] | None) -> tuple[str, ...]:
    """Module paths from a comma-separated text (PGQW_TASKS) or a list (--tasks, repeatable)."""
    if raw is None:
        return ()
    items: Iterable[str] = raw.split(",") if isinstance(raw, str) else (x for part in raw for x in part.split(","))
    return tuple(dict.fromkeys(m.strip() for m in items if m.strip()))


def load(modules: Sequence[str], into: Registry | None = None) -> Registry:
    """Imports the modules (the current folder first on the path, as `python -m` does) and returns
    the registry they filled. Raises TaskDefinitionError naming the module that cannot be loaded."""
    target = into or registry
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    for module in modules:
        try:
            importlib.import_module(module)
        except TaskDefinitionError as exc:
            raise TaskDefinitionError(f"{module}: {exc}") from None
        except ModuleNotFoundError as exc:
            raise TaskDefinitionError(f"cannot import task module {module!r}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - any error while importing the user's module
            raise TaskDefinitionError(f"task module {module!r} failed to import: "
                                      f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    if not len(target):
        raise TaskDefinitionError(f"no task is defined in {', '.join(modules) or 'no module'} "
                                  "(decorate handlers with @pgqw.tasks.task)")
    return target


@dataclass(frozen=True)
class Registered:
    """What register() wrote: the task types, and the code's schedules as the database now holds them."""
    task_types: list[str]
    schedules: list[db.Schedule]


def register(conn: psycopg.Connection, tasks: Iterable[Task[Any]]) -> Registered:
    """Writes what a worker's start writes for these tasks, in the caller's transaction: each type's payload
    schema and code defaults (register_task_types; a DBA's overrides stay), then their code schedules
    (register_schedules; a DBA's schedules and pauses stay). `pgqw migrate --tasks` and `pgqw tasks
    register` call it at deploy time, so jobs of the types are accepted before any worker has run."""
    from . import db

    found = list(tasks)
    names = db.register_task_types(conn, types=[t.registration() for t in found])
    schedules = db.register_schedules(conn, task_types=sorted(t.name for t in found),
                                      schedules=schedule_registrations(found))
    return Registered(task_types=names, schedules=schedules)


def register_modules(conn: psycopg.Connection, modules: Sequence[str]) -> Registered:
    """load() the modules, then register() what they define: what `pgqw migrate [--tasks]` and `pgqw tasks
    register` write. Raises TaskDefinitionError naming a module that cannot be loaded."""
    return register(conn, load(modules))


def describe_error(exc: BaseException) -> str:
    """The error text recorded for a failed attempt: a payload's validation errors field by field,
    PermanentError's and TransientError's own message, else `<ExceptionType>: <message>`."""
    if isinstance(exc, pydantic.ValidationError):
        return describe_invalid(exc)
    if isinstance(exc, (PermanentError, TransientError)):
        return str(exc) or type(exc).__name__
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def describe_invalid(exc: pydantic.ValidationError) -> str:
    """A payload's validation errors on one line, each naming its field: what last_error records."""
    parts = []
    for e in exc.errors(include_url=False):
        where = ".".join(str(p) for p in e.get("loc", ())) or "payload"
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    return "invalid payload: " + "; ".join(parts)
