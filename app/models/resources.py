"""The response bodies: each resource the API answers with (Job, Attempt, Queue, Worker, Schedule,
the error envelope, ...), and the functions that make one of a row of the database."""
from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, WithJsonSchema
from pydantic.alias_generators import to_camel

from pgqw import db

from ..serialize import iso
from .common import CATCH_UP, OUTCOMES, RATE_MAX, SOURCES, STATUSES, _enum

Time = Annotated[datetime, PlainSerializer(iso, return_type=str),
                 WithJsonSchema({"type": "string", "format": "date-time", "description": "ISO 8601, UTC, with Z"})]
TimeOrNull = Annotated[datetime | None, PlainSerializer(iso, return_type=str | None),
                       WithJsonSchema({"type": ["string", "null"], "format": "date-time"})]
Status = Annotated[str, _enum(STATUSES)]


class Resource(BaseModel):
    """A response body: camelCase keys, every field present (null when it has no value), nothing else."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              json_schema_serialization_defaults_required=True)

    def dump(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


class Job(Resource):
    id: uuid.UUID
    type: str
    queue: str
    priority: int
    status: Status
    attempts: Annotated[int, Field(ge=0, description="attempts started so far")]
    max_attempts: Annotated[int, Field(ge=1)]
    last_error: str | None
    next_attempt_at: Annotated[TimeOrNull, Field(description="when the job may run next (pending or failed), "
                                                             "else null")]
    created_at: Time
    started_at: Annotated[TimeOrNull, Field(description="start of the latest attempt")]
    finished_at: Annotated[TimeOrNull, Field(description="set when succeeded, dead, cancelled or expired")]
    locked_by: Annotated[str | None, Field(description="the worker holding it while processing")]
    payload: dict[str, Any]
    result_url: Annotated[str | None, Field(description="the result's URL once succeeded "
                                                        "(GET /api/jobs/{id}/result)")]
    expires_at: Annotated[TimeOrNull, Field(description="not started by then, it ends expired; null: never")] = None
    timeout_ms: Annotated[int | None, Field(description="each attempt's timeout of the job's own; null: its task "
                                                        "type's, if any")] = None
    deadline_at: Annotated[TimeOrNull, Field(description="when its latest attempt times out (its start plus the "
                                                          "timeout; a cancel moves it to then); null: none")] = None
    progress: Annotated[Any, Field(description="the latest progress its handler reported (any JSON value, "
                                               "written with the worker's heartbeat); null: none yet")] = None
    workflow_id: Annotated[uuid.UUID | None, Field(description="the workflow (graph of dependencies) it belongs "
                                                               "to: GET /api/workflows/{id}; null: none")] = None
    batch_id: Annotated[uuid.UUID | None, Field(description="its batch: GET /api/batches/{id}; null: none")] = None
    serial_key: Annotated[str | None, Field(description="jobs of one serial key run one at a time, in enqueue "
                                                        "order")] = None
    concurrency_key: Annotated[str | None, Field(description="the queue's keyMaxRunning holds per concurrency "
                                                             "key")] = None

    @classmethod
    def of(cls, job: db.Job) -> Job:
        return cls(**job_fields(job))


def job_fields(job: db.Job) -> dict[str, Any]:
    """The job resource's fields of a row of the jobs table (also the first fields of a WorkflowJob)."""
    return {"id": job.id, "type": job.type, "queue": job.queue, "priority": job.priority, "status": job.status,
            "attempts": job.attempts, "max_attempts": job.max_attempts, "last_error": job.last_error,
            "next_attempt_at": job.run_at if job.status in ("pending", "failed") else None,
            "created_at": job.created_at, "started_at": job.started_at, "finished_at": job.finished_at,
            "locked_by": job.locked_by, "payload": job.payload,
            "result_url": f"/api/jobs/{job.id}/result" if job.status == "succeeded" else None,
            "expires_at": job.expires_at, "timeout_ms": job.timeout_ms, "deadline_at": job.deadline_at,
            "progress": job.progress, "workflow_id": job.workflow_id,
            "batch_id": job.batch_id, "serial_key": job.serial_key, "concurrency_key": job.concurrency_key}


