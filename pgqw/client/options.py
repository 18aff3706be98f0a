"""The options of an enqueue call, checked before anything reaches the database, and the statements a job
or a batch of jobs is enqueued with (enqueue_job, enqueue_jobs: pgqw.db's SQL, on any connection).

A job's parents (`depends_on`) are job ids, jobs (anything with a UUID `.id`: what enqueue returns, a
db.Job), or Enqueue items of the same call. enqueue_jobs takes a parent of the same call as the 1-based
position of an earlier element, so a call's items are sent in an order where every parent comes before
its children (the order given, when it already is one); rows come back in the order given."""
from __future__ import annotations

import heapq
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Callable, Mapping, Protocol, Sequence, TypedDict, TypeVar, runtime_checkable

from .. import db
from ..schema import qualify as _q

R = TypeVar("R")

@runtime_checkable
class TaskLike(Protocol):
    """What enqueueing needs of a task: its type name, and its payload validated into the stored JSON
    object. pgqw.tasks.Task is one (this module does not import it: pgqw.tasks imports the client)."""

    name: str

    def dump(self, payload: Any) -> dict[str, Any]: ...


class EnqueueOptions(TypedDict, total=False):
    """The options of every enqueue call, as keyword arguments."""

    idempotency_key: str         # default: a random one (no deduplication)
    queue: str                   # default: the task type's, then 'default'
    priority: int                # default: the task type's, then 0; higher runs first
    run_at: datetime             # aware; or delay, not both
    delay: timedelta | float     # seconds, counted on the database's clock
    max_attempts: int            # default: the task type's, then queue_settings'
    unique_for: timedelta        # the key is unique only within this window of run_at
    timeout_ms: int              # each attempt's timeout; default: the task type's, else none
    timeout: timedelta | float   # the same in seconds (or a timedelta); or timeout_ms, not both
    expires_at: datetime         # aware; not started by then, the job ends expired; or expire_after, not both
    expire_after: timedelta | int  # from when the job may start (an int: ms); default: the task type's, else never
    expire_after_ms: int         # the same in milliseconds; or expire_after, not both
    depends_on: Sequence[Any]    # parents: job ids or jobs (and Enqueue items, in enqueue_many); blocked until they end
    run_anyway: bool | Sequence[bool]  # start once every parent is final, whatever it came to (default: once all
                                       # succeeded); or one flag per depends_on item, each for that parent
    serial_key: str              # one job of the key runs at a time, in enqueue order; default: the task's
    concurrency_key: str         # the queue's key_max_running counts running jobs per key; default: the task's
    workflow_id: uuid.UUID | str  # default: the first parent's workflow (or the parent's id); none without parents


@dataclass(frozen=True)
class Enqueue:
    """One job for enqueue_many, enqueue_batch or workflow(): the task (or type name), its payload and
    options. `item.after(a, b)` is the item with a and b (items of the same call, job ids or jobs) among
    its parents; the item and what after() makes of it are the same node of a workflow."""

    task: TaskLike | str
    payload: Any
    idempotency_key: str | None = None
    queue: str | None = None
    priority: int | None = None
    run_at: datetime | None = None
    delay: timedelta | float | None = None
    max_attempts: int | None = None
    unique_for: timedelta | None = None  # the key is unique only within this window of run_at
    timeout_ms: int | None = None        # each attempt's timeout (None: the task type's, else none)
    timeout: timedelta | float | None = None  # the same in seconds; or timeout_ms, not both
    expires_at: datetime | None = None   # not started by then, it ends expired; or expire_after, not both
    expire_after: timedelta | int | None = None  # from when it may start (an int: ms); None: the task type's
    expire_after_ms: int | None = None   # the same in milliseconds; or expire_after, not both
    depends_on: Sequence[Any] = ()       # parents: Enqueue items of the same call, job ids or jobs
    run_anyway: bool | Sequence[bool] = False  # once every parent is final (else: once every one succeeded); or one
                                               # flag per depends_on item
    serial_key: str | None = None        # None: the task's serial_key (its text, or its function of the payload)
    concurrency_key: str | None = None   # None: the task's concurrency_key
    workflow_id: uuid.UUID | str | None = None  # None: the first parent's workflow (workflow() sets its own)
    # Which node of a call this is: kept by after(), so `b` and `b.after(a)` are the same node (a child
    # may name either). Not compared: two equal items are still two jobs.
    _node: object = field(default_factory=object, init=False, compare=False, repr=False)

    def after(self, *parents: Any, run_anyway: bool = False) -> Enqueue:
        """This item with `parents` added to its depends_on (Enqueue items of the same call, job ids or
        jobs): blocked until each of them succeeded, or with run_anyway until each is final. The flag is
        these parents' own: `c.after(a, run_anyway=True).after(b)` waits for a to end and b to succeed."""
        if not isinstance(run_anyway, bool):
            raise TypeError(f"run_anyway must be bool, got {type(run_anyway).__name__}")
        flags = (*per_parent(self.run_anyway, len(self.depends_on)), *(run_anyway,) * len(parents))
        one_flag = len(set(flags)) <= 1
        made = replace(self, depends_on=(*self.depends_on, *parents),
                       run_anyway=(flags[0] if flags else run_anyway) if one_flag else flags)
        object.__setattr__(made, "_node", self._node)
        return made


