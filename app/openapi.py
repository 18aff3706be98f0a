"""The OpenAPI 3.1 document of the JSON API, served at /api/openapi.json.

tests/api/test_openapi.py keeps it true: every /api route of the app is here with the same methods
and nothing else is, and every response the API tests receive validates against the schema here.
"""
from __future__ import annotations

import copy
import re
from typing import Any

from pgqw import db

STATUSES = list(db.STATUSES)


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _data(schema: dict[str, Any], description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": {
            "type": "object", "required": ["data"], "additionalProperties": False,
            "properties": {"data": schema},
        }}},
    }
    if headers:
        response["headers"] = headers
    return response


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref("ErrorEnvelope")}}}


_LOCATION = {"Location": {"description": "the job's URL", "schema": {"type": "string"}}}
_JOB_ID = {
    "name": "id", "in": "path", "required": True,
    "description": "the job's id; anything that is not a UUID names no job (404)",
    "schema": {"type": "string", "format": "uuid"},
}
_UNAVAILABLE = _error("the database cannot be reached or asked to retry (Retry-After: 1)")
_QUEUE_NAME = {
    "name": "id", "in": "path", "required": True, "description": "the queue's name (1 to 100 characters)",
    "schema": {"type": "string", "minLength": 1, "maxLength": 100},
}
_NOT_FOUND = _error("no job with this id (also for a malformed id)")
_CREATE_QUEUE = {
    "name": "create", "in": "query", "required": False,
    "description": "set up a queue that no job, setting, worker, task type or schedule has named yet (else 404)",
    "schema": {"type": "string", "enum": ["true", "false", "1", "0"], "default": "false"},
}
_QUEUE_NOT_FOUND = _error("no job, setting, worker, task type or schedule has named this queue, and create was not "
                          "asked for (code queue_not_found)")
_CREATE_FIELD = {"type": "boolean", "default": False,
                 "description": "set up a queue not known yet (as ?create=true); else 404"}
_SCHEDULE_NAME = {
    "name": "id", "in": "path", "required": True,
    "description": "the schedule's name (1 to 100 letters, digits, _ . : -); any other names no schedule (404)",
    "schema": {"type": "string"},
}

_TIME = {"type": "string", "format": "date-time", "description": "ISO 8601, UTC, with Z"}
_TIME_OR_NULL = {"type": ["string", "null"], "format": "date-time"}

