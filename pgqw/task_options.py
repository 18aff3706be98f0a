"""The values a task definition is made of besides its handler and payload model: Retry (how its
failures are retried) and Schedule (a periodic job of it), and the exceptions a definition
(TaskDefinitionError) or a handler (PermanentError, TransientError) raises. pgqw.tasks re-exports
each of them: import them from there."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class TaskDefinitionError(ValueError):
    """A task definition that cannot work; the message names the task and the problem."""


class PermanentError(Exception):
    """The job can never succeed as it is: it ends dead at once, without retries."""


class TransientError(Exception):
    """A failure that may go away on another try (any exception not listed as permanent is one)."""


@dataclass(frozen=True)
class Retry:
    """How a task's failures are retried. Unset values come from the task_types table (a DBA's
    value), then queue_settings: delay = min(base_ms * 2^(attempt-1) + jitter, max_delay_ms)."""

    base_ms: int | None = None
    max_delay_ms: int | None = None
    max_jitter_ms: int | None = None
    permanent: tuple[type[BaseException], ...] = ()


@dataclass(frozen=True)
class Schedule:
    """A periodic job of a task: one job at each slot of `cron` (five fields, or @hourly, @daily,
    @weekly, @monthly, @yearly; read in UTC). `name` defaults to the task's name (give each of a task's
    several schedules its own). catch_up: after a stop, enqueue the latest missed slot ("latest"), every
    missed slot, up to 100 ("all"), or none ("none")."""

    cron: str
    payload: Any = None  # the payload model's instance or a dict; None: {}
    name: str | None = None
    queue: str | None = None
    priority: int | None = None
    catch_up: str = "latest"