class WorkflowJob(Job):
    depends_on: Annotated[list[uuid.UUID], Field(description="the ids of its parents (empty: none)")]
    run_anyway: Annotated[bool, Field(description="true: it starts once every parent has reached a final status, "
                                                  "whatever it is; false: it waits for some to succeed")]
    run_anyway_for: Annotated[list[uuid.UUID], Field(description="the parents it waits for only to end, whatever "
                                                                 "the end; for the others, until they succeed")]

    @classmethod
    def of(cls, job: db.WorkflowJob) -> WorkflowJob:  # type: ignore[override]
        return cls(**job_fields(job), depends_on=list(job.depends_on), run_anyway=job.run_anyway,
                   run_anyway_for=list(job.run_anyway_for))


class Workflow(Resource):
    id: Annotated[uuid.UUID, Field(description="the workflow's id (its first job's id unless one was given)")]
    jobs: Annotated[list[WorkflowJob], Field(description="every job of the workflow in enqueue order, each with "
                                                         "its parents")]


class Batch(Resource):
    """The answer of POST /api/batches: the batch's id and its jobs, in the order sent."""

    id: uuid.UUID
    jobs: list[Job]


class Attempt(Resource):
    attempt: Annotated[int, Field(ge=1)]
    worker_id: str
    started_at: Time
    finished_at: TimeOrNull
    outcome: Annotated[str | None, _enum(OUTCOMES, nullable=True, description="null while the attempt runs")]
    error: str | None
    deadline_at: Annotated[TimeOrNull, Field(description="when the attempt times out (outcome timed_out); null: "
                                                         "no timeout")] = None

    @classmethod
    def of(cls, a: db.Attempt) -> Attempt:
        return cls(attempt=a.attempt, worker_id=a.worker_id, started_at=a.started_at, finished_at=a.finished_at,
                   outcome=a.outcome, error=a.error, deadline_at=a.deadline_at)


class JobPage(Resource):
    jobs: list[Job]
    next_cursor: Annotated[str | None, Field(description="pass as cursor for the next page; null on the last "
                                                         "page")]


# Jobs per status: one count for each of the database's statuses.
StatusCounts = Annotated[dict[str, int], WithJsonSchema({
    "type": "object", "required": list(STATUSES), "additionalProperties": False,
    "properties": {s: {"type": "integer", "minimum": 0} for s in STATUSES}})]


class Stats(Resource):
    counts: StatusCounts
    total: Annotated[int, Field(ge=0)]


class BatchStatus(Resource):
    """A batch's progress: its jobs per status (batch_status)."""

    id: uuid.UUID
    total: Annotated[int, Field(ge=0, description="jobs in the batch (the callback job not counted)")]
    counts: StatusCounts
    callback_job_id: Annotated[uuid.UUID | None, Field(
        description="the callback job, once every job of the batch has reached a final status; null before, or "
                    "without a callback")]
    callback_error: Annotated[str | None, Field(description="why the callback job could not be enqueued; null: "
                                                            "it was, or is not due yet")] = None
    created_at: Time
    finished_at: Annotated[TimeOrNull, Field(description="when every job of the batch first reached a final "
                                                         "status; null before")]

    @classmethod
    def of(cls, b: db.BatchStatus) -> BatchStatus:
        return cls(id=b.batch_id, total=b.total, counts={s: int(getattr(b, s)) for s in STATUSES},
                   callback_job_id=b.callback_job_id, callback_error=b.callback_error, created_at=b.created_at,
                   finished_at=b.finished_at)


class BulkResult(Resource):
    changed: Annotated[int, Field(ge=0, description="jobs retried (dead → pending) or cancelled (a processing one: "
                                                    "asked to stop)")]


