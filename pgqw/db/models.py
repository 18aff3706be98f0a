"""The typed rows the wrappers return: dataclasses read through class_row, one field per column."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

# Every status a job can have, in the order of its life (the list of the jobs_status_check constraint).
STATUSES = ("blocked", "pending", "processing", "succeeded", "failed", "dead", "cancelled", "expired")
# The final ones (check_job_row: a finished_at, no lease); the rest is a job still in flight.
FINAL = ("succeeded", "dead", "cancelled", "expired")
# Every way an attempt can end (job_attempts.outcome: the job_attempts_outcome_check rule of its domain).
OUTCOMES = ("succeeded", "failed", "abandoned", "cancelled", "timed_out", "snoozed")


@dataclass
class Job:
    id: uuid.UUID
    type: str
    payload: dict[str, Any]
    status: str
    attempts: int
    max_attempts: int
    last_error: str | None
    run_at: datetime
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    locked_by: str | None
    lease_expires_at: datetime | None
    idempotency_key: str
    queue: str
    priority: int
    timeout_ms: int | None              # the job's own timeout (None: its task type's, if any)
    deadline_at: datetime | None        # the latest attempt's deadline (None: none)
    expires_at: datetime | None         # not started by then: never claimed, it ends expired (None: never)
    progress: Any                       # the latest progress its handler reported (JSON; None: none yet)
    # Keyword-only with defaults, so that the subclasses' own fields may follow without defaults.
    workflow_id: uuid.UUID | None = field(default=None, kw_only=True)  # its graph (workflow_jobs); None: none
    batch_id: uuid.UUID | None = field(default=None, kw_only=True)     # its batch (batch_status); None: none
    serial_key: str | None = field(default=None, kw_only=True)         # one job of this key at a time, in order
    serial_seq: int | None = field(default=None, kw_only=True)         # its place among its key's jobs
    concurrency_key: str | None = field(default=None, kw_only=True)    # counted against key_max_running


@dataclass
class EnqueuedJob(Job):
    created: bool


@dataclass
class RecordedJob(Job):
    """What mark_succeeded, mark_failed, mark_jobs_succeeded and release_job answer: the job, and
    already_recorded: true when an earlier call for this worker's attempt had already recorded the
    same result (a retry after a lost reply), so this call changed nothing."""
    already_recorded: bool


@dataclass
class ClaimedJob(Job):
    """A job as its claim returns it: with the lease token that alone speaks for this attempt."""
    lease_token: uuid.UUID


@dataclass
class CancelledJob(Job):
    """What cancel_job answers: the job (cancelled, or still processing until its worker stops) and
    when the cancel was first requested."""
    cancel_requested_at: datetime


@dataclass
class Recorded:
    """mark_jobs_succeeded's answer for one job as the worker reads it: which job, and whether an
    earlier call had already recorded it."""
    id: uuid.UUID
    already_recorded: bool


@dataclass
class Attempt:
    job_id: uuid.UUID
    attempt: int
    worker_id: str
    started_at: datetime
    finished_at: datetime | None
    outcome: str | None
    error: str | None
    abandon_reason: str | None
    lease_token_hash: bytes | None = None  # SHA-256 of the attempt's lease token
    deadline_at: datetime | None = None  # when it times out (its claim's time + the timeout); None: never


@dataclass
class Swept:
    job_id: uuid.UUID
    attempt: int
    worker_id: str
    status: str
    lease_expired_at: datetime


@dataclass
class Lease:
    job_id: uuid.UUID
    lease_expires_at: datetime
    cancel_requested: bool = False  # cancel_job asked this job to stop


@dataclass(frozen=True)
class NextRunAt:
    run_at: datetime
    due_in_ms: int


@dataclass
class Page:
    jobs: list[Job]
    next_cursor: tuple[datetime, uuid.UUID] | None


@dataclass
class Result:
    job_id: uuid.UUID
    content_type: str
    value: Any
    data: bytes | None
    created_at: datetime


@dataclass
class Stat:
    metric: str
    queue: str | None
    label: str | None
    value: float


@dataclass
class TimelineRow:
    attempt: int
    worker_id: str
    started_at: datetime
    finished_at: datetime | None
    wait_before_s: Any
    duration_s: Any
    outcome: str
    error: str | None
    deadline_at: datetime | None = None  # when the attempt times out; None: no timeout


@dataclass
class ConcurrencyRow:
    worker_id: str
    peak_at_once: int
    attempts_run: int


@dataclass
class DoubleRuns:
    jobs_seen: int
    attempts_seen: int
    overlapping_jobs: int
    succeeded_twice: int
    succeeded_jobs: int
    results: int  # job_results rows of those jobs


@dataclass
class LatestJob:
    id: uuid.UUID
    type: str
    queue: str
    status: str
    attempts: int
    max_attempts: int
    locked_by: str | None
    created_at: datetime
    run_at: datetime
    finished_at: datetime | None
    last_error: str | None


@dataclass
class QueueSettings:
    id: bool
    max_attempts: int
    backoff_base_ms: int
    backoff_max_jitter_ms: int
    backoff_max_delay_ms: int
    lease_ms: int
    retry_extra_attempts: int
    max_payload_bytes: int
    # Jobs of a type nobody registered are accepted (else enqueue_job(s) refuse them, QT422).
    accept_unregistered_types: bool = False
    # Retention (prune_expired_jobs): succeeded jobs, then dead and cancelled ones, are deleted this long
    # after they finished.
    prune_succeeded_after: timedelta = timedelta(days=7)
    prune_finished_after: timedelta = timedelta(days=30)
    # How many times one job may be snoozed (snooze_job) unless its task type says otherwise.
    max_snoozes: int = 100


@dataclass
class QueueRow:
    """A queue's row in queues: what an operator set on it."""
    name: str
    paused: bool
    max_running: int | None
    jobs_per_second: Decimal | None  # null: no rate
    updated_at: datetime
    # The rate's token bucket (claim_jobs_at keeps it): tokens as of rate_refilled_at; None without a rate.
    rate_tokens: Decimal | None = None
    rate_refilled_at: datetime | None = None
    key_max_running: int | None = None  # at most this many processing per concurrency_key; None: no limit


