"""The request bodies (JobRequest, QueueLimit, QueueRate, QueueKeyLimit, BatchRequest, BulkFilter,
...), and the snake_case keys they still accept for one release (DEPRECATED_KEYS)."""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any

from pydantic import (
    AliasChoices,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from .common import (
    AHEAD_MAX,
    BATCH_MAX,
    CANCELLABLE,
    DELAY_MAX_MS,
    DEPENDS_ON_MAX,
    ERROR_FILTER_MAX,
    KEY_MAX,
    MAX_ATTEMPTS_MAX,
    PRIORITY_MAX,
    PRIORITY_MIN,
    QUEUE_MAX,
    RATE_MAX,
    RUN_AT_MIN,
    TIMEOUT_MAX_MS,
    _enum,
)

DEPRECATED_KEYS: dict[str, str] = {}  # snake_case key → the camelCase key that replaces it


def _alias(camel: str, snake: str) -> AliasChoices:
    """The camelCase key, and the snake_case one it replaces (deprecated, accepted for one release)."""
    DEPRECATED_KEYS[snake] = camel
    return AliasChoices(camel, snake)


def _with_deprecated_keys(schema: dict[str, Any]) -> None:
    """The JSON Schema of a request body also names its deprecated snake_case keys (marked deprecated),
    so a body still written with them validates against the published document."""
    properties = schema.get("properties", {})
    for snake, camel in DEPRECATED_KEYS.items():
        if camel in properties:
            properties[snake] = {**properties[camel], "deprecated": True,
                                 "description": f"deprecated: the old name of {camel}"}
    required = schema.pop("required", [])
    renamed = [k for k in required if k in DEPRECATED_KEYS.values()]
    if renamed:
        old = {camel: snake for snake, camel in DEPRECATED_KEYS.items()}
        schema["allOf"] = [{"anyOf": [{"required": [k]}, {"required": [old[k]]}]} for k in renamed]
    kept = [k for k in required if k not in renamed]
    if kept:
        schema["required"] = kept


class JobRequest(BaseModel):
    """The body of POST /api/jobs. Its JSON Schema is the request body of the OpenAPI document (with the
    payload of each registered task type)."""

    model_config = ConfigDict(extra="forbid", title="CreateJob", json_schema_extra=_with_deprecated_keys)

    type: Annotated[str, Field(strict=True, min_length=1, max_length=100, description="a registered task type")]
    payload: Annotated[dict[str, Any], Field(strict=True, description="checked against the type's payload schema")]
    queue: Annotated[str | None, Field(strict=True, min_length=1, max_length=QUEUE_MAX, pattern=r"\S",
                                       description="default: the task type's queue")] = None
    priority: Annotated[int | None, Field(strict=True, ge=PRIORITY_MIN, le=PRIORITY_MAX,
                                          description="higher runs first; default: the task type's")] = None
    run_at: Annotated[AwareDatetime | None, Field(
        validation_alias=_alias("runAt", "run_at"),
        description="when the job may start (ISO 8601 with an offset), from 1970-01-01T00:00:00Z to 366 days "
                    "from now (run_at: deprecated)")] = None
    delay_ms: Annotated[int | None, Field(
        strict=True, ge=0, le=DELAY_MAX_MS, validation_alias=_alias("delayMs", "delay_ms"),
        description="start no sooner than this many ms from now (at most 366 days; delay_ms: deprecated)")] = None
    max_attempts: Annotated[int | None, Field(
        strict=True, ge=1, le=MAX_ATTEMPTS_MAX, validation_alias=_alias("maxAttempts", "max_attempts"),
        description="default: the task type's (max_attempts: deprecated)")] = None
    unique_for_ms: Annotated[int | None, Field(
        strict=True, ge=1, le=DELAY_MAX_MS, validation_alias=_alias("uniqueForMs", "unique_for_ms"),
        description="the Idempotency-Key is unique only within this window (ms, at most 366 days; windows "
                    "counted from the epoch in UTC) of runAt: within it the same job is returned, after it a "
                    "new one is made; the stored key is `<key>@<window start>` (the key at most 230 characters; "
                    "unique_for_ms: deprecated)"
    )] = None
    timeout_ms: Annotated[int | None, Field(
        strict=True, ge=1, le=TIMEOUT_MAX_MS, validation_alias="timeoutMs",
        description="each attempt's timeout in ms: at its deadline the attempt ends timed_out (a failure, "
                    "retried with backoff); default: the task type's, else none")] = None
    expire_after_ms: Annotated[int | None, Field(
        strict=True, ge=1, le=TIMEOUT_MAX_MS, validation_alias="expireAfterMs",
        description="not started this many ms after it may start (runAt, else now), the job ends expired and never "
                    "runs; default: the task type's, else never; or expiresAt, not both")] = None
    expires_at: Annotated[AwareDatetime | None, Field(
        validation_alias="expiresAt",
        description="not started by then (ISO 8601 with an offset, later than now and than runAt), the job ends "
                    "expired and never runs; or expireAfterMs, not both")] = None

    depends_on: Annotated[list[uuid.UUID] | None, Field(
        validation_alias="dependsOn", max_length=DEPENDS_ON_MAX,
        description="ids of the jobs it waits for: it is blocked until every one has succeeded (with runAnyway: "
                    "has reached any final status); a parent already cancelled or expired makes it cancelled; "
                    f"at most {DEPENDS_ON_MAX}")] = None
    run_anyway: Annotated[bool, Field(
        strict=True, validation_alias="runAnyway",
        description="start once every parent has finished, whatever its outcome (default false: only when every "
                    "parent has succeeded)")] = False
    serial_key: Annotated[str | None, Field(
        strict=True, min_length=1, max_length=KEY_MAX, pattern=r"\S", validation_alias="serialKey",
        description="jobs of one serial key run one at a time, in the order they were enqueued")] = None
    concurrency_key: Annotated[str | None, Field(
        strict=True, min_length=1, max_length=KEY_MAX, pattern=r"\S", validation_alias="concurrencyKey",
        description="the queue's keyMaxRunning holds for the jobs of each concurrency key")] = None
    workflow_id: Annotated[uuid.UUID | None, Field(
        validation_alias="workflowId",
        description="the workflow it joins; default: its first parent's workflow (or that parent's id), none "
                    "without parents")] = None

    @field_validator("run_at")
    @classmethod
    def _run_at_in_range(cls, value: datetime | None) -> datetime | None:
        if value is not None and not RUN_AT_MIN <= value <= datetime.now(timezone.utc) + AHEAD_MAX:
            raise ValueError(f"must be between {RUN_AT_MIN:%Y-%m-%dT%H:%M:%SZ} and {AHEAD_MAX.days} days from now")
        return value

    @field_validator("expires_at")
    @classmethod
    def _expires_after_the_start(cls, value: datetime | None, info: ValidationInfo) -> datetime | None:
        if value is None:
            return value
        if info.data.get("expire_after_ms") is not None:
            raise ValueError("give expiresAt or expireAfterMs, not both")
        now = datetime.now(timezone.utc)
        delay = info.data.get("delay_ms")
        start = max(now, info.data.get("run_at") or now, now + timedelta(milliseconds=delay or 0))
        if value <= start:
            raise ValueError("must be later than now and than runAt (or now + delayMs)")
        return value

    @model_validator(mode="after")
    def _one_time(self) -> JobRequest:
        if self.run_at is not None and self.delay_ms is not None:
            raise ValueError(ONE_TIME_PROBLEM)
        return self


ONE_TIME_PROBLEM = "give runAt or delayMs, not both"

CREATE_FIELD_DESCRIPTION = "set up a queue not known yet (as ?create=true); else 404"


class QueueLimit(BaseModel):
    """The body of PUT /api/queues/{name}/limit."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_with_deprecated_keys)
    max_running: Annotated[int | None, Field(
        strict=True, ge=1, le=PRIORITY_MAX, validation_alias=_alias("maxRunning", "max_running"),
        description="null removes the limit (max_running: deprecated)")]
    create: Annotated[bool, Field(strict=True, description=CREATE_FIELD_DESCRIPTION)] = False


class QueueRate(BaseModel):
    """The body of PUT /api/queues/{name}/rate."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_with_deprecated_keys)
    jobs_per_second: Annotated[float | None, Field(
        gt=0, le=RATE_MAX, validation_alias=_alias("jobsPerSecond", "jobs_per_second"),
        description="at most 6 decimal places; null removes the rate (jobs_per_second: deprecated)")]
    create: Annotated[bool, Field(strict=True, description=CREATE_FIELD_DESCRIPTION)] = False


class QueueKeyLimit(BaseModel):
    """The body of PUT /api/queues/{name}/key-limit."""

    model_config = ConfigDict(extra="forbid")
    max_running: Annotated[int | None, Field(
        strict=True, ge=1, le=PRIORITY_MAX, validation_alias="maxRunning",
        description="at most this many of the queue's jobs processing at once per concurrency key; null removes "
                    "the limit")]
    create: Annotated[bool, Field(strict=True, description=CREATE_FIELD_DESCRIPTION)] = False


def _parent(value: Any) -> int | uuid.UUID:
    """A parent of a batch's job: a job id, or the place (from 1) of an earlier job of the batch."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            pass
    raise ValueError("must be a job id (a UUID) or the place of an earlier job of this batch (from 1)")


BatchParent = Annotated[int | uuid.UUID, PlainValidator(_parent), WithJsonSchema(
    {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "format": "uuid"}]})]


class BatchJobRequest(JobRequest):
    """One job of POST /api/batches: the body of POST /api/jobs, with its own idempotency key (optional)
    and parents that may be earlier jobs of the same batch."""

    model_config = ConfigDict(extra="forbid", title="BatchJob", json_schema_extra=_with_deprecated_keys)

    depends_on: Annotated[list[BatchParent] | None, Field(
        validation_alias="dependsOn", max_length=DEPENDS_ON_MAX,
        description="the jobs it waits for: a job id, or n for the n-th job of this batch (from 1; an earlier one)"
    )] = None  # type: ignore[assignment]
    idempotency_key: Annotated[str | None, Field(
        strict=True, min_length=1, max_length=255, pattern=r"^[!-~]{1,255}$", validation_alias="idempotencyKey",
        description="this job's key (as POST /api/jobs' header); default: a new random one")] = None


class BatchCallback(BaseModel):
    """The job enqueued once, when every job of the batch has reached a final status; its payload gets
    "batch": {id, total, succeeded, dead, cancelled, expired}."""

    model_config = ConfigDict(extra="forbid", title="BatchCallback")
    type: Annotated[str, Field(strict=True, min_length=1, max_length=100, description="a registered task type")]
    payload: Annotated[dict[str, Any], Field(strict=True, description="its payload, without the key batch")] = {}
    queue: Annotated[str | None, Field(strict=True, min_length=1, max_length=QUEUE_MAX, pattern=r"\S",
                                       description="default: the task type's queue")] = None
    priority: Annotated[int | None, Field(strict=True, ge=PRIORITY_MIN, le=PRIORITY_MAX,
                                          description="default: the task type's")] = None
    max_attempts: Annotated[int | None, Field(strict=True, ge=1, le=MAX_ATTEMPTS_MAX, validation_alias="maxAttempts",
                                              description="default: the task type's")] = None


class BatchRequest(BaseModel):
    """The body of POST /api/batches."""

    model_config = ConfigDict(extra="forbid", title="CreateBatch")
    jobs: Annotated[list[BatchJobRequest], Field(min_length=1, max_length=BATCH_MAX,
                                                 description=f"1 to {BATCH_MAX} jobs, enqueued in one transaction")]
    callback: BatchCallback | None = None
    idempotency_key: Annotated[str | None, Field(
        strict=True, min_length=1, max_length=255, pattern=r"^[!-~]{1,255}$", validation_alias="idempotencyKey",
        description="the same key again answers the batch it made (200), whatever the body")] = None


class BulkFilter(BaseModel):
    """The body of POST /api/jobs/bulk/retry: which dead jobs. At least one filter, or all: true."""

    model_config = ConfigDict(extra="forbid", title="BulkRetry")
    type: Annotated[str | None, Field(strict=True, min_length=1, max_length=100, description="task type")] = None
    queue: Annotated[str | None, Field(strict=True, min_length=1, max_length=QUEUE_MAX)] = None
    error: Annotated[str | None, Field(strict=True, min_length=1, max_length=ERROR_FILTER_MAX,
                                       description="found in lastError (ignoring case)")] = None
    since: Annotated[AwareDatetime | None, Field(description="finished (retry) or created (cancel) at or after "
                                                             "this")] = None
    until: Annotated[AwareDatetime | None, Field(description="finished (retry) or created (cancel) before this")] = None
    workflow_id: Annotated[uuid.UUID | None, Field(validation_alias="workflowId")] = None
    batch_id: Annotated[uuid.UUID | None, Field(validation_alias="batchId")] = None
    all: Annotated[bool, Field(strict=True, description="true: every job, when no filter is given (a filter is "
                                                        "required otherwise)")] = False

    def filters(self) -> dict[str, Any]:
        """The filters given, as db.retry_dead_all and db.cancel_all take them."""
        return {k: v for k, v in self.model_dump(exclude={"all"}).items() if v is not None}


class BulkCancelFilter(BulkFilter):
    """The body of POST /api/jobs/bulk/cancel: which jobs, as bulk retry's filters, and their statuses."""

    model_config = ConfigDict(extra="forbid", title="BulkCancel")
    statuses: Annotated[list[Annotated[str, _enum(CANCELLABLE)]] | None, Field(
        min_length=1, description="default: all four")] = None

    @field_validator("statuses")
    @classmethod
    def _cancellable(cls, value: list[str] | None) -> list[str] | None:
        bad = [s for s in value or () if s not in CANCELLABLE]
        if bad:
            raise ValueError("must be some of " + ", ".join(CANCELLABLE))
        return value

