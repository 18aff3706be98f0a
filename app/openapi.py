"""The OpenAPI 3.1 document of the JSON API, served at /api/openapi.json.

Generated where it can be: components/schemas are the JSON Schemas of app/models/'s resources and
request bodies (their enums the database's own lists), and the body of POST /api/jobs is made from the
payload schemas of the registered task types (openapi_payloads.py). The paths are declared here and refer
to those schemas.
tests/api/test_openapi.py keeps it true: every /api route of the app is here with the same methods and
nothing else is, and every route's real answer validates against the document.
This module imports the models, never the routes (app/api/docs.py serves it).
"""
from __future__ import annotations

import copy
from typing import Any

from .models import REQUESTS, RESPONSES, STATUSES
from .openapi_payloads import create_job_schemas, ref


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


def error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ref("ErrorEnvelope")}}}


_LOCATION = {"Location": {"description": "the job's URL", "schema": {"type": "string"}}}
JOB_ID = {
    "name": "id", "in": "path", "required": True,
    "description": "the job's id; anything that is not a UUID names no job (404)",
    "schema": {"type": "string", "format": "uuid"},
}
UNAVAILABLE = error("the database cannot be reached or asked to retry (Retry-After: 1)")
_QUEUE_NAME = {
    "name": "id", "in": "path", "required": True, "description": "the queue's name (1 to 100 characters)",
    "schema": {"type": "string", "minLength": 1, "maxLength": 100},
}
_NOT_FOUND = error("no job with this id (also for a malformed id)")
_CREATE_QUEUE = {
    "name": "create", "in": "query", "required": False,
    "description": "set up a queue that no job, setting, worker, task type or schedule has named yet (else 404)",
    "schema": {"type": "string", "enum": ["true", "false", "1", "0"], "default": "false"},
}
_QUEUE_NOT_FOUND = error("no job, setting, worker, task type or schedule has named this queue, and create was not "
                          "asked for (code queue_not_found)")
_SCHEDULE_NAME = {
    "name": "id", "in": "path", "required": True,
    "description": "the schedule's name (1 to 100 letters, digits, _ . : -); any other names no schedule (404)",
    "schema": {"type": "string"},
}



def _id_parameter(what: str) -> dict[str, Any]:
    return {"name": "id", "in": "path", "required": True,
            "description": f"the {what}'s id; anything that is not a UUID names no {what} (404)",
            "schema": {"type": "string", "format": "uuid"}}


_BULK_RESPONSES = {
    "200": _data(ref("BulkResult"), "how many jobs changed"),
    "400": error("the body is not JSON, a filter is bad, or none is given without \"all\": true (code "
                  "filter_required)"),
    "413": error("the body is too large"),
    "415": error("the body is not application/json"),
    "503": UNAVAILABLE,
}

REF_TEMPLATE = "#/components/schemas/{model}"


def model_schemas() -> dict[str, Any]:
    """components/schemas from app/models/: each response model's JSON Schema as it is dumped
    (serialization), each request model's as it is read (validation); nested models by $ref."""
    out: dict[str, Any] = {}
    for models, mode in ((RESPONSES, "serialization"), (REQUESTS, "validation")):
        for model in models:
            schema = model.model_json_schema(mode=mode, ref_template=REF_TEMPLATE)  # type: ignore[arg-type]
            out.update(schema.pop("$defs", {}))
            out[model.__name__] = schema
    return out