SCHEMAS: dict[str, Any] = {
    "Job": {
        "type": "object",
        "additionalProperties": False,
        "required": ["id", "type", "queue", "priority", "status", "attempts", "maxAttempts", "lastError",
                     "nextAttemptAt", "createdAt", "startedAt", "finishedAt", "lockedBy", "payload",
                     "resultUrl"],
        "properties": {
            "id": {"type": "string", "format": "uuid"},
            "type": {"type": "string"},
            "queue": {"type": "string"},
            "priority": {"type": "integer"},
            "status": {"type": "string", "enum": STATUSES},
            "attempts": {"type": "integer", "minimum": 0, "description": "attempts started so far"},
            "maxAttempts": {"type": "integer", "minimum": 1},
            "lastError": {"type": ["string", "null"]},
            "nextAttemptAt": {**_TIME_OR_NULL, "description": "when the job may run next (pending or failed), "
                              "else null"},
            "createdAt": _TIME,
            "startedAt": {**_TIME_OR_NULL, "description": "start of the latest attempt"},
            "finishedAt": {**_TIME_OR_NULL, "description": "set when succeeded or dead"},
            "lockedBy": {"type": ["string", "null"], "description": "the worker holding it while processing"},
            "payload": {"type": "object"},
            "resultUrl": {"type": ["string", "null"], "description": "the result's URL once succeeded"},
        },
    },
    "Attempt": {
        "type": "object",
        "additionalProperties": False,
        "required": ["attempt", "workerId", "startedAt", "finishedAt", "outcome", "error"],
        "properties": {
            "attempt": {"type": "integer", "minimum": 1},
            "workerId": {"type": "string"},
            "startedAt": _TIME,
            "finishedAt": _TIME_OR_NULL,
            "outcome": {"type": ["string", "null"], "enum": ["succeeded", "failed", "abandoned", None],
                        "description": "null while the attempt runs"},
            "error": {"type": ["string", "null"]},
        },
    },
    "JobPage": {
        "type": "object",
        "additionalProperties": False,
        "required": ["jobs", "nextCursor"],
        "properties": {
            "jobs": {"type": "array", "items": _ref("Job")},
            "nextCursor": {"type": ["string", "null"],
                           "description": "pass as cursor for the next page; null on the last page"},
        },
    },
    "Stats": {
        "type": "object",
        "additionalProperties": False,
        "required": ["counts", "total"],
        "properties": {
            "counts": {"type": "object", "required": STATUSES, "additionalProperties": False,
                       "properties": {s: {"type": "integer", "minimum": 0} for s in STATUSES}},
            "total": {"type": "integer", "minimum": 0},
        },
    },
    "Queue": {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "paused", "maxRunning", "jobsPerSecond"],
        "properties": {
            "name": {"type": "string"},
            "paused": {"type": "boolean", "description": "claims skip a paused queue; enqueues still land in it"},
            "maxRunning": {"type": ["integer", "null"], "minimum": 1,
                           "description": "at most this many jobs processing at once, across all workers; "
                                          "null: no limit"},
            "jobsPerSecond": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1000000,
                              "description": "at most this many jobs started per second, across all workers; "
                                             "null: no rate"},
        },
    },
    "QueueStatus": {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "paused", "maxRunning", "jobsPerSecond", "depth", "running", "oldestReadyAgeSeconds"],
        "properties": {
            "name": {"type": "string"},
            "paused": {"type": "boolean"},
            "maxRunning": {"type": ["integer", "null"], "minimum": 1},
            "jobsPerSecond": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1000000},
            "depth": {"type": "integer", "minimum": 0, "description": "ready jobs (due, with a try left)"},
            "running": {"type": "integer", "minimum": 0, "description": "processing jobs"},
            "oldestReadyAgeSeconds": {"type": "number", "minimum": 0, "description": "0 when none is ready"},
        },
    },
    "Schedule": {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "task_type", "cron", "payload", "queue", "priority", "catch_up", "paused", "last_slot",
                     "next_slot", "source", "created_at", "updated_at"],
        "properties": {
            "name": {"type": "string"},
            "task_type": {"type": "string"},
            "cron": {"type": "string", "description": "five fields or a macro (@hourly, @daily, ...), read in UTC"},
            "payload": {"type": "object", "description": "every job's payload"},
            "queue": {"type": ["string", "null"], "description": "null: the task type's"},
            "priority": {"type": ["integer", "null"], "description": "null: the task type's"},
            "catch_up": {"enum": ["latest", "all", "none"],
                         "description": "after a stop: enqueue the latest missed slot, all of them (up to 100), "
                                        "or none"},
            "paused": {"type": "boolean"},
            "last_slot": {**_TIME_OR_NULL, "description": "the latest slot a job was enqueued for"},
            "next_slot": {**_TIME_OR_NULL, "description": "when the next job is due; null when paused"},
            "source": {"enum": ["code", "sql"],
                       "description": "code: a task's definition, rewritten at every worker start; sql: a DBA's "
                                      "set_schedule, which the code does not overwrite"},
            "created_at": _TIME,
            "updated_at": _TIME,
        },
    },
    "QueueLimit": {
        "type": "object",
        "additionalProperties": False,
        "required": ["max_running"],
        "properties": {"max_running": {"type": ["integer", "null"], "minimum": 1, "maximum": 2147483647,
                                       "description": "null removes the limit"},
                       "create": _CREATE_FIELD},
    },
    "QueueRate": {
        "type": "object",
        "additionalProperties": False,
        "required": ["jobs_per_second"],
        "properties": {"jobs_per_second": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1000000,
                                           "description": "at most 6 decimal places; null removes the rate"},
                       "create": _CREATE_FIELD},
    },
    "TaskType": {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "description", "queue", "priority", "maxAttempts", "backoffBaseMs",
                     "backoffMaxDelayMs", "backoffMaxJitterMs", "leaseMs", "payloadSchema"],
        "properties": {
            "name": {"type": "string"},
            "description": {"type": ["string", "null"]},
            "queue": {"type": "string"},
            "priority": {"type": "integer"},
            "maxAttempts": {"type": "integer", "minimum": 1},
            "backoffBaseMs": {"type": "integer", "minimum": 0},
            "backoffMaxDelayMs": {"type": "integer", "minimum": 0},
            "backoffMaxJitterMs": {"type": "integer", "minimum": 0},
            "leaseMs": {"type": "integer", "minimum": 1},
            "payloadSchema": {"type": "object", "description": "JSON Schema of the payload"},
        },
    },
    "Worker": {
        "type": "object",
        "additionalProperties": False,
        "required": ["id", "hostname", "pid", "queues", "taskTypes", "concurrency", "startedAt", "lastSeenAt",
                     "expiresAt", "stoppedAt", "alive"],
        "properties": {
            "id": {"type": "string"},
            "hostname": {"type": ["string", "null"]},
            "pid": {"type": ["integer", "null"]},
            "queues": {"type": ["array", "null"], "items": {"type": "string"}, "description": "null: every queue"},
            "taskTypes": {"type": "array", "items": {"type": "string"}},
            "concurrency": {"type": ["integer", "null"], "minimum": 1},
            "startedAt": _TIME,
            "lastSeenAt": {**_TIME, "description": "its latest heartbeat (register_worker)"},
            "expiresAt": {**_TIME, "description": "alive until then unless it heartbeats again"},
            "stoppedAt": {**_TIME_OR_NULL, "description": "set when it said it stopped (a clean exit)"},
            "alive": {"type": "boolean", "description": "the database's verdict: expiresAt is ahead of its clock "
                                                        "and the worker has not stopped"},
        },
    },
    "Throughput": {
        "type": "object",
        "additionalProperties": False,
        "required": ["since", "until", "minutes", "buckets", "bucketSeconds", "queues"],
        "properties": {
            "since": _TIME,
            "until": {**_TIME, "description": "the database's clock now"},
            "minutes": {"type": "integer", "minimum": 1},
            "buckets": {"type": "integer", "minimum": 1, "maximum": 60},
            "bucketSeconds": {"type": "number", "description": "bucket i is [since + i·bucketSeconds, "
                                                               "since + (i+1)·bucketSeconds)"},
            "queues": {"type": "array", "description": "each queue with an attempt finished in the window, by name",
                       "items": {
                           "type": "object", "additionalProperties": False,
                           "required": ["name", "succeeded", "failed", "totalSucceeded", "totalFailed"],
                           "properties": {
                               "name": {"type": "string"},
                               "succeeded": {"type": "array", "items": {"type": "integer", "minimum": 0},
                                             "description": "attempts finished succeeded, one count per bucket, "
                                                            "oldest first"},
                               "failed": {"type": "array", "items": {"type": "integer", "minimum": 0},
                                          "description": "attempts finished failed or abandoned, per bucket"},
                               "totalSucceeded": {"type": "integer", "minimum": 0},
                               "totalFailed": {"type": "integer", "minimum": 0},
                           }}},
        },
    },
    "FieldError": {
        "type": "object",
        "required": ["field", "problem"],
        "additionalProperties": False,
        "properties": {"field": {"type": "string"}, "problem": {"type": "string"}},
    },
    "ErrorEnvelope": {
        "type": "object",
        "required": ["error"],
        "additionalProperties": False,
        "properties": {"error": {
            "type": "object",
            "required": ["code", "message"],
            "additionalProperties": False,
            "properties": {
                "code": {"type": "string", "description": "stable, snake_case; see docs/api.md"},
                "message": {"type": "string", "description": "for people"},
                "details": {"description": "a list of {field, problem} for 400 and 422; "
                            "an object (sqlstate, hint, …) otherwise",
                            "oneOf": [{"type": "array", "items": _ref("FieldError")}, {"type": "object"}]},
            },
        }},
    },
}

OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "pg-queue-worker API",
        "version": "1",
        "description": "Enqueue jobs of any registered task type, follow them, retry dead ones and fetch "
                       "their results. The request body of POST /api/jobs is made from the payload schemas "
                       "in the task_types table. "
                       "Every response is {\"data\": ...} or {\"error\": {\"code\", \"message\", \"details\"?}}.",
    },
    "paths": {
        "/api/jobs": {
            "post": {
                "operationId": "createJob",
                "summary": "Enqueue a job (one insert; never waits for the work)",
                "parameters": [{
                    "name": "Idempotency-Key", "in": "header", "required": True,
                    "description": "1 to 255 visible ASCII characters (! to ~, no spaces); the same key and "
                                   "body again returns the same job",
                    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]{1,255}$"},
                }],
                "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("CreateJob")}}},
                "responses": {
                    "202": _data(_ref("Job"), "a new job", _LOCATION),
                    "200": _data(_ref("Job"), "the job this key already made (same body)", _LOCATION),
                    "400": _error("no or bad Idempotency-Key, or the body is not JSON"),
                    "409": _error("the key was already used with a different body"),
                    "413": _error("the body is larger than MAX_BODY_BYTES"),
                    "415": _error("Content-Type is not application/json"),
                    "422": _error("the body is not a valid job; details name every bad field"),
                    "503": _UNAVAILABLE,
                },
            },
            "get": {
                "operationId": "listJobs",
                "summary": "Jobs newest first, keyset-paginated",
                "parameters": [
                    {"name": "status", "in": "query", "schema": {"type": "string", "enum": STATUSES},
                     "description": "only jobs in this status"},
                    {"name": "limit", "in": "query",
                     "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}},
                    {"name": "cursor", "in": "query", "schema": {"type": "string"},
                     "description": "nextCursor of the previous page (opaque; send the same filters with it)"},
                    {"name": "id_prefix", "in": "query",
                     "schema": {"type": "string", "pattern": "^[0-9a-fA-F-]{1,36}$"},
                     "description": "only jobs whose id starts with these 1 to 32 hex digits (dashes allowed)"},
                    {"name": "type", "in": "query", "schema": {"type": "string", "minLength": 1, "maxLength": 100},
                     "description": "only jobs of this task type"},
                    {"name": "queue", "in": "query", "schema": {"type": "string", "minLength": 1, "maxLength": 100},
                     "description": "only jobs in this queue"},
                ],
                "responses": {
                    "200": _data(_ref("JobPage"), "one page of jobs"),
                    "400": _error("bad status, limit, cursor, id_prefix, type or queue, or an unknown parameter"),
                    "503": _UNAVAILABLE,
                },
            },
        },
        "/api/jobs/{id}": {
            "get": {
                "operationId": "getJob",
                "summary": "One job",
                "parameters": [_JOB_ID],
                "responses": {"200": _data(_ref("Job"), "the job"), "404": _NOT_FOUND, "503": _UNAVAILABLE},
            },
        },
        "/api/jobs/{id}/attempts": {
            "get": {
                "operationId": "getAttempts",
                "summary": "Every attempt of a job, oldest first",
                "parameters": [_JOB_ID],
                "responses": {
                    "200": _data({"type": "array", "items": _ref("Attempt")}, "the attempts"),
                    "404": _NOT_FOUND,
                    "503": _UNAVAILABLE,
                },
            },
        },
        "/api/jobs/{id}/retry": {
            "post": {
                "operationId": "retryJob",
                "summary": "Give a dead job more attempts (dead → pending)",
                "parameters": [_JOB_ID],
                "responses": {
                    "202": _data(_ref("Job"), "the job, pending again", _LOCATION),
                    "404": _NOT_FOUND,
                    "409": _error("the job is not dead"),
                    "503": _UNAVAILABLE,
                },
            },
        },
        "/api/jobs/{id}/cancel": {
            "post": {
                "operationId": "cancelJob",
                "summary": "Cancel a job: a pending or failed one ends cancelled at once; a processing one is "
                           "asked to stop and ends cancelled when its worker stops (or its lease runs out)",
                "parameters": [_JOB_ID],
                "responses": {
                    "202": _data(_ref("Job"), "the job: cancelled, or still processing with its stop requested",
                                 _LOCATION),
                    "404": _NOT_FOUND,
                    "409": _error("the job has already finished (succeeded, dead or cancelled)"),
                    "503": _UNAVAILABLE,
                },
            },
        },
        "/api/jobs/{id}/flyer": {
            "get": {
                "operationId": "getFlyer",
                "summary": "The job's PDF, once the job has succeeded",
                "parameters": [_JOB_ID],
                "responses": {
                    "200": {
                        "description": "the flyer",
                        "headers": {"Content-Disposition": {
                            "schema": {"type": "string"}, "description": 'inline; filename="flyer-<id>.pdf"'}},
                        "content": {"application/pdf": {"schema": {"type": "string", "format": "binary"}}},
                    },
                    "404": _error("no such job, or it has not succeeded yet (code flyer_not_ready)"),
                    "503": _UNAVAILABLE,
                },
            },
        },
        "/api/jobs/{id}/result": {
            "get": {
                "operationId": "getResult",
                "summary": "The job's result, once the job has succeeded",
                "parameters": [_JOB_ID],
                "responses": {
                    "200": {
                        "description": "a JSON result as {\"data\": value}, or a file with its own content type",
                        "content": {"application/json": {"schema": {
                                        "type": "object", "required": ["data"], "additionalProperties": False,
                                        "properties": {"data": {}}}},
                                    "*/*": {"schema": {"type": "string", "format": "binary"}}},
                    },
                    "404": _error("no such job; not succeeded yet (result_not_ready); succeeded without a "
                                  "result (no_result)"),
                    "503": _UNAVAILABLE,
                },
            },
        },
        "/api/task-types": {
            "get": {
                "operationId": "listTaskTypes",
                "summary": "The registered task types: payload schema and effective settings",
                "responses": {"200": _data({"type": "array", "items": _ref("TaskType")}, "the task types"),
                              "503": _UNAVAILABLE},
            },
        },
        "/api/queues": {
            "get": {
                "operationId": "listQueues",
                "summary": "Every known queue (with a job, or paused or limited): paused, limit, depth, running, "
                           "age of the oldest ready job",
                "responses": {"200": _data({"type": "array", "items": _ref("QueueStatus")}, "the queues"),
                              "503": _UNAVAILABLE},
            },
        },
        "/api/queues/{id}/pause": {
            "post": {
                "operationId": "pauseQueue",
                "summary": "Pause a queue: claims skip it, enqueues still land in it (idempotent)",
                "parameters": [_QUEUE_NAME, _CREATE_QUEUE],
                "responses": {"200": _data(_ref("Queue"), "the queue, paused"),
                              "400": _error("a blank or over-long name, or create not a boolean"),
                              "404": _QUEUE_NOT_FOUND, "503": _UNAVAILABLE},
            },
        },
        "/api/queues/{id}/resume": {
            "post": {
                "operationId": "resumeQueue",
                "summary": "Resume a queue: claims take from it again (idempotent)",
                "parameters": [_QUEUE_NAME, _CREATE_QUEUE],
                "responses": {"200": _data(_ref("Queue"), "the queue, running"),
                              "400": _error("a blank or over-long name, or create not a boolean"),
                              "404": _QUEUE_NOT_FOUND, "503": _UNAVAILABLE},
            },
        },
        "/api/queues/{id}/limit": {
            **{method: {
                "operationId": f"setQueueLimit{suffix}",
                "summary": "At most max_running of the queue's jobs processing at once, across all workers "
                           "(null: no limit)",
                "parameters": [_QUEUE_NAME, _CREATE_QUEUE],
                "requestBody": {"required": True,
                                "content": {"application/json": {"schema": _ref("QueueLimit")}}},
                "responses": {"200": _data(_ref("Queue"), "the queue with its limit"),
                              "400": _error("a bad name, or max_running missing, below 1 or not a whole number"),
                              "404": _QUEUE_NOT_FOUND,
                              "413": _error("the body is too large"),
                              "415": _error("the body is not application/json"),
                              "503": _UNAVAILABLE},
            } for method, suffix in (("put", ""), ("post", "Post"))},
        },
        "/api/workers": {
            "get": {
                "operationId": "listWorkers",
                "summary": "The registered workers, live ones first (at most 200): queues, task types, heartbeat, "
                           "alive or gone",
                "responses": {"200": _data({"type": "array", "items": _ref("Worker")}, "the workers"),
                              "503": _UNAVAILABLE},
            },
        },
        "/api/throughput": {
            "get": {
                "operationId": "getThroughput",
                "summary": "Jobs that finished (succeeded or dead) per queue over the last minutes, in at most 60 buckets ending now",
                "parameters": [{"name": "minutes", "in": "query",
                                "schema": {"type": "integer", "minimum": 1, "maximum": 1440, "default": 60}}],
                "responses": {"200": _data(_ref("Throughput"), "the counts per queue and bucket"),
                              "400": _error("minutes is not a whole number from 1 to 1440, or an unknown parameter"),
                              "503": _UNAVAILABLE},
            },
        },
        "/api/schedules": {
            "get": {
                "operationId": "listSchedules",
                "summary": "Every schedule (periodic job) by name, with its next slot",
                "responses": {"200": _data({"type": "object", "required": ["schedules"], "additionalProperties": False,
                                            "properties": {"schedules": {"type": "array",
                                                                         "items": _ref("Schedule")}}},
                                           "the schedules"),
                              "503": _UNAVAILABLE},
            },
        },
        "/api/schedules/{id}/pause": {
            "post": {
                "operationId": "pauseSchedule",
                "summary": "Pause a schedule: it enqueues nothing until resumed (idempotent)",
                "parameters": [_SCHEDULE_NAME],
                "responses": {"200": _data(_ref("Schedule"), "the schedule, paused"),
                              "404": _error("no schedule has this name"), "503": _UNAVAILABLE},
            },
        },
        "/api/schedules/{id}/resume": {
            "post": {
                "operationId": "resumeSchedule",
                "summary": "Resume a schedule from its next slot after now; the slots passed while paused are "
                           "skipped (idempotent)",
                "parameters": [_SCHEDULE_NAME],
                "responses": {"200": _data(_ref("Schedule"), "the schedule, running"),
                              "404": _error("no schedule has this name"), "503": _UNAVAILABLE},
            },
        },
        "/api/queues/{id}/rate": {
            **{method: {
                "operationId": f"setQueueRate{suffix}",
                "summary": "At most jobs_per_second of the queue's jobs started per second, across all workers "
                           "(null: no rate); checked at each claim",
                "parameters": [_QUEUE_NAME, _CREATE_QUEUE],
                "requestBody": {"required": True,
                                "content": {"application/json": {"schema": _ref("QueueRate")}}},
                "responses": {"200": _data(_ref("Queue"), "the queue with its rate"),
                              "400": _error("a bad name, or jobs_per_second missing, not a number, not above 0, "
                                            "above 1000000 or with more than 6 decimal places"),
                              "404": _QUEUE_NOT_FOUND,
                              "413": _error("the body is too large"),
                              "415": _error("the body is not application/json"),
                              "503": _UNAVAILABLE},
            } for method, suffix in (("put", ""), ("post", "Post"))},
        },
        "/api/stats": {
            "get": {
                "operationId": "getStats",
                "summary": "Jobs per status (a count over the whole table)",
                "responses": {"200": _data(_ref("Stats"), "the counts"), "503": _UNAVAILABLE},
            },
        },
        "/api/openapi.json": {
            "get": {
                "operationId": "getOpenApi",
                "summary": "This document",
                "responses": {"200": {"description": "OpenAPI 3.1",
                                      "content": {"application/json": {"schema": {"type": "object"}}}}},
            },
        },
    },
    "components": {"schemas": SCHEMAS},
}
OPENAPI["components"]["securitySchemes"] = {
    "bearerAuth": {
        "type": "http", "scheme": "bearer",
        "description": "a token from API_TOKENS (read and write) or API_READ_TOKENS (GET only); "
                       "asked for only when the server has tokens configured",
    },
}
# Any route may also answer these; the envelope is the same.
COMMON_ERRORS: dict[str, dict[str, Any]] = {
    "401": _error("no bearer token, or not a valid one (only when API_TOKENS or API_READ_TOKENS is set); "
                  "WWW-Authenticate says which"),
    "403": _error("a read-only token (API_READ_TOKENS) was used for a call that changes something; or, "
                  "without tokens, a Host or Origin that is not this API's (forbidden_host, forbidden_origin)"),
    "405": _error("method not allowed (Allow lists the methods)"),
    "500": _error("an unexpected error; the message is hidden and the error logged"),
}
for _item in OPENAPI["paths"].values():
    for _op in _item.values():
        for _status, _response in COMMON_ERRORS.items():
            _op["responses"].setdefault(_status, _response)


