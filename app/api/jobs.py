"""The jobs: create (POST /api/jobs), read, list and search, attempts, retry, cancel, result, and the
counts per status (GET /api/stats)."""
from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any, TypeVar

from flask import Blueprint, Response, current_app, request, url_for
from pydantic import ValidationError

from pgqw import db

from ..errors import ApiError
from ..models import ONE_TIME_PROBLEM, QUEUE_MAX, STATUSES, Attempt, Job, JobPage, JobRequest, Stats
from ..serialize import BadCursor, decode_cursor, encode_cursor
from .common import (
    CURSOR_MAX,
    IDEMPOTENCY_KEY_MAX,
    IDEMPOTENCY_KEY_RE,
    LIMIT_DEFAULT,
    LIMIT_MAX,
    SCHEDULE_KEY_PREFIX,
    WINDOWED_KEY_RE,
    bad_text,
    not_found,
    ok,
    parse_job_id,
    pool,
    pydantic_errors,
    read_json_body,
    require_json_body,
    unstorable_numbers,
)
from .task_types import schema_errors, task_types

bp = Blueprint("jobs", __name__)
R = TypeVar("R", bound=JobRequest)


def _idempotency_key() -> str:
    key = request.headers.get("Idempotency-Key")
    if key is None or not key.strip():
        raise ApiError(400, "missing_idempotency_key",
                       "send an Idempotency-Key header (for example a random UUID) with every new job")
    if len(key) > IDEMPOTENCY_KEY_MAX:
        raise ApiError(400, "invalid_idempotency_key",
                       f"the Idempotency-Key header must be at most {IDEMPOTENCY_KEY_MAX} characters")
    if not IDEMPOTENCY_KEY_RE.fullmatch(key):
        raise ApiError(400, "invalid_idempotency_key",
                       "the Idempotency-Key header may hold only visible ASCII characters (letters, digits and "
                       "punctuation from ! to ~; no spaces)")
    return key


def _reserved_key_problem(key: str, *, windowed: bool) -> str | None:
    """enqueue_job's QI422, said of the header: a key in the stored form of another kind of key."""
    if not windowed and not key.startswith(SCHEDULE_KEY_PREFIX) and WINDOWED_KEY_RE.search(key):
        return ("must not end in @ and a window start (@2025-01-01T10:00:00.000Z) without uniqueForMs: "
                "that is how the keys of uniqueForMs windows are stored")
    if windowed and key.startswith(SCHEDULE_KEY_PREFIX):
        return "must not start with schedule: with uniqueForMs: that is how the keys of schedules' slots start"
    return None


def _check_job_request(body: Any) -> tuple[JobRequest, db.TaskType | None]:
    """The valid request and its task type (None: not registered, which enqueue_job decides on: QT422, or
    accepted where queue_settings.accept_unregistered_types is on); else 422 naming every bad field."""
    if not isinstance(body, dict):
        raise ApiError(422, "validation_failed", "the body must be a JSON object",
                       [{"field": "body", "problem": "must be a JSON object"}])
    request_ok, task_type, errors = job_request_errors(body, JobRequest)
    if errors or request_ok is None:
        raise ApiError(422, "validation_failed",
                       "the job is not valid: " + "; ".join(f"{e['field']} {e['problem']}" for e in errors),
                       errors)
    return request_ok, task_type


def job_request_errors(body: dict[str, Any], model: type[R]) -> tuple[R | None, db.TaskType | None,
                                                                       list[dict[str, str]]]:
    """A job's body read with `model` (JobRequest, or a batch's BatchJobRequest): the request when valid, its
    task type when registered, and every bad field (its payload checked against the type's schema)."""
    errors: list[dict[str, str]] = []
    request_ok: R | None = None
    try:
        request_ok = model.model_validate(body)
    except ValidationError as exc:
        errors = pydantic_errors(exc)
        # "not both", in the keys the client sent (the snake_case ones are deprecated, still accepted)
        spelled = ("give " + ("run_at" if "run_at" in body else "runAt") + " or "
                   + ("delay_ms" if "delay_ms" in body else "delayMs") + ", not both")
        errors = [{**e, "problem": spelled} if e["problem"] == ONE_TIME_PROBLEM else e for e in errors]
    task_type = None
    job_type = body.get("type")
    if isinstance(job_type, str) and not any(e["field"] == "type" for e in errors):
        task_type = task_types().get(job_type)
    payload = body.get("payload")
    if isinstance(payload, dict):
        unstorable = unstorable_numbers(payload, "payload")
        errors.extend(unstorable)
        # A payload with infinities is not checked further: the schema's keywords are not made for them.
        if task_type is not None and not unstorable:
            errors.extend(schema_errors(task_type, payload))
    if isinstance(payload, dict):
        named = {e["field"] for e in errors}
        for name, value in payload.items():
            problem = bad_text(name) or bad_text(value)
            if problem and f"payload.{name}" not in named:
                errors.append({"field": f"payload.{name}", "problem": problem})
    for name in ("queue", "serialKey", "concurrencyKey"):
        value = body.get(name)
        if isinstance(value, str) and bad_text(value):
            errors.append({"field": name, "problem": bad_text(value) or ""})
    return request_ok, task_type, errors