@dataclass
class QueueInfo:
    """A known queue (one with a job or a row in queues): its settings and its numbers now."""
    name: str
    paused: bool
    max_running: int | None
    jobs_per_second: Decimal | None  # at most this many jobs started per second; None: no rate
    depth: int  # ready jobs: pending or failed, due, with a try left
    running: int  # processing jobs
    oldest_ready_age_seconds: float  # 0 when none is ready
    key_max_running: int | None = None  # at most this many processing per concurrency_key; None: no limit


@dataclass
class TaskType:
    name: str
    payload_schema: dict[str, Any]
    description: str | None
    queue: str
    priority: int
    max_attempts: int
    backoff_base_ms: int
    backoff_max_delay_ms: int
    backoff_max_jitter_ms: int
    lease_ms: int
    timeout_ms: int | None              # each attempt's timeout; None: none
    expire_after_ms: int | None         # a job not started this long after it may: expired; None: never
    max_snoozes: int                    # snoozes a job may take; the next ends it dead
    retain_succeeded: timedelta         # a succeeded job is pruned this long after it finished
    retain_failed: timedelta            # a dead, cancelled or expired job is pruned this long after


@dataclass
class Worker:
    id: str
    hostname: str | None
    pid: int | None
    queues: list[str] | None
    task_types: list[str]
    concurrency: int | None
    started_at: datetime
    last_seen_at: datetime
    expires_at: datetime
    stopped_at: datetime | None


@dataclass
class WorkerStatus(Worker):
    """A worker as the console shows it. alive is the database's verdict: its own heartbeat keeps
    expires_at ahead of the server's clock (register_worker) and it has not said it stopped."""
    alive: bool


@dataclass
class Schedule:
    """A row of schedules: a task type enqueued at each slot of a cron expression (read in UTC)."""
    name: str
    task_type: str
    cron: str
    payload: dict[str, Any]
    queue: str | None
    priority: int | None
    catch_up: str  # latest, all or none: which missed slots get a job after a stop
    paused: bool
    last_slot: datetime | None  # the latest slot a job was enqueued for
    slots_after: datetime  # no slot at or before this is enqueued
    source: str  # code (register_schedules) or sql (set_schedule)
    created_at: datetime
    updated_at: datetime


@dataclass
class ScheduledJob:
    """One slot enqueue_schedule_slots gave a job (created: false when the slot's job existed already)."""
    slot: datetime
    job_id: uuid.UUID
    created: bool


@dataclass
class ScheduleTimes:
    """A schedule's timing (schedule_times): what a scheduler needs to find its due slots."""
    name: str
    task_type: str
    cron: str
    catch_up: str
    paused: bool
    last_slot: datetime | None
    slots_after: datetime


@dataclass
class ThroughputCount:
    queue: str
    bucket: int  # 0: the oldest bucket
    succeeded: int  # jobs that finished succeeded in the bucket
    failed: int  # jobs that went dead in the bucket (after their last attempt)


@dataclass
class Throughput:
    since: datetime
    until: datetime  # the database's now(); bucket i is [since + i·width, since + (i+1)·width)
    buckets: int
    counts: list[ThroughputCount]  # only the (queue, bucket) pairs with a finished job


# What enqueue_batch answers for each element: the job (its batch_id is the batch's) and whether it was made now.
BatchEnqueuedJob = EnqueuedJob


@dataclass
class BatchStatus:
    """A batch's progress (batch_status): its jobs counted by status, its callback's job once enqueued."""
    batch_id: uuid.UUID
    total: int
    blocked: int
    pending: int
    processing: int
    failed: int
    succeeded: int
    dead: int
    cancelled: int
    expired: int
    callback_job_id: uuid.UUID | None
    callback_error: str | None
    created_at: datetime
    finished_at: datetime | None


@dataclass
class WorkflowJob(Job):
    """A job of a workflow (workflow_jobs) with the parents it waits for."""
    depends_on: list[uuid.UUID] = field(default_factory=list, kw_only=True)
    run_anyway: bool = field(default=False, kw_only=True)  # every parent is waited for only to end
    run_anyway_for: list[uuid.UUID] = field(default_factory=list, kw_only=True)  # the parents waited for so


@dataclass
class ParentResult:
    """A parent of a job (parent_results) with its result: JSON in result, bytes in data."""
    parent_id: uuid.UUID
    type: str
    status: str
    content_type: str | None
    result: Any
    data: bytes | None
