"""The API's resources, declared once as pydantic models.

Every answer is one of these dumped with model_dump(by_alias=True, mode="json"): one casing for
requests and responses, camelCase (the aliases); times in UTC with milliseconds and a Z. The OpenAPI
document's components/schemas are their JSON Schemas (app/openapi.py), so the document cannot drift
from the answers. The enums are the database's own lists: STATUSES, OUTCOMES, CATCH_UP and SOURCES
(common.py) are what the check constraints and domains of db/migrations allow, and
tests/api/test_openapi.py reads those from the database and proves them equal.

The request bodies take their camelCase keys and, for one release, the snake_case keys they took before
(runAt or run_at, maxRunning or max_running, ...): see docs/api.md.

The package: common.py the enums and the limits, resources.py the response bodies, requests.py the
request bodies; every public name of the three is importable from here, with RESPONSES and REQUESTS.
"""
from __future__ import annotations

from pydantic import BaseModel

from .common import (
    AHEAD_MAX,
    BATCH_MAX,
    CANCELLABLE,
    CATCH_UP,
    DELAY_MAX_MS,
    DEPENDS_ON_MAX,
    ERROR_FILTER_MAX,
    KEY_MAX,
    MAX_ATTEMPTS_MAX,
    OUTCOMES,
    PRIORITY_MAX,
    PRIORITY_MIN,
    QUEUE_MAX,
    RATE_MAX,
    RUN_AT_MIN,
    SOURCES,
    STATUSES,
    TIMEOUT_MAX_MS,
)
from .requests import (
    CREATE_FIELD_DESCRIPTION,
    DEPRECATED_KEYS,
    ONE_TIME_PROBLEM,
    BatchCallback,
    BatchJobRequest,
    BatchParent,
    BatchRequest,
    BulkCancelFilter,
    BulkFilter,
    JobRequest,
    QueueKeyLimit,
    QueueLimit,
    QueueRate,
)
from .resources import (
    Attempt,
    Batch,
    BatchStatus,
    BulkResult,
    ErrorBody,
    ErrorEnvelope,
    FieldError,
    Job,
    JobPage,
    JobsPerSecond,
    KeyMaxRunning,
    MaxRunning,
    Queue,
    QueueStatus,
    QueueThroughput,
    Resource,
    Schedule,
    ScheduleList,
    Stats,
    Status,
    StatusCounts,
    TaskType,
    Throughput,
    Time,
    TimeOrNull,
    Worker,
    Workflow,
    WorkflowJob,
    job_fields,
)

# The components of the OpenAPI document, by name.
RESPONSES: tuple[type[BaseModel], ...] = (Job, Attempt, JobPage, Stats, Queue, QueueStatus, TaskType,
                                          Worker, QueueThroughput, Throughput, Schedule, ScheduleList, FieldError,
                                          ErrorBody, ErrorEnvelope, WorkflowJob, Workflow, Batch, BatchStatus,
                                          BulkResult)
REQUESTS: tuple[type[BaseModel], ...] = (QueueLimit, QueueRate, QueueKeyLimit, BatchRequest, BulkFilter,
                                         BulkCancelFilter)

__all__ = [
    "STATUSES",
    "OUTCOMES",
    "CATCH_UP",
    "SOURCES",
    "CANCELLABLE",
    "QUEUE_MAX",
    "PRIORITY_MIN",
    "PRIORITY_MAX",
    "RATE_MAX",
    "MAX_ATTEMPTS_MAX",
    "RUN_AT_MIN",
    "AHEAD_MAX",
    "DELAY_MAX_MS",
    "TIMEOUT_MAX_MS",
    "DEPENDS_ON_MAX",
    "BATCH_MAX",
    "KEY_MAX",
    "ERROR_FILTER_MAX",
    "Time",
    "TimeOrNull",
    "Status",
    "Resource",
    "Job",
    "job_fields",
    "WorkflowJob",
    "Workflow",
    "Batch",
    "Attempt",
    "JobPage",
    "StatusCounts",
    "Stats",
    "BatchStatus",
    "BulkResult",
    "JobsPerSecond",
    "MaxRunning",
    "KeyMaxRunning",
    "Queue",
    "QueueStatus",
    "TaskType",
    "Worker",
    "QueueThroughput",
    "Throughput",
    "Schedule",
    "ScheduleList",
    "FieldError",
    "ErrorBody",
    "ErrorEnvelope",
    "DEPRECATED_KEYS",
    "JobRequest",
    "ONE_TIME_PROBLEM",
    "CREATE_FIELD_DESCRIPTION",
    "QueueLimit",
    "QueueRate",
    "QueueKeyLimit",
    "BatchParent",
    "BatchJobRequest",
    "BatchCallback",
    "BatchRequest",
    "BulkFilter",
    "BulkCancelFilter",
    "RESPONSES",
    "REQUESTS",
]