def enqueue_arguments(req: JobRequest) -> dict[str, Any]:
    """A valid job body as the keyword arguments of db.enqueue_job (and the items of db.enqueue_batch)."""
    return {
        "type": req.type, "payload": req.payload, "queue": req.queue, "priority": req.priority, "run_at": req.run_at,
        "delay": timedelta(milliseconds=req.delay_ms) if req.delay_ms is not None else None,
        "max_attempts": req.max_attempts if req.max_attempts is not None else current_app.config["MAX_ATTEMPTS"],
        "unique_for": timedelta(milliseconds=req.unique_for_ms) if req.unique_for_ms is not None else None,
        "timeout_ms": req.timeout_ms, "expires_at": req.expires_at, "expire_after_ms": req.expire_after_ms,
        "run_anyway": req.run_anyway, "serial_key": req.serial_key, "concurrency_key": req.concurrency_key,
    }


@bp.post("/jobs")
def create_job() -> Response:
    """One insert: 202 with a new job, 200 with the job this key already made."""
    require_json_body()
    key = _idempotency_key()
    req, _task_type = _check_job_request(read_json_body())
    problem = _reserved_key_problem(key, windowed=req.unique_for_ms is not None)
    if problem:
        raise ApiError(422, "idempotency_key_reserved", f"the Idempotency-Key {problem}",
                       [{"field": "Idempotency-Key", "problem": problem}])
    with pool().connection(autocommit=True) as conn:  # one call
        job = db.enqueue_job(conn, idempotency_key=key, **enqueue_arguments(req), depends_on=req.depends_on,
                             workflow_id=req.workflow_id)
    response = ok(Job.of(job), 202 if job.created else 200)
    response.headers["Location"] = url_for(".get_job", job_id=job.id)
    return response


@bp.get("/jobs/<job_id>")
def get_job(job_id: str) -> Response:
    jid = parse_job_id(job_id)
    with pool().connection() as conn:
        job = db.get_job(conn, job_id=jid)
    if job is None:
        raise not_found(jid)
    return ok(Job.of(job))


# The job search's filters besides status (GET /api/jobs?id_prefix=&type=&queue=).
SEARCH_FILTERS = ("id_prefix", "type", "queue")
ID_PREFIX_MAX = 36  # a whole job id with its dashes


def _search_filters(errors: list[dict[str, str]]) -> dict[str, str]:
    """id_prefix: 1 to 32 hex digits (dashes allowed); type and queue: 1 to 100 characters, matched exactly."""
    found: dict[str, str] = {}
    id_prefix = request.args.get("id_prefix") or None
    if id_prefix is not None:
        try:
            if len(id_prefix) > ID_PREFIX_MAX:
                raise ValueError("too long")
            db.job_id_range(id_prefix)
            found["id_prefix"] = id_prefix
        except ValueError:
            errors.append({"field": "id_prefix", "problem": "must be the start of a job id: 1 to 32 hex digits "
                                                           "(0-9, a-f; dashes allowed)"})
    for name in ("type", "queue"):
        value = request.args.get(name) or None
        if value is None:
            continue
        problem = bad_text(value) or (f"must be at most {QUEUE_MAX} characters" if len(value) > QUEUE_MAX else None)
        if problem:
            errors.append({"field": name, "problem": problem})
        else:
            found[name] = value
    return found


def _list_arguments() -> tuple[str | None, int, Any, dict[str, str]]:
    errors: list[dict[str, str]] = []
    status = request.args.get("status") or None
    if status is not None and status not in STATUSES:
        errors.append({"field": "status", "problem": "must be one of " + ", ".join(STATUSES)})
    limit_text = request.args.get("limit")
    limit = LIMIT_DEFAULT
    if limit_text is not None:
        # isascii: str.isdigit and int() also take other scripts' digits; len: int() refuses 4300+ digits.
        if limit_text.isascii() and limit_text.isdigit() and len(limit_text) <= 4 and 1 <= int(limit_text) <= LIMIT_MAX:
            limit = int(limit_text)
        else:
            errors.append({"field": "limit", "problem": f"must be a whole number from 1 to {LIMIT_MAX}"})
    cursor_text = request.args.get("cursor") or None
    after = None
    if cursor_text is not None:
        try:
            if len(cursor_text) > CURSOR_MAX:
                raise BadCursor("too long")
            after = decode_cursor(cursor_text)
        except BadCursor:
            errors.append({"field": "cursor", "problem": "is not a cursor this API returned (use nextCursor)"})
    search = _search_filters(errors)
    for name in sorted(set(request.args) - {"status", "limit", "cursor", *SEARCH_FILTERS}):
        errors.append({"field": name[:64], "problem": "unknown query parameter"})
    if errors:
        raise ApiError(400, "invalid_query",
                       "bad query: " + "; ".join(f"{e['field']} {e['problem']}" for e in errors), errors)
    return status, limit, after, search