JobsPerSecond = Annotated[float | None, Field(gt=0, le=RATE_MAX, description="at most this many jobs started per "
                                                                             "second, across all workers; null: no rate")]
MaxRunning = Annotated[int | None, Field(ge=1, description="at most this many jobs processing at once, across all "
                                                           "workers; null: no limit")]


KeyMaxRunning = Annotated[int | None, Field(ge=1, description="at most this many jobs processing at once per "
                                                              "concurrency key of the queue; null: no limit")]


class Queue(Resource):
    name: str
    paused: Annotated[bool, Field(description="claims skip a paused queue; enqueues still land in it")]
    max_running: MaxRunning
    jobs_per_second: JobsPerSecond
    key_max_running: KeyMaxRunning = None

    @classmethod
    def of(cls, q: db.QueueInfo | db.QueueRow) -> Queue:
        return cls(**_queue_fields(q))


def _queue_fields(q: db.QueueInfo | db.QueueRow) -> dict[str, Any]:
    rate = None if q.jobs_per_second is None else float(q.jobs_per_second)  # at most 6 decimals: exact enough
    return {"name": q.name, "paused": q.paused, "max_running": q.max_running, "jobs_per_second": rate,
            "key_max_running": q.key_max_running}


class QueueStatus(Queue):
    depth: Annotated[int, Field(ge=0, description="ready jobs (due, with a try left)")]
    running: Annotated[int, Field(ge=0, description="processing jobs")]
    oldest_ready_age_seconds: Annotated[float, Field(ge=0, description="0 when none is ready")]

    @classmethod
    def of(cls, q: db.QueueInfo | db.QueueRow) -> QueueStatus:
        assert isinstance(q, db.QueueInfo)
        return cls(**_queue_fields(q), depth=q.depth, running=q.running,
                   oldest_ready_age_seconds=q.oldest_ready_age_seconds)


class TaskType(Resource):
    name: str
    description: str | None
    queue: str
    priority: int
    max_attempts: Annotated[int, Field(ge=1)]
    backoff_base_ms: Annotated[int, Field(ge=0)]
    backoff_max_delay_ms: Annotated[int, Field(ge=0)]
    backoff_max_jitter_ms: Annotated[int, Field(ge=0)]
    lease_ms: Annotated[int, Field(ge=1)]
    timeout_ms: Annotated[int | None, Field(ge=1, description="each attempt's timeout; null: none")]
    expire_after_ms: Annotated[int | None, Field(ge=1, description="a job not started this long after it may "
                                                                   "start ends expired; null: never")]
    max_snoozes: Annotated[int, Field(ge=0, description="snoozes a job may take; the next one ends it dead")]
    retain_succeeded_s: Annotated[float, Field(ge=0, description="a succeeded job is pruned this many seconds "
                                                                 "after it finished")]
    retain_failed_s: Annotated[float, Field(ge=0, description="a dead, cancelled or expired job is pruned this "
                                                              "many seconds after it finished")]
    payload_schema: Annotated[dict[str, Any], Field(description="JSON Schema of the payload")]

    @classmethod
    def of(cls, t: db.TaskType) -> TaskType:
        return cls(name=t.name, description=t.description, queue=t.queue, priority=t.priority,
                   max_attempts=t.max_attempts, backoff_base_ms=t.backoff_base_ms,
                   backoff_max_delay_ms=t.backoff_max_delay_ms, backoff_max_jitter_ms=t.backoff_max_jitter_ms,
                   lease_ms=t.lease_ms, timeout_ms=t.timeout_ms, expire_after_ms=t.expire_after_ms,
                   max_snoozes=t.max_snoozes, retain_succeeded_s=t.retain_succeeded.total_seconds(),
                   retain_failed_s=t.retain_failed.total_seconds(), payload_schema=t.payload_schema)