_COMPONENT = re.compile(r"[^A-Za-z0-9._-]")


def _component_name(task_name: str, taken: set[str]) -> str:
    """Payload.<name>, the characters a component name may not hold made _, and numbered when another
    type's name came out the same (send email beside send_email: Payload.send_email_2)."""
    base = "Payload." + _COMPONENT.sub("_", task_name)
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    taken.add(name)
    return name


def _hoist(schema: dict[str, Any], prefix: str, into: dict[str, Any]) -> dict[str, Any]:
    """The schema with its $defs moved to components (named prefix.Def) and its refs rewritten."""
    schema = copy.deepcopy(schema)
    defs = schema.pop("$defs", {})

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                node = {**node, "$ref": f"#/components/schemas/{prefix}.{_COMPONENT.sub('_', ref[8:])}"}
            return {k: rewrite(v) for k, v in node.items()}
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    for name, sub in defs.items():
        into[f"{prefix}.{_COMPONENT.sub('_', name)}"] = rewrite(sub)
    return rewrite(schema)


def create_job_schemas(task_types: list[tuple[str, dict[str, Any], str | None]]) -> dict[str, Any]:
    """CreateJob (from the request model) and one payload schema per registered task type: the body
    of POST /api/jobs is one of CreateJob's shapes, one per type."""
    from .api import JobRequest

    out: dict[str, Any] = {}
    base = _hoist(JobRequest.model_json_schema(), "CreateJob", out)
    variants = []
    taken: set[str] = set()
    # Names that are valid component names as they are keep them; the others are numbered if need be.
    components = {name: _component_name(name, taken)
                  for name, _, _ in sorted(task_types, key=lambda t: _COMPONENT.search(t[0]) is not None)}
    for name, payload_schema, description in task_types:
        component = components[name]
        payload = _hoist(payload_schema, component, out)
        if description and "description" not in payload:
            payload["description"] = description
        out[component] = payload
        variant = copy.deepcopy(base)
        variant["title"] = f"CreateJob.{name}"
        variant["properties"]["type"] = {"const": name}
        variant["properties"]["payload"] = _ref(component)
        variants.append(variant)
    out["CreateJob"] = {"oneOf": variants, "description": "a job of one registered task type"} if variants else base
    return out


def document(*, auth_required: bool, task_types: list[tuple[str, dict[str, Any], str | None]]) -> dict[str, Any]:
    """The document as served: the request body made from the registered task types, and a
    bearer-token security requirement when the server asks for one."""
    doc = {**OPENAPI, "components": {**OPENAPI["components"],
                                     "schemas": {**SCHEMAS, **create_job_schemas(task_types)}}}
    if auth_required:
        doc["security"] = [{"bearerAuth": []}]
    return doc