_OPTION_TYPES: dict[str, tuple[type, ...]] = {
    "idempotency_key": (str,), "queue": (str,), "priority": (int,), "run_at": (datetime,),
    "delay": (timedelta, int, float), "max_attempts": (int,), "unique_for": (timedelta,),
    "timeout_ms": (int,), "timeout": (timedelta, int, float), "expires_at": (datetime,),
    "expire_after": (timedelta, int), "expire_after_ms": (int,), "serial_key": (str,), "concurrency_key": (str,),
    "workflow_id": (uuid.UUID, str),
}
KEY_OPTIONS = ("serial_key", "concurrency_key")  # a task may give each as a text or a function of the payload


def spec(item: Enqueue, position: Callable[[Enqueue], int] | None = None) -> dict[str, Any]:
    """The job as enqueue_job's parameters: options of the wrong type a TypeError, run_at with delay, timeout
    with timeout_ms, expires_at with expire_after, expire_after with expire_after_ms or a naive run_at or expires_at a
    ValueError, the payload validated by the task's model
    (pydantic.ValidationError). A parent that is an Enqueue item becomes `position(item)`, its 1-based
    place in the call (no position: a ValueError, as one job alone has no items beside it)."""
    for name, kinds in _OPTION_TYPES.items():
        value = getattr(item, name)
        if value is not None and (not isinstance(value, kinds) or isinstance(value, bool)):
            wanted = " or ".join(k.__name__ for k in kinds)
            raise TypeError(f"{name} must be {wanted}, got {type(value).__name__}")
    if isinstance(item.depends_on, (str, bytes)) or not isinstance(item.depends_on, Sequence):
        raise TypeError(f"depends_on must be a list of jobs or job ids, got {type(item.depends_on).__name__}")
    run_anyway = per_parent(item.run_anyway, len(item.depends_on))  # checked: TypeError, ValueError
    if item.run_at is not None and item.delay is not None:
        raise ValueError("give run_at or delay, not both")
    if item.timeout is not None and item.timeout_ms is not None:
        raise ValueError("give timeout or timeout_ms, not both")
    if item.run_at is not None and item.run_at.tzinfo is None:
        raise ValueError("run_at must be an aware datetime (with a time zone)")
    if item.expire_after is not None and item.expire_after_ms is not None:
        raise ValueError("give expire_after or expire_after_ms, not both")
    if item.expires_at is not None and (item.expire_after is not None or item.expire_after_ms is not None):
        raise ValueError("give expires_at or expire_after, not both")
    if item.expires_at is not None and item.expires_at.tzinfo is None:
        raise ValueError("expires_at must be an aware datetime (with a time zone)")
    if isinstance(item.task, str):
        name = item.task
        if not isinstance(item.payload, Mapping):
            raise TypeError(f"the payload of a job enqueued by type name must be a mapping, got "
                            f"{type(item.payload).__name__}")
        payload = dict(item.payload)
    elif isinstance(item.task, TaskLike):
        name, payload = item.task.name, item.task.dump(item.payload)
    else:
        raise TypeError(f"a job's task is a pgqw Task or a type name, got {type(item.task).__name__}")
    delay = item.delay
    if delay is not None and not isinstance(delay, timedelta):
        delay = timedelta(seconds=float(delay))
    timeout_ms = item.timeout_ms
    if item.timeout is not None:
        seconds = item.timeout.total_seconds() if isinstance(item.timeout, timedelta) else float(item.timeout)
        timeout_ms = round(seconds * 1000)
    expire_after_ms = item.expire_after if item.expire_after_ms is None else item.expire_after_ms
    if isinstance(expire_after_ms, timedelta):
        expire_after_ms = expire_after_ms // timedelta(milliseconds=1)
    return {
        "type": name, "payload": payload, "idempotency_key": item.idempotency_key or str(uuid.uuid4()),
        "queue": item.queue, "priority": item.priority, "run_at": item.run_at, "delay": delay,
        "max_attempts": item.max_attempts, "unique_for": item.unique_for, "timeout_ms": timeout_ms,
        "expires_at": item.expires_at, "expire_after_ms": expire_after_ms,
        "depends_on": [parent_ref(p, position) for p in item.depends_on] or None, "run_anyway":
            (run_anyway[0] if run_anyway else item.run_anyway is True) if len(set(run_anyway)) <= 1 else list(run_anyway),
        "serial_key": _key(item, "serial_key", payload), "concurrency_key": _key(item, "concurrency_key", payload),
        "workflow_id": None if item.workflow_id is None else parse_id(item.workflow_id, "a workflow id"),
    }


