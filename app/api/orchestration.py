"""Jobs that wait for each other and jobs handled together: a workflow's graph (GET /api/workflows/{id}),
batches with a callback (POST /api/batches, GET /api/batches/{id}), and the bulk actions on the jobs a
filter matches (POST /api/jobs/bulk/retry, POST /api/jobs/bulk/cancel). The rules (when a blocked job
becomes pending, when a batch's callback is enqueued, which jobs a bulk action changes) are the stored
functions'; these routes check the input and call pgqw.db."""
from __future__ import annotations

import uuid
from typing import Any

import psycopg
from flask import Blueprint, Response
from pydantic import ValidationError

from pgqw import db, errors

from ..errors import ApiError
from ..models import (
    BATCH_MAX,
    Batch,
    BatchJobRequest,
    BatchRequest,
    BatchStatus,
    BulkCancelFilter,
    BulkFilter,
    BulkResult,
    Job,
    Workflow,
    WorkflowJob,
)
from .common import (
    bad_text,
    ok,
    pool,
    pydantic_errors,
    read_json_body,
    require_json_body,
    unstorable_numbers,
)
from .jobs import _reserved_key_problem, enqueue_arguments, job_request_errors

bp = Blueprint("orchestration", __name__)

# A bulk action is many bounded calls (at most 1000 jobs each, each its own transaction and under the
# statement timeout): its connection is cut only when the whole of it has not answered within this.
BULK_DEADLINE_S = 120.0


def _parse_id(text: str, code: str, what: str) -> uuid.UUID:
    """A malformed id names nothing: 404, the same as an id nobody has."""
    try:
        return uuid.UUID(text)
    except ValueError:
        raise ApiError(404, code, f"no {what} has the id {text[:64]!r}: a {what} id is a UUID") from None


@bp.get("/workflows/<workflow_id>")
def get_workflow(workflow_id: str) -> Response:
    """Every job of the workflow in enqueue order, each with its parents (workflow_jobs)."""
    wid = _parse_id(workflow_id, "workflow_not_found", "workflow")
    try:
        with pool().connection(autocommit=True) as conn:  # one call
            found = db.workflow_jobs(conn, workflow_id=wid)
    except psycopg.Error as exc:
        if not errors.is_error(exc, errors.JobNotFound):
            raise
        found = []
    if not found:
        raise ApiError(404, "workflow_not_found", f"workflow {wid} does not exist: no job has it as its id or "
                                                  "its workflowId")
    return ok(Workflow(id=wid, jobs=[WorkflowJob.of(j) for j in found]))


def _check_batch(body: dict[str, Any]) -> BatchRequest:
    """The valid batch; else 422 naming every bad field: each job's as POST /api/jobs names them (its payload
    checked against its type's schema), under jobs.<n>. (counted from 0)."""
    errors: list[dict[str, str]] = []
    batch: BatchRequest | None = None
    try:
        batch = BatchRequest.model_validate(body)
    except ValidationError as exc:
        # A job's own fields are named by the check of that job below.
        errors = [e for e in pydantic_errors(exc) if not (e["field"].startswith("jobs.") and e["field"].count(".") > 1)]
    items = body.get("jobs")
    if isinstance(items, list) and len(items) <= BATCH_MAX:
        for n, item in enumerate(items):
            if not isinstance(item, dict):
                continue  # named above: jobs.<n> must be a JSON object
            req, _task_type, item_errors = job_request_errors(item, BatchJobRequest)
            key = item.get("idempotencyKey")
            if req is not None and isinstance(key, str):
                problem = _reserved_key_problem(key, windowed=req.unique_for_ms is not None)
                if problem:
                    item_errors.append({"field": "idempotencyKey", "problem": problem})
            errors.extend({**e, "field": f"jobs.{n}.{e['field']}"} for e in item_errors)
    callback = body.get("callback")
    if isinstance(callback, dict):
        for name in ("type", "queue"):
            if isinstance(callback.get(name), str) and bad_text(callback[name]):
                errors.append({"field": f"callback.{name}", "problem": bad_text(callback[name]) or ""})
        if isinstance(callback.get("payload"), dict):
            errors.extend(unstorable_numbers(callback["payload"], "callback.payload"))
            problem = bad_text(callback["payload"])
            if problem:
                errors.append({"field": "callback.payload", "problem": problem})
    if errors or batch is None:
        raise ApiError(422, "validation_failed",
                       "the batch is not valid: " + "; ".join(f"{e['field']} {e['problem']}" for e in errors[:20]),
                       errors)
    return batch


