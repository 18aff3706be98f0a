"""The JSON API under /api. Each route checks its input, makes one call of pgqw.db, and answers.

Every response is {"data": ...} or, through app.errors, {"error": {"code", "message", "details"?}}.
"""
from __future__ import annotations

import json
import re
import uuid
from typing import Any, Callable

from flask import Blueprint, Response, current_app, jsonify, request, url_for
from psycopg_pool import ConnectionPool
from werkzeug.exceptions import RequestEntityTooLarge

from pgqw import db
from pgqw.listing import FieldError, validate_listing

from . import POOL_KEY
from .errors import ApiError
from .openapi import document
from .serialize import BadCursor, attempt_json, decode_cursor, encode_cursor, job_json

bp = Blueprint("api", __name__, url_prefix="/api")

# Each job type and the check of its payload (a list of {field, problem}; empty means valid).
PAYLOAD_VALIDATORS: dict[str, Callable[[Any], list[FieldError]]] = {"listing_flyer": validate_listing}
JOB_TYPES = tuple(PAYLOAD_VALIDATORS)
STATUSES = db.STATUSES
IDEMPOTENCY_KEY_MAX = 255
# The rule of the jobs_idempotency_key_charset constraint (db/migrations/0002), checked here first
# so the answer can say what is wrong with the header.
IDEMPOTENCY_KEY_RE = re.compile(r"[!-~]{1,255}")
QUEUE_MAX = 100
PRIORITY_MIN, PRIORITY_MAX = -(2**31), 2**31 - 1  # the range of jobs.priority (integer)
LIMIT_DEFAULT, LIMIT_MAX = 20, 100
CURSOR_MAX = 200
BODY_FIELDS = ("type", "payload", "queue", "priority")


def pool() -> ConnectionPool:
    return current_app.extensions[POOL_KEY]


def ok(data: Any, status: int = 200) -> Response:
    response = jsonify({"data": data})
    response.status_code = status
    return response


def _job_id(text: str) -> uuid.UUID:
    """A malformed id names no job: 404, the same as an id nobody has."""
    try:
        return uuid.UUID(text)
    except ValueError:
        raise ApiError(404, "job_not_found", f"no job has the id {text[:64]!r}: a job id is a UUID") from None


def _not_found(job_id: uuid.UUID) -> ApiError:
    return ApiError(404, "job_not_found", f"job {job_id} does not exist")


def _bad_text(value: Any) -> str | None:
    """PostgreSQL text and jsonb hold neither NUL nor unpaired surrogates; say so before they get there."""
    if isinstance(value, str):
        if "\x00" in value:
            return "must not contain NUL characters"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "must not contain unpaired surrogates"
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            problem = _bad_text(k) or _bad_text(v)
            if problem:
                return problem
    if isinstance(value, list):
        for v in value:
            problem = _bad_text(v)
            if problem:
                return problem
    return None


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def _require_json_body() -> None:
    """413 by the Content-Length header before anything else, then 415 unless application/json."""
    limit = current_app.config.get("MAX_CONTENT_LENGTH")
    if limit is not None and request.content_length is not None and request.content_length > limit:
        raise RequestEntityTooLarge()
    if request.mimetype != "application/json":
        got = request.mimetype or "no Content-Type"
        raise ApiError(415, "unsupported_media_type", f"send the body as application/json, not {got}")