class Worker(Resource):
    id: str
    hostname: str | None
    pid: int | None
    queues: Annotated[list[str] | None, Field(description="null: every queue")]
    task_types: list[str]
    concurrency: Annotated[int | None, Field(ge=1)]
    started_at: Time
    last_seen_at: Annotated[Time, Field(description="its latest heartbeat (register_worker)")]
    expires_at: Annotated[Time, Field(description="alive until then unless it heartbeats again")]
    stopped_at: Annotated[TimeOrNull, Field(description="set when it said it stopped (a clean exit)")]
    alive: Annotated[bool, Field(description="the database's verdict: expiresAt is ahead of its clock and the "
                                             "worker has not stopped")]

    @classmethod
    def of(cls, w: db.WorkerStatus) -> Worker:
        return cls(id=w.id, hostname=w.hostname, pid=w.pid, queues=w.queues, task_types=w.task_types,
                   concurrency=w.concurrency, started_at=w.started_at, last_seen_at=w.last_seen_at,
                   expires_at=w.expires_at, stopped_at=w.stopped_at, alive=w.alive)


class QueueThroughput(Resource):
    name: str
    succeeded: Annotated[list[Annotated[int, Field(ge=0)]], Field(
        description="attempts finished succeeded, one count per bucket, oldest first")]
    failed: Annotated[list[Annotated[int, Field(ge=0)]], Field(
        description="attempts finished failed or abandoned, per bucket")]
    total_succeeded: Annotated[int, Field(ge=0)]
    total_failed: Annotated[int, Field(ge=0)]


class Throughput(Resource):
    since: Time
    until: Annotated[Time, Field(description="the database's clock now")]
    minutes: Annotated[int, Field(ge=1)]
    buckets: Annotated[int, Field(ge=1, le=60)]
    bucket_seconds: Annotated[float, Field(description="bucket i is [since + i·bucketSeconds, "
                                                       "since + (i+1)·bucketSeconds)")]
    queues: Annotated[list[QueueThroughput], Field(description="each queue with an attempt finished in the "
                                                               "window, by name")]


class Schedule(Resource):
    name: str
    task_type: str
    cron: Annotated[str, Field(description="five fields or a macro (@hourly, @daily, ...), read in UTC")]
    payload: Annotated[dict[str, Any], Field(description="every job's payload")]
    queue: Annotated[str | None, Field(description="null: the task type's")]
    priority: Annotated[int | None, Field(description="null: the task type's")]
    catch_up: Annotated[str, _enum(CATCH_UP, description="after a stop: enqueue the latest missed slot, all of "
                                                         "them (up to 100), or none")]
    paused: bool
    last_slot: Annotated[TimeOrNull, Field(description="the latest slot a job was enqueued for")]
    next_slot: Annotated[TimeOrNull, Field(description="when the next job is due; null when paused")]
    source: Annotated[str, _enum(SOURCES, description="code: a task's definition, rewritten at every worker "
                                                      "start; sql: a DBA's set_schedule, which the code does not "
                                                      "overwrite")]
    created_at: Time
    updated_at: Time

    @classmethod
    def of(cls, s: db.Schedule, next_slot: datetime | None) -> Schedule:
        return cls(name=s.name, task_type=s.task_type, cron=s.cron, payload=s.payload, queue=s.queue,
                   priority=s.priority, catch_up=s.catch_up, paused=s.paused, last_slot=s.last_slot,
                   next_slot=next_slot, source=s.source, created_at=s.created_at, updated_at=s.updated_at)


class ScheduleList(Resource):
    schedules: list[Schedule]


class FieldError(Resource):
    field: str
    problem: str


class ErrorBody(Resource):
    model_config = ConfigDict(json_schema_serialization_defaults_required=False)
    code: Annotated[str, Field(description="stable, snake_case; see docs/api.md")]
    message: Annotated[str, Field(description="for people")]
    details: Annotated[list[FieldError] | dict[str, Any] | None, Field(
        description="a list of {field, problem} for 400 and 422; an object (sqlstate, hint, …) otherwise; "
                    "absent when there is nothing to add")] = None


class ErrorEnvelope(Resource):
    error: ErrorBody

    def dump(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json", exclude_unset=True)