def _batch_item(req: BatchJobRequest) -> dict[str, Any]:
    """One job of the batch as db.enqueue_batch takes it (the items of enqueue_jobs)."""
    item = enqueue_arguments(req)
    item["idempotency_key"] = req.idempotency_key or f"batch-job:{uuid.uuid4()}"
    if req.depends_on is not None:
        item["depends_on"] = [p if isinstance(p, int) else str(p) for p in req.depends_on]
    if req.workflow_id is not None:
        item["workflow_id"] = str(req.workflow_id)
    return item


@bp.post("/batches")
def create_batch() -> Response:
    """Every job of the batch in one transaction (enqueue_batch): 202 with the batch's id and its jobs;
    200 with the batch the idempotencyKey already made."""
    require_json_body()
    body = read_json_body()
    if not isinstance(body, dict):
        raise ApiError(422, "validation_failed", "the body must be a JSON object",
                       [{"field": "body", "problem": "must be a JSON object"}])
    req = _check_batch(body)
    callback = None
    if req.callback is not None:
        callback = {k: v for k, v in req.callback.model_dump().items() if v is not None}
    with pool().connection(autocommit=True) as conn:  # one call
        rows = db.enqueue_batch(conn, jobs=[_batch_item(j) for j in req.jobs], callback=callback,
                                idempotency_key=req.idempotency_key)
    batch_id = rows[0].batch_id if rows else None
    assert batch_id is not None, "enqueue_batch answers one row per job, each with the batch's id"
    created = any(r.created for r in rows)
    return ok(Batch(id=batch_id, jobs=[Job.of(r) for r in rows]), 202 if created else 200)


@bp.get("/batches/<batch_id>")
def get_batch(batch_id: str) -> Response:
    """The batch's jobs per status, its callback job once enqueued, when it finished (batch_status)."""
    bid = _parse_id(batch_id, "batch_not_found", "batch")
    try:
        with pool().connection(autocommit=True) as conn:  # one call
            found = db.batch_status(conn, batch_id=bid)
    except psycopg.Error as exc:
        if not errors.is_error(exc, errors.JobNotFound):
            raise
        found = None
    if found is None:
        raise ApiError(404, "batch_not_found", f"batch {bid} does not exist")
    return ok(BatchStatus.of(found))


FILTER_NAMES = "type, queue, error, since, until, workflowId, batchId"


def _bulk_filters(model: type[BulkFilter]) -> dict[str, Any]:
    """The filters of a bulk action's body; 400 naming every bad field, or when none is given (unless
    "all": true), so an empty body cannot retry or cancel every job by accident."""
    require_json_body()
    body = read_json_body()
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_argument", "the body must be a JSON object of filters",
                       [{"field": "body", "problem": "must be a JSON object"}])
    errors: list[dict[str, str]] = []
    found: BulkFilter | None = None
    try:
        found = model.model_validate(body)
    except ValidationError as exc:
        errors = pydantic_errors(exc)
    for name in ("type", "queue", "error"):
        if isinstance(body.get(name), str) and bad_text(body[name]):
            errors.append({"field": name, "problem": bad_text(body[name]) or ""})
    if errors or found is None:
        raise ApiError(400, "invalid_argument",
                       "bad filter: " + "; ".join(f"{e['field']} {e['problem']}" for e in errors), errors)
    filters = found.filters()
    if not filters and not found.all:
        names = FILTER_NAMES + (", statuses" if model is BulkCancelFilter else "")
        raise ApiError(400, "filter_required",
                       f'give at least one filter ({names}), or {{"all": true}} to mean every job')
    return filters


@bp.post("/jobs/bulk/retry")
def bulk_retry() -> Response:
    """Every dead job the filters match back to pending (retry_dead_jobs, in calls of at most 1000 jobs,
    each its own transaction: db.retry_dead_all); the answer counts them."""
    filters = _bulk_filters(BulkFilter)
    with pool().connection(autocommit=True, deadline_s=BULK_DEADLINE_S) as conn:
        changed = db.retry_dead_all(conn, **filters)
    return ok(BulkResult(changed=changed))


@bp.post("/jobs/bulk/cancel")
def bulk_cancel() -> Response:
    """Every job the filters match, blocked, pending, failed or processing (or those of statuses), cancelled
    (cancel_jobs, in bounded calls: db.cancel_all); a processing one is asked to stop and counts as changed."""
    filters = _bulk_filters(BulkCancelFilter)
    with pool().connection(autocommit=True, deadline_s=BULK_DEADLINE_S) as conn:
        changed = db.cancel_all(conn, **filters)
    return ok(BulkResult(changed=changed))