def _read_body() -> bytes:
    """The body, or 413 when it is over MAX_CONTENT_LENGTH.

    With a Content-Length, _require_json_body has judged it and werkzeug reads exactly that much.
    A chunked body has none: werkzeug would cut it at the limit without a word, so it is read here,
    up to one byte past the limit. (Servers set wsgi.input_terminated when they end such a stream;
    without it werkzeug gives an empty body rather than risk an endless read.)
    """
    limit = current_app.config.get("MAX_CONTENT_LENGTH")
    if request.content_length is not None or limit is None or "wsgi.input_terminated" not in request.environ:
        return request.get_data(cache=False)
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = request.input_stream.read(limit + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > limit:
        raise RequestEntityTooLarge()
    return b"".join(chunks)


def _read_json_body() -> Any:
    raw = _read_body()
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {str(exc)[:200]}") from None


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


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_job_request(body: Any) -> tuple[str, dict[str, Any], str, int]:
    """(type, payload, queue, priority) of a valid body; else 422 naming every bad field."""
    if not isinstance(body, dict):
        raise ApiError(422, "validation_failed", "the body must be a JSON object",
                       [{"field": "body", "problem": "must be a JSON object"}])
    errors: list[dict[str, str]] = []
    job_type = body.get("type")
    validator = PAYLOAD_VALIDATORS.get(job_type) if isinstance(job_type, str) else None
    if "type" not in body:
        errors.append({"field": "type", "problem": "is required"})
    elif validator is None:
        errors.append({"field": "type", "problem": "must be one of " + ", ".join(JOB_TYPES)})

    if "payload" not in body:
        errors.append({"field": "payload", "problem": "is required"})
    elif validator is not None:
        payload = body["payload"]
        for e in validator(payload):
            field = e["field"] if e["field"] == "payload" else f"payload.{e['field']}"
            errors.append({"field": field, "problem": e["problem"]})
        if isinstance(payload, dict):
            named = {e["field"] for e in errors}
            for name, value in payload.items():
                problem = _bad_text(name) or _bad_text(value)
                if problem and f"payload.{name}" not in named:
                    errors.append({"field": f"payload.{name}", "problem": problem})

    queue = body.get("queue", "default")
    if not isinstance(queue, str):
        errors.append({"field": "queue", "problem": "must be a string"})
    elif not queue.strip():
        errors.append({"field": "queue", "problem": "must not be blank"})
    elif len(queue) > QUEUE_MAX:
        errors.append({"field": "queue", "problem": f"must be at most {QUEUE_MAX} characters"})
    elif _bad_text(queue):
        errors.append({"field": "queue", "problem": _bad_text(queue) or ""})

    priority = body.get("priority", 0)
    if not _is_int(priority):
        errors.append({"field": "priority", "problem": "must be an integer"})
    elif not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        errors.append({"field": "priority", "problem": f"must be between {PRIORITY_MIN} and {PRIORITY_MAX}"})

    for name in sorted(str(k) for k in body if k not in BODY_FIELDS):
        errors.append({"field": name, "problem": "unknown field"})
    if errors:
        raise ApiError(422, "validation_failed",
                       "the job is not valid: " + "; ".join(f"{e['field']} {e['problem']}" for e in errors),
                       errors)
    return job_type, body["payload"], queue, priority


@bp.post("/jobs")
def create_job() -> Response:
    """One insert: 202 with a new job, 200 with the job this key already made."""
    _require_json_body()
    key = _idempotency_key()
    job_type, payload, queue, priority = _check_job_request(_read_json_body())
    with pool().connection() as conn:
        job = db.enqueue_job(conn, type=job_type, payload=payload, idempotency_key=key,
                             queue=queue, priority=priority, max_attempts=current_app.config["MAX_ATTEMPTS"])
    response = ok(job_json(job), 202 if job.created else 200)
    response.headers["Location"] = url_for("api.get_job", job_id=job.id)
    return response


@bp.get("/jobs/<job_id>")
def get_job(job_id: str) -> Response:
    jid = _job_id(job_id)
    with pool().connection() as conn:
        job = db.get_job(conn, job_id=jid)
    if job is None:
        raise _not_found(jid)
    return ok(job_json(job))


def _list_arguments() -> tuple[str | None, int, Any]:
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
    for name in sorted(set(request.args) - {"status", "limit", "cursor"}):
        errors.append({"field": name, "problem": "unknown query parameter"})
    if errors:
        raise ApiError(400, "invalid_query",
                       "bad query: " + "; ".join(f"{e['field']} {e['problem']}" for e in errors), errors)
    return status, limit, after


@bp.get("/jobs")
def list_jobs() -> Response:
    """Newest first, keyset-paginated on (created_at, id): every page costs one index range scan."""
    status, limit, after = _list_arguments()
    with pool().connection() as conn:
        page = db.list_jobs(conn, status=status, limit=limit, after=after)
    return ok({
        "jobs": [job_json(j) for j in page.jobs],
        "nextCursor": encode_cursor(page.next_cursor) if page.next_cursor else None,
    })


@bp.get("/stats")
def stats() -> Response:
    """Jobs per status. A count over the whole table, so it is its own route, not part of each page."""
    with pool().connection() as conn:
        counts = db.count_by_status(conn)
    return ok({"counts": counts, "total": sum(counts.values())})


@bp.get("/jobs/<job_id>/attempts")
def get_attempts(job_id: str) -> Response:
    jid = _job_id(job_id)
    with pool().connection() as conn:
        attempts = db.get_attempts(conn, job_id=jid)
        if not attempts and db.get_job(conn, job_id=jid) is None:
            raise _not_found(jid)
    return ok([attempt_json(a) for a in attempts])


@bp.post("/jobs/<job_id>/retry")
def retry_job(job_id: str) -> Response:
    """dead → pending (retry_dead). 409 (QS409) when the job is not dead, 404 (QN404) when unknown."""
    jid = _job_id(job_id)
    with pool().connection() as conn:
        job = db.retry_dead(conn, job_id=jid)
    response = ok(job_json(job), 202)
    response.headers["Location"] = url_for("api.get_job", job_id=job.id)
    return response


@bp.get("/jobs/<job_id>/flyer")
def get_flyer(job_id: str) -> Response:
    """The PDF once the job has succeeded; 404 before (and for an unknown job)."""
    jid = _job_id(job_id)
    with pool().connection() as conn:
        job = db.get_job(conn, job_id=jid)
        if job is None:
            raise _not_found(jid)
        pdf = db.get_flyer(conn, job_id=jid) if job.status == "succeeded" else None
    if pdf is None:
        raise ApiError(404, "flyer_not_ready",
                       f"job {jid} is {job.status}; its flyer is served once the job has succeeded",
                       {"status": job.status})
    response = Response(pdf, mimetype="application/pdf")
    response.headers["Content-Disposition"] = f'inline; filename="flyer-{jid}.pdf"'
    response.headers["Cache-Control"] = "private, max-age=3600"
    return response


@bp.get("/openapi.json")
def openapi() -> Response:
    from . import auth

    return jsonify(document(auth_required=auth.enabled(current_app)))