def _key(item: Enqueue, option: str, payload: dict[str, Any]) -> str | None:
    """The item's serial_key or concurrency_key: its own, else its task's (a text, or a function called
    with the payload as stored, whose None means no key)."""
    own = getattr(item, option)
    if own is not None or isinstance(item.task, str):
        return own
    given = getattr(item.task, option, None)
    if given is None or isinstance(given, str):
        return given
    value = given(payload)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"task {item.task.name!r}: its {option} function must return a text or None, got "
                        f"{type(value).__name__}")
    return value


def parent_ref(parent: Any, position: Callable[[Enqueue], int] | None) -> uuid.UUID | int:
    """A parent as depends_on sends it: a job's id, or the 1-based place of an item of the same call."""
    if isinstance(parent, Enqueue):
        if position is None:
            raise ValueError("an Enqueue item is a parent only among the items of one call (enqueue_many, "
                             "enqueue_batch, workflow): give a job or a job id")
        return position(parent)
    if isinstance(parent, (uuid.UUID, str)):
        return parse_id(parent, "a parent")
    found = getattr(parent, "id", None)
    if isinstance(found, uuid.UUID):
        return found
    raise TypeError(f"a parent is a job, a job id or an Enqueue item, got {type(parent).__name__}")


def parse_id(value: uuid.UUID | str, what: str) -> uuid.UUID:
    """A UUID as given (or its text), else a ValueError naming what it was to be."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise ValueError(f"{what} is a UUID, got {value!r}") from None


def parse_job_id(value: uuid.UUID | str) -> uuid.UUID:
    """A job id as given (a UUID, or its text), or a ValueError naming what was given, before the database."""
    return parse_id(value, "a job id")


def per_parent(run_anyway: Any, parents: int) -> tuple[bool, ...]:
    """run_anyway as one flag per parent: a bool is every parent's; a sequence gives each its own, one per
    depends_on item (another length: ValueError; not bools: TypeError)."""
    if isinstance(run_anyway, bool):
        return (run_anyway,) * parents
    if isinstance(run_anyway, (str, bytes)) or not isinstance(run_anyway, Sequence):
        raise TypeError(f"run_anyway must be bool or a list of bool, got {type(run_anyway).__name__}")
    if not all(isinstance(flag, bool) for flag in run_anyway):
        raise TypeError("run_anyway, as a list, must hold only bools")
    if len(run_anyway) != parents:
        raise ValueError(f"run_anyway, as a list, needs one flag per depends_on item ({parents}), got {len(run_anyway)}")
    return tuple(run_anyway)


def enqueue_statement(task: TaskLike | str, payload: Any, options: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """enqueue_job's SQL and parameters for one job; enqueue_jobs' for one element when its parents do not
    all share one run_anyway (enqueue_job takes one flag for every parent)."""
    made = spec(Enqueue(task, payload, **options))
    if isinstance(made["run_anyway"], list):
        return _q(db.ENQUEUE_JOBS_SQL), {"jobs": db.jobs_json([made])}
    return _q(db.ENQUEUE_JOB_SQL), db.enqueue_params(**made)


def order(jobs: Sequence[Enqueue]) -> list[int]:
    """The items' places (0-based) in an order where each parent of the call comes before its children:
    the given order where it allows, else the earliest item whose parents are all placed. An item listed
    twice, a parent item not in the call, or items that depend on each other in a cycle: ValueError."""
    place: dict[object, int] = {}
    for i, item in enumerate(jobs):
        if not isinstance(item, Enqueue):
            raise TypeError(f"item {i + 1} is not a pgqw.client.Enqueue, got {type(item).__name__}")
        if item._node in place:
            raise ValueError(f"items {place[item._node] + 1} and {i + 1} are the same job: list each once")
        place[item._node] = i
    children: list[list[int]] = [[] for _ in jobs]
    waiting = [0] * len(jobs)
    for i, item in enumerate(jobs):
        for parent in item.depends_on:
            if not isinstance(parent, Enqueue):
                continue
            p = place.get(parent._node)
            if p is None:
                raise ValueError(f"item {i + 1} ({_name(item)}) depends on an item that is not in this call "
                                 f"({_name(parent)}): list it too")
            if p == i:
                raise ValueError(f"item {i + 1} ({_name(item)}) depends on itself")
            children[p].append(i)
            waiting[i] += 1
    ready = [i for i in range(len(jobs)) if waiting[i] == 0]
    heapq.heapify(ready)
    placed: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        placed.append(i)
        for c in children[i]:
            waiting[c] -= 1
            if waiting[c] == 0:
                heapq.heappush(ready, c)
    if len(placed) < len(jobs):
        stuck = ", ".join(f"{i + 1} ({_name(jobs[i])})" for i in range(len(jobs)) if waiting[i])
        raise ValueError(f"items depend on each other in a cycle (each waits for another): items {stuck}")
    return placed


def _name(item: Enqueue) -> str:
    return item.task if isinstance(item.task, str) else item.task.name


def elements(jobs: Sequence[Enqueue], workflow_id: uuid.UUID | None = None) -> tuple[list[dict[str, Any]], list[int]]:
    """enqueue_jobs' elements for the items, parents first (order()), and the place in `jobs` of each
    element; workflow_id, when given, is every element's."""
    placed = order(jobs)
    sent_at = {jobs[i]._node: n for n, i in enumerate(placed, 1)}
    out = []
    for i in placed:
        item = spec(jobs[i], lambda parent: sent_at[parent._node])
        if workflow_id is not None:
            item["workflow_id"] = workflow_id
        # JSON has no UUID: ids go as text; a parent of the call stays its integer place.
        item["depends_on"] = [p if isinstance(p, int) else str(p) for p in item["depends_on"] or ()] or None
        item["workflow_id"] = None if item["workflow_id"] is None else str(item["workflow_id"])
        if not item["run_anyway"]:
            item["run_anyway"] = None  # the default: left out, as jobs_json leaves out every unset option
        out.append(item)
    return out, placed


def in_given_order(rows: Sequence[R], placed: Sequence[int]) -> list[R]:
    """Rows of the elements as sent (parents first), back in the order the items were given."""
    out: list[Any] = [None] * len(placed)
    for row, i in zip(rows, placed, strict=True):
        out[i] = row
    return out


def many_statement(jobs: Sequence[Enqueue]) -> tuple[str, dict[str, Any], list[int]]:
    """enqueue_jobs' SQL and parameters for many jobs (parents first), and each element's place in `jobs`."""
    sent, placed = elements(jobs)
    return _q(db.ENQUEUE_JOBS_SQL), {"jobs": db.jobs_json(sent)}, placed