SCHEMAS: dict[str, Any] = model_schemas()

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
                "requestBody": {"required": True, "content": {"application/json": {"schema": ref("CreateJob")}}},
                "responses": {
                    "202": _data(ref("Job"), "a new job", _LOCATION),
                    "200": _data(ref("Job"), "the job this key already made (same body)", _LOCATION),
                    "400": error("no or bad Idempotency-Key, or the body is not JSON"),
                    "409": error("the key was already used with a different body"),
                    "413": error("the body is larger than MAX_BODY_BYTES"),
                    "415": error("Content-Type is not application/json"),
                    "422": error("the body is not a valid job (details name every bad field), its type is not "
                                  "registered, or a dependency cannot be (an unknown parent: invalid_dependency)"),
                    "503": UNAVAILABLE,
                },
            },
            "get": {
                "operationId": "listJobs",
                "summary": "Jobs newest first, keyset-paginated",
                "parameters": [
                    {"name": "status", "in": "query", "schema": {"type": "string", "enum": list(STATUSES)},
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
                    "200": _data(ref("JobPage"), "one page of jobs"),
                    "400": error("bad status, limit, cursor, id_prefix, type or queue, or an unknown parameter"),
                    "503": UNAVAILABLE,
                },
            },
        },
        "/api/jobs/{id}": {
            "get": {
                "operationId": "getJob",
                "summary": "One job",
                "parameters": [JOB_ID],
                "responses": {"200": _data(ref("Job"), "the job"), "404": _NOT_FOUND, "503": UNAVAILABLE},
            },
        },
        "/api/jobs/{id}/attempts": {
            "get": {
                "operationId": "getAttempts",
                "summary": "Every attempt of a job, oldest first",
                "parameters": [JOB_ID],
                "responses": {
                    "200": _data({"type": "array", "items": ref("Attempt")}, "the attempts"),
                    "404": _NOT_FOUND,
                    "503": UNAVAILABLE,
                },
            },
        },
        "/api/jobs/{id}/retry": {
            "post": {
                "operationId": "retryJob",
                "summary": "Give a dead job more attempts (dead → pending)",
                "parameters": [JOB_ID],
                "responses": {
                    "202": _data(ref("Job"), "the job, pending again", _LOCATION),
                    "404": _NOT_FOUND,
                    "409": error("the job is not dead"),
                    "503": UNAVAILABLE,
                },
            },
        },
        "/api/jobs/{id}/cancel": {
            "post": {
                "operationId": "cancelJob",
                "summary": "Cancel a job: a pending or failed one ends cancelled at once; a processing one is "
                           "asked to stop and ends cancelled when its worker stops (or its lease runs out)",
                "parameters": [JOB_ID],
                "responses": {
                    "202": _data(ref("Job"), "the job: cancelled, or still processing with its stop requested",
                                 _LOCATION),
                    "404": _NOT_FOUND,
                    "409": error("the job has already finished (succeeded, dead or cancelled)"),
                    "503": UNAVAILABLE,
                },
            },
        },
        "/api/jobs/{id}/result": {
            "get": {
                "operationId": "getResult",
                "summary": "The job's result, once the job has succeeded",
                "parameters": [JOB_ID],
                "responses": {
                    "200": {
                        "description": "a JSON result as {\"data\": value}, or a file with its own content type",
                        "content": {"application/json": {"schema": {
                                        "type": "object", "required": ["data"], "additionalProperties": False,
                                        "properties": {"data": {}}}},
                                    "*/*": {"schema": {"type": "string", "format": "binary"}}},
                    },
                    "404": error("no such job; not succeeded yet (result_not_ready); succeeded without a "
                                  "result (no_result)"),
                    "503": UNAVAILABLE,
                },
            },
        },
        "/api/workflows/{id}": {
            "get": {
                "operationId": "getWorkflow",
                "summary": "A workflow's graph: every job in enqueue order, each with its parents (dependsOn) "
                           "and runAnyway",
                "parameters": [_id_parameter("workflow")],
                "responses": {"200": _data(ref("Workflow"), "the workflow"),
                              "404": error("no job has this workflow id (also for a malformed id; code "
                                            "workflow_not_found)"),
                              "503": UNAVAILABLE},
            },
        },
        "/api/batches": {
            "post": {
                "operationId": "createBatch",
                "summary": "Enqueue jobs as one batch, in one transaction; the callback job is enqueued once, "
                           "when every job of the batch has reached a final status",
                "requestBody": {"required": True,
                                "content": {"application/json": {"schema": ref("BatchRequest")}}},
                "responses": {
                    "202": _data(ref("Batch"), "a new batch and its jobs, in the order sent"),
                    "200": _data(ref("Batch"), "the batch this idempotencyKey already made"),
                    "400": error("the body is not JSON, or a stored function refused an argument"),
                    "409": error("a job's idempotencyKey was already used for a different job"),
                    "413": error("the body is larger than MAX_BODY_BYTES, or a payload is too large"),
                    "415": error("Content-Type is not application/json"),
                    "422": error("the batch is not valid (details name every bad field, jobs.<n>. for a job's), "
                                  "a task type is not registered, or a dependency cannot be (invalid_dependency)"),
                    "503": UNAVAILABLE,
                },
            },
        },
        "/api/batches/{id}": {
            "get": {
                "operationId": "getBatch",
                "summary": "A batch's progress: its jobs per status, its callback job, when it finished",
                "parameters": [_id_parameter("batch")],
                "responses": {"200": _data(ref("BatchStatus"), "the batch"),
                              "404": error("no batch has this id (also for a malformed id; code batch_not_found)"),
                              "503": UNAVAILABLE},
            },
        },
        "/api/jobs/bulk/retry": {
            "post": {
                "operationId": "retryJobs",
                "summary": "Retry every dead job the filters match (dead → pending), in bounded batches",
                "requestBody": {"required": True,
                                "content": {"application/json": {"schema": ref("BulkFilter")}}},
                "responses": _BULK_RESPONSES,
            },
        },
        "/api/jobs/bulk/cancel": {
            "post": {
                "operationId": "cancelJobs",
                "summary": "Cancel every job the filters match that is blocked, pending, failed or processing "
                           "(or of the statuses given), in bounded batches; a processing one is asked to stop",
                "requestBody": {"required": True,
                                "content": {"application/json": {"schema": ref("BulkCancelFilter")}}},
                "responses": _BULK_RESPONSES,
            },
        },
        "/api/task-types": {
            "get": {
                "operationId": "listTaskTypes",
                "summary": "The registered task types: payload schema and effective settings",
                "responses": {"200": _data({"type": "array", "items": ref("TaskType")}, "the task types"),
                              "503": UNAVAILABLE},
            },
        },
        "/api/queues": {
            "get": {
                "operationId": "listQueues",
                "summary": "Every known queue (with a job, or paused or limited): paused, limit, depth, running, "
                           "age of the oldest ready job",
                "responses": {"200": _data({"type": "array", "items": ref("QueueStatus")}, "the queues"),
                              "503": UNAVAILABLE},
            },
        },
        "/api/queues/{id}/pause": {
            "post": {
                "operationId": "pauseQueue",
                "summary": "Pause a queue: claims skip it, enqueues still land in it (idempotent)",
                "parameters": [_QUEUE_NAME, _CREATE_QUEUE],
                "responses": {"200": _data(ref("Queue"), "the queue, paused"),
                              "400": error("a blank or over-long name, or create not a boolean"),
                              "404": _QUEUE_NOT_FOUND, "503": UNAVAILABLE},
            },
        },
        "/api/queues/{id}/resume": {
            "post": {
                "operationId": "resumeQueue",
                "summary": "Resume a queue: claims take from it again (idempotent)",
                "parameters": [_QUEUE_NAME, _CREATE_QUEUE],
                "responses": {"200": _data(ref("Queue"), "the queue, running"),
                              "400": error("a blank or over-long name, or create not a boolean"),
                              "404": _QUEUE_NOT_FOUND, "503": UNAVAILABLE},
            },
        },
        "/api/queues/{id}/limit": {
            **{method: {
                "operationId": f"setQueueLimit{suffix}",
                "summary": "At most maxRunning of the queue's jobs processing at once, across all workers "
                           "(null: no limit)",
                "parameters": [_QUEUE_NAME, _CREATE_QUEUE],
                "requestBody": {"required": True,
                                "content": {"application/json": {"schema": ref("QueueLimit")}}},
                "responses": {"200": _data(ref("Queue"), "the queue with its limit"),
                              "400": error("a bad name, or maxRunning missing, below 1 or not a whole number"),
                              "404": _QUEUE_NOT_FOUND,
                              "413": error("the body is too large"),
                              "415": error("the body is not application/json"),
                              "503": UNAVAILABLE},
            } for method, suffix in (("put", ""), ("post", "Post"))},
        },
        "/api/queues/{id}/key-limit": {
            **{method: {
                "operationId": f"setQueueKeyLimit{suffix}",
                "summary": "At most maxRunning of the queue's jobs processing at once per concurrency key, across "
                           "all workers (null: no limit)",
                "parameters": [_QUEUE_NAME, _CREATE_QUEUE],
                "requestBody": {"required": True,
                                "content": {"application/json": {"schema": ref("QueueKeyLimit")}}},
                "responses": {"200": _data(ref("Queue"), "the queue with its limit per key"),
                              "400": error("a bad name, or maxRunning missing, below 1 or not a whole number"),
                              "404": _QUEUE_NOT_FOUND,
                              "413": error("the body is too large"),
                              "415": error("the body is not application/json"),
                              "503": UNAVAILABLE},
            } for method, suffix in (("put", ""), ("post", "Post"))},
        },
        "/api/workers": {
            "get": {
                "operationId": "listWorkers",
                "summary": "The registered workers, live ones first (at most 200): queues, task types, heartbeat, "
                           "alive or gone",
                "responses": {"200": _data({"type": "array", "items": ref("Worker")}, "the workers"),
                              "503": UNAVAILABLE},
            },
        },
        "/api/throughput": {
            "get": {
                "operationId": "getThroughput",
                "summary": "Jobs that finished (succeeded or dead) per queue over the last minutes, in at most 60 buckets ending now",
                "parameters": [{"name": "minutes", "in": "query",
                                "schema": {"type": "integer", "minimum": 1, "maximum": 1440, "default": 60}}],
                "responses": {"200": _data(ref("Throughput"), "the counts per queue and bucket"),
                              "400": error("minutes is not a whole number from 1 to 1440, or an unknown parameter"),
                              "503": UNAVAILABLE},
            },
        },
        "/api/schedules": {
            "get": {
                "operationId": "listSchedules",
                "summary": "Every schedule (periodic job) by name, with its next slot",
                "responses": {"200": _data(ref("ScheduleList"), "the schedules"),
                              "503": UNAVAILABLE},
            },
        },
        "/api/schedules/{id}/pause": {
            "post": {
                "operationId": "pauseSchedule",
                "summary": "Pause a schedule: it enqueues nothing until resumed (idempotent)",
                "parameters": [_SCHEDULE_NAME],
                "responses": {"200": _data(ref("Schedule"), "the schedule, paused"),
                              "404": error("no schedule has this name"), "503": UNAVAILABLE},
            },
        },
        "/api/schedules/{id}/resume": {
            "post": {
                "operationId": "resumeSchedule",
                "summary": "Resume a schedule from its next slot after now; the slots passed while paused are "
                           "skipped (idempotent)",
                "parameters": [_SCHEDULE_NAME],
                "responses": {"200": _data(ref("Schedule"), "the schedule, running"),
                              "404": error("no schedule has this name"), "503": UNAVAILABLE},
            },
        },
        "/api/queues/{id}/rate": {
            **{method: {
                "operationId": f"setQueueRate{suffix}",
                "summary": "At most jobsPerSecond of the queue's jobs started per second, across all workers "
                           "(null: no rate); checked at each claim",
                "parameters": [_QUEUE_NAME, _CREATE_QUEUE],
                "requestBody": {"required": True,
                                "content": {"application/json": {"schema": ref("QueueRate")}}},
                "responses": {"200": _data(ref("Queue"), "the queue with its rate"),
                              "400": error("a bad name, or jobsPerSecond missing, not a number, not above 0, "
                                            "above 1000000 or with more than 6 decimal places"),
                              "404": _QUEUE_NOT_FOUND,
                              "413": error("the body is too large"),
                              "415": error("the body is not application/json"),
                              "503": UNAVAILABLE},
            } for method, suffix in (("put", ""), ("post", "Post"))},
        },
        "/api/stats": {
            "get": {
                "operationId": "getStats",
                "summary": "Jobs per status (a count over the whole table)",
                "responses": {"200": _data(ref("Stats"), "the counts"), "503": UNAVAILABLE},
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
    "401": error("no bearer token, or not a valid one (only when API_TOKENS or API_READ_TOKENS is set); "
                  "WWW-Authenticate says which"),
    "403": error("a read-only token (API_READ_TOKENS) was used for a call that changes something; or, "
                  "without tokens, a Host or Origin that is not this API's (forbidden_host, forbidden_origin)"),
    "405": error("method not allowed (Allow lists the methods)"),
    "500": error("an unexpected error; the message is hidden and the error logged"),
}


def with_common_errors(paths: dict[str, Any]) -> dict[str, Any]:
    """The path items with the errors any route may answer added to each operation."""
    paths = copy.deepcopy(paths)
    for item in paths.values():
        for op in item.values():
            for status, response in COMMON_ERRORS.items():
                op["responses"].setdefault(status, response)
    return paths


OPENAPI["paths"] = with_common_errors(OPENAPI["paths"])


def document(*, auth_required: bool, task_types: list[tuple[str, dict[str, Any], str | None]],
             extra_paths: dict[str, Any] | None = None) -> dict[str, Any]:
    """The document as served: the request body made from the registered task types, the paths the
    task modules added (app/extensions.py), and a bearer-token security requirement when the server
    asks for one."""
    doc = {**OPENAPI, "components": {**OPENAPI["components"],
                                     "schemas": {**SCHEMAS, **create_job_schemas(task_types)}}}
    if extra_paths:
        doc["paths"] = {**OPENAPI["paths"], **with_common_errors(extra_paths)}
    if auth_required:
        doc["security"] = [{"bearerAuth": []}]
    return doc