@bp.get("/jobs")
def list_jobs() -> Response:
    """Newest first, keyset-paginated on (created_at, id): every page costs one index range scan.
    With id_prefix, type or queue it is the console's job search (db.search_jobs), same pages."""
    status, limit, after, search = _list_arguments()
    with pool().connection() as conn:
        if search:
            page = db.search_jobs(conn, status=status, limit=limit, after=after, **search)
        else:
            page = db.list_jobs(conn, status=status, limit=limit, after=after)
    return ok(JobPage(jobs=[Job.of(j) for j in page.jobs],
                      next_cursor=encode_cursor(page.next_cursor) if page.next_cursor else None))


@bp.get("/stats")
def stats() -> Response:
    """Jobs per status, from queue_stats() (history figures estimated beyond 10,000): its own route."""
    with pool().connection() as conn:
        counts = db.count_by_status(conn)
    return ok(Stats(counts=counts, total=sum(counts.values())))


@bp.get("/jobs/<job_id>/attempts")
def get_attempts(job_id: str) -> Response:
    jid = parse_job_id(job_id)
    with pool().connection() as conn:
        attempts = db.get_attempts(conn, job_id=jid)
        if not attempts and db.get_job(conn, job_id=jid) is None:
            raise not_found(jid)
    return ok([Attempt.of(a) for a in attempts])


@bp.post("/jobs/<job_id>/retry")
def retry_job(job_id: str) -> Response:
    """dead → pending (retry_dead). 409 (QS409) when the job is not dead, 404 (QN404) when unknown."""
    jid = parse_job_id(job_id)
    with pool().connection() as conn:
        job = db.retry_dead(conn, job_id=jid)
    response = ok(Job.of(job), 202)
    response.headers["Location"] = url_for(".get_job", job_id=job.id)
    return response


@bp.post("/jobs/<job_id>/cancel")
def cancel_job(job_id: str) -> Response:
    """pending/failed → cancelled; processing: its worker is asked to stop (cancel_job). 409 (QS409)
    when the job has already finished, 404 (QN404) when unknown."""
    jid = parse_job_id(job_id)
    with pool().connection() as conn:
        job = db.cancel_job(conn, job_id=jid)
    response = ok(Job.of(job), 202)
    response.headers["Location"] = url_for(".get_job", job_id=job.id)
    return response


def result_of(jid: uuid.UUID) -> tuple[db.Job, db.Result | None]:
    with pool().connection() as conn:
        job = db.get_job(conn, job_id=jid)
        if job is None:
            raise not_found(jid)
        return job, (db.get_result(conn, job_id=jid) if job.status == "succeeded" else None)


@bp.get("/jobs/<job_id>/result")
def get_result(job_id: str) -> Response:
    """The job's result once it has succeeded: {"data": value} for a JSON result, else the file with
    its content type. 404 result_not_ready before; 404 no_result for a success without one."""
    jid = parse_job_id(job_id)
    job, result = result_of(jid)
    if job.status != "succeeded":
        raise ApiError(404, "result_not_ready",
                       f"job {jid} is {job.status}; its result is served once the job has succeeded",
                       {"status": job.status})
    if result is None:
        raise ApiError(404, "no_result", f"job {jid} succeeded without a result", {"status": job.status})
    if result.data is None:
        return ok(result.value)
    # content_type, not mimetype: Flask would add "; charset=utf-8" to a text/* type the worker chose.
    response = Response(bytes(result.data), content_type=result.content_type)
    response.headers["Cache-Control"] = "private, max-age=3600"
    if result.content_type.split(";")[0].lower() != "application/pdf":
        # A file may hold what a payload put in it (HTML, SVG): from the origin where the page keeps its
        # token it must run nothing. (Browsers do not show a PDF under a sandbox, and their viewers run
        # none of its scripts on the origin.)
        response.headers["Content-Security-Policy"] = "sandbox; default-src 'none'"
    return response
