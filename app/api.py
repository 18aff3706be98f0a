"""The JSON API under /api. Each route checks its input, makes one call of pgqw.db, and answers.

Every response is {"data": ...} or, through app.errors, {"error": {"code", "message", "details"?}}.
"""
from __future__ import annotations

import functools
import json
import math
import re
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any

from flask import Blueprint, Response, current_app, jsonify, request, url_for
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from werkzeug.exceptions import RequestEntityTooLarge

from pgqw import db, payload_schema

from . import POOL_KEY, ApiPool
from .errors import ApiError
from .openapi import document
from .serialize import BadCursor, attempt_json, decode_cursor, encode_cursor, iso, job_json

bp = Blueprint("api", __name__, url_prefix="/api")

STATUSES = db.STATUSES
IDEMPOTENCY_KEY_MAX = 255
# The rule of the jobs_idempotency_key_charset constraint (db/migrations/0002), checked here first
# so the answer can say what is wrong with the header.
IDEMPOTENCY_KEY_RE = re.compile(r"[!-~]{1,255}")
# The schedules_name_charset constraint's rule (db/migrations/0010_schedules.sql).
SCHEDULE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")
QUEUE_MAX = 100
PRIORITY_MIN, PRIORITY_MAX = -(2**31), 2**31 - 1  # the range of jobs.priority (integer)
RATE_MAX = 1_000_000  # jobs per second: what set_queue_rate accepts (with at most 6 decimal places)
LIMIT_DEFAULT, LIMIT_MAX = 20, 100
CURSOR_MAX = 200
MAX_ATTEMPTS_MAX = 1000
# When a job may start: from the epoch (earlier means "now" anyway) to a year ahead, whether given as
# run_at or as delay_ms. enqueue_job and enqueue_jobs refuse the same over SQL (QV400), so the HTTP
# limits and the SQL limits are one rule (db/functions/enqueue_job.sql).
RUN_AT_MIN = datetime(1970, 1, 1, tzinfo=timezone.utc)
AHEAD_MAX = timedelta(days=366)
DELAY_MAX_MS = AHEAD_MAX // timedelta(milliseconds=1)
# Nesting of a request body: psycopg and jsonify encode JSON recursively, so a body nested close to
# the interpreter's recursion limit would parse and then fail to be stored (a 500, not a 4xx).
JSON_DEPTH_MAX = 100
# How long checking one payload against its type's schema may take (pgqw.payload_schema.errors).
PAYLOAD_CHECK_SECONDS = 1.0
# The stored form of a windowed key (enqueue_job's p_unique_for), `<key>@<window start>`, which a schedule's
# slots share (`schedule:<name>@<slot>`): a plain key may end like that only if it starts with schedule:,
# and a windowed key may not start so, or it would be the key of some other job (enqueue_job: QI422).
WINDOWED_KEY_RE = re.compile(r"@[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z\Z")
SCHEDULE_KEY_PREFIX = "schedule:"


def pool() -> ApiPool:
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


NUMBER_PROBLEM = "must be a number from -1.7976931348623157e308 to 1.7976931348623157e308 (a double's range)"


def _unstorable_numbers(value: Any, path: str) -> list[dict[str, str]]:
    """Each number of a parsed body that cannot be stored, by its path: JSON numbers are read as
    doubles, so 1e400 is infinity, which jsonb cannot hold (json.loads already refuses NaN and
    Infinity themselves)."""
    found, level = [], [(value, path)]
    while level:
        node, where = level.pop()
        if isinstance(node, float) and not math.isfinite(node):
            found.append({"field": where, "problem": NUMBER_PROBLEM})
        elif isinstance(node, dict):
            level.extend((v, f"{where}.{k}") for k, v in node.items())
        elif isinstance(node, list):
            level.extend((v, f"{where}.{n}") for n, v in enumerate(node))
    return sorted(found, key=lambda e: e["field"])


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


def _depth(value: Any) -> int:
    """How deeply arrays and objects nest in a parsed JSON value (a scalar: 0), without recursion."""
    deepest, level = 0, [(value, 1)]
    while level:
        node, depth = level.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            level.extend((child, depth + 1) for child in children)
    return deepest


def _read_json_body() -> Any:
    raw = _read_body()
    try:
        body = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {str(exc)[:200]}") from None
    if _depth(body) > JSON_DEPTH_MAX:
        raise ApiError(400, "invalid_json", f"the body nests arrays and objects more than {JSON_DEPTH_MAX} levels deep")
    return body


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
        return ("must not end in @ and a window start (@2025-01-01T10:00:00.000Z) without unique_for_ms: "
                "that is how the keys of unique_for_ms windows are stored")
    if windowed and key.startswith(SCHEDULE_KEY_PREFIX):
        return "must not start with schedule: with unique_for_ms: that is how the keys of schedules' slots start"
    return None


class JobRequest(BaseModel):
    """The body of POST /api/jobs. Its JSON Schema is the request body of the OpenAPI document
    (with the payload of each registered task type)."""

    model_config = ConfigDict(extra="forbid", title="CreateJob")

    type: Annotated[str, Field(strict=True, min_length=1, max_length=100, description="a registered task type")]
    payload: Annotated[dict[str, Any], Field(strict=True, description="checked against the type's payload schema")]
    queue: Annotated[str | None, Field(strict=True, min_length=1, max_length=QUEUE_MAX, pattern=r"\S",
                                       description="default: the task type's queue")] = None
    priority: Annotated[int | None, Field(strict=True, ge=PRIORITY_MIN, le=PRIORITY_MAX,
                                          description="higher runs first; default: the task type's")] = None
    run_at: Annotated[AwareDatetime | None, Field(description="when the job may start (ISO 8601 with an offset), "
                                                           "from 1970-01-01T00:00:00Z to 366 days from now")] = None
    delay_ms: Annotated[int | None, Field(strict=True, ge=0, le=DELAY_MAX_MS,
                                          description="start no sooner than this many ms from now "
                                                      "(at most 366 days)")] = None
    max_attempts: Annotated[int | None, Field(strict=True, ge=1, le=MAX_ATTEMPTS_MAX,
                                              description="default: the task type's")] = None
    unique_for_ms: Annotated[int | None, Field(
        strict=True, ge=1, le=DELAY_MAX_MS,
        description="the Idempotency-Key is unique only within this window (ms, at most 366 days; windows "
                    "counted from the epoch in UTC) of run_at: within it the same job is returned, after it a "
                    "new one is made; the stored key is `<key>@<window start>` (the key at most 230 characters)"
    )] = None

    @field_validator("run_at")
    @classmethod
    def _run_at_in_range(cls, value: datetime | None) -> datetime | None:
        if value is not None and not RUN_AT_MIN <= value <= datetime.now(timezone.utc) + AHEAD_MAX:
            raise ValueError(f"must be between {RUN_AT_MIN:%Y-%m-%dT%H:%M:%SZ} and {AHEAD_MAX.days} days from now")
        return value

    @model_validator(mode="after")
    def _one_time(self) -> JobRequest:
        if self.run_at is not None and self.delay_ms is not None:
            raise ValueError("give run_at or delay_ms, not both")
        return self


_JSON_KINDS = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
               "object": "a JSON object", "array": "a JSON array", "null": "null"}


def _pydantic_problem(e: Any) -> str:
    kind, ctx = e.get("type", ""), e.get("ctx") or {}
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "is required"
    if kind == "string_type":
        return "must be a string"
    if kind.startswith("int_"):
        return "must be an integer"
    if kind == "dict_type":
        return "must be a JSON object"
    if kind in ("string_too_short", "string_pattern_mismatch") and (ctx.get("min_length") == 1
                                                                    or ctx.get("pattern") == r"\S"):
        return "must not be blank"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters"
    if kind == "greater_than_equal":
        return f"must be at least {ctx.get('ge')}"
    if kind == "less_than_equal":
        return f"must be at most {ctx.get('le')}"
    if kind.startswith(("datetime_", "timezone_")):
        return "must be a date and time with a time zone (ISO 8601, e.g. 2030-01-01T09:00:00Z)"
    return str(e.get("msg", "is not valid")).removeprefix("Value error, ")


def _pydantic_errors(exc: ValidationError) -> list[dict[str, str]]:
    return [{"field": ".".join(str(p) for p in e.get("loc", ())) or "body", "problem": _pydantic_problem(e)}
            for e in exc.errors(include_url=False)]


def _schema_problem(e: Any) -> str:
    """A JSON Schema error in the words the rest of the API uses."""
    v, value = e.validator, e.validator_value
    if v == "type":
        kinds = value if isinstance(value, list) else [value]
        return "must be " + " or ".join(str(_JSON_KINDS.get(k, k)) for k in kinds)
    if v == "enum":
        return "must be one of " + ", ".join(str(x) for x in value)
    if v == "const":
        return f"must be {value!r}"
    if v == "minimum":
        return "must not be negative" if value == 0 else f"must be at least {value}"
    if v == "maximum":
        return f"must be at most {value}"
    if v == "minLength":
        return "must not be blank" if value == 1 else f"must be at least {value} characters"
    if v == "maxLength":
        return f"must be at most {value} characters"
    if v == "pattern":
        return "must not be blank" if value == r"\S" else f"must match the pattern {value}"
    if v == "format":
        return f"must be a valid {value}"  # jsonschema's own message repeats the value back
    return e.message


def _schema_errors(task_type: db.TaskType, payload: dict[str, Any]) -> list[dict[str, str]]:
    """Every field of the payload that breaks its type's JSON Schema, once each, under payload.

    422 invalid_payload_schema when the type's schema is one the API cannot use (pgqw.payload_schema's
    rules), and 422 payload_check_timeout when the check takes more than PAYLOAD_CHECK_SECONDS."""
    schema = task_type.payload_schema
    checked = _validator_of(task_type)
    try:
        found = payload_schema.errors(checked, payload, seconds=PAYLOAD_CHECK_SECONDS)
    except payload_schema.PayloadCheckTimeout:
        raise ApiError(422, "payload_check_timeout",
                       f"checking the payload against the schema of task type {task_type.name!r} took more than "
                       f"{PAYLOAD_CHECK_SECONDS:g} s; the job was not accepted",
                       {"taskType": task_type.name}) from None
    except payload_schema.PayloadSchemaError as exc:
        raise _unusable_schema(task_type.name, str(exc)) from None
    errors: dict[str, str] = {}
    for e in sorted(found, key=lambda e: [str(p) for p in e.absolute_path]):
        path = ".".join(["payload", *(str(p) for p in e.absolute_path)])
        if e.validator == "required" and isinstance(e.instance, dict):
            for m in e.validator_value:
                if m not in e.instance:
                    errors.setdefault(f"{path}.{m}", "is required")
        elif e.validator == "additionalProperties" and isinstance(e.instance, dict):
            known = set(e.schema.get("properties", {}))
            for k in sorted(str(k) for k in e.instance if k not in known):
                errors.setdefault(f"{path}.{k}", "unknown field")
        else:
            errors.setdefault(path, _schema_problem(e))
    # Fields in the model's order: jsonb keeps the order of the required list, not of properties.
    names = list(schema.get("required", [])) + sorted(set(schema.get("properties", {})) - set(schema.get("required", [])))
    order = {name: n for n, name in enumerate(names)}

    def position(field: str) -> tuple[int, str]:
        top = field.split(".")[1] if "." in field else ""
        return order.get(top, len(order)), field

    return [{"field": f, "problem": errors[f]} for f in sorted(errors, key=position)]


def _unusable_schema(name: str, problem: str) -> ApiError:
    return ApiError(422, "invalid_payload_schema",
                    f"the payload schema registered for task type {name!r} is one the API cannot use, so no job "
                    f"of it is accepted until the type is registered again with a valid schema: {problem}",
                    {"taskType": name, "problem": problem})


# The checked validator (or what is wrong with the schema) of each schema dict the task-type cache holds
# (its id, with the dict kept alive): no serializing of the schema per request to find it.
_VALIDATORS: dict[int, tuple[dict[str, Any], Any]] = {}


def _validator_of(task_type: db.TaskType) -> Any:
    """The type's validator (pgqw.payload_schema.validator); 422 invalid_payload_schema when its schema
    breaks pgqw.payload_schema's rules (checked once per schema and process)."""
    schema = task_type.payload_schema
    found = _VALIDATORS.get(id(schema))
    if found is None or found[0] is not schema:
        if len(_VALIDATORS) > 1024:
            _VALIDATORS.clear()
        found = _VALIDATORS[id(schema)] = (schema, _validator(json.dumps(schema, sort_keys=True)))
    checked, problem = found[1]
    if problem is not None:
        raise _unusable_schema(task_type.name, problem)
    return checked


@functools.lru_cache(maxsize=256)
def _validator(schema_json: str) -> tuple[Any, str | None]:
    """(validator, None), or (None, the rule the schema breaks)."""
    try:
        return payload_schema.validator(json.loads(schema_json)), None
    except payload_schema.PayloadSchemaError as exc:
        current_app.logger.warning("a registered payload schema cannot be used: %s", exc)
        return None, str(exc)


def _usable(task_type: db.TaskType) -> bool:
    try:
        _validator_of(task_type)
    except ApiError:
        return False
    return True


def _check_job_request(body: Any) -> tuple[JobRequest, db.TaskType | None]:
    """The valid request and its task type (None: not registered, which enqueue_job decides on: QT422, or
    accepted where queue_settings.accept_unregistered_types is on); else 422 naming every bad field."""
    if not isinstance(body, dict):
        raise ApiError(422, "validation_failed", "the body must be a JSON object",
                       [{"field": "body", "problem": "must be a JSON object"}])
    errors: list[dict[str, str]] = []
    request_ok: JobRequest | None = None
    try:
        request_ok = JobRequest.model_validate(body)
    except ValidationError as exc:
        errors = _pydantic_errors(exc)
    task_type = None
    job_type = body.get("type")
    if isinstance(job_type, str) and not any(e["field"] == "type" for e in errors):
        task_type = task_types().get(job_type)
    payload = body.get("payload")
    if isinstance(payload, dict):
        unstorable = _unstorable_numbers(payload, "payload")
        errors.extend(unstorable)
        # A payload with infinities is not checked further: the schema's keywords are not made for them.
        if task_type is not None and not unstorable:
            errors.extend(_schema_errors(task_type, payload))
    if isinstance(payload, dict):
        named = {e["field"] for e in errors}
        for name, value in payload.items():
            problem = _bad_text(name) or _bad_text(value)
            if problem and f"payload.{name}" not in named:
                errors.append({"field": f"payload.{name}", "problem": problem})
    queue = body.get("queue")
    if isinstance(queue, str) and _bad_text(queue):
        errors.append({"field": "queue", "problem": _bad_text(queue) or ""})
    if errors or request_ok is None:
        raise ApiError(422, "validation_failed",
                       "the job is not valid: " + "; ".join(f"{e['field']} {e['problem']}" for e in errors),
                       errors)
    return request_ok, task_type


def task_type_json(t: db.TaskType) -> dict[str, Any]:
    return {"name": t.name, "description": t.description, "queue": t.queue, "priority": t.priority,
            "maxAttempts": t.max_attempts, "backoffBaseMs": t.backoff_base_ms,
            "backoffMaxDelayMs": t.backoff_max_delay_ms, "backoffMaxJitterMs": t.backoff_max_jitter_ms,
            "leaseMs": t.lease_ms, "payloadSchema": t.payload_schema}


class TaskTypes:
    """The registered task types, read from the database and kept for a few seconds: a request for a
    type not yet seen reads them again at once, so a newly registered type is never refused."""

    TTL_S = 5.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._types: dict[str, db.TaskType] = {}
        self._read_at = -1e9

    def _refresh(self) -> None:
        with pool().connection() as conn:
            found = db.get_task_types(conn)
        with self._lock:
            self._types = {t.name: t for t in found}
            self._read_at = time.monotonic()

    def get(self, name: str) -> db.TaskType | None:
        if time.monotonic() - self._read_at > self.TTL_S or name not in self._types:
            self._refresh()
        return self._types.get(name)

    def all(self) -> list[db.TaskType]:
        if time.monotonic() - self._read_at > self.TTL_S:
            self._refresh()
        return sorted(self._types.values(), key=lambda t: t.name)

    def names(self) -> list[str]:
        return [t.name for t in self.all()]


def task_types() -> TaskTypes:
    return current_app.extensions.setdefault("pgqw.task_types", TaskTypes())


@bp.post("/jobs")
def create_job() -> Response:
    """One insert: 202 with a new job, 200 with the job this key already made."""
    _require_json_body()
    key = _idempotency_key()
    req, _task_type = _check_job_request(_read_json_body())
    problem = _reserved_key_problem(key, windowed=req.unique_for_ms is not None)
    if problem:
        raise ApiError(422, "idempotency_key_reserved", f"the Idempotency-Key {problem}",
                       [{"field": "Idempotency-Key", "problem": problem}])
    with pool().connection(autocommit=True) as conn:  # one call
        job = db.enqueue_job(
            conn, type=req.type, payload=req.payload, idempotency_key=key, queue=req.queue,
            priority=req.priority, run_at=req.run_at,
            delay=timedelta(milliseconds=req.delay_ms) if req.delay_ms is not None else None,
            max_attempts=req.max_attempts if req.max_attempts is not None else current_app.config["MAX_ATTEMPTS"],
            unique_for=timedelta(milliseconds=req.unique_for_ms) if req.unique_for_ms is not None else None)
    response = ok(job_json(job), 202 if job.created else 200)
    response.headers["Location"] = url_for("api.get_job", job_id=job.id)
    return response


@bp.get("/task-types")
def list_task_types() -> Response:
    """Every registered task type: its payload schema and its effective settings."""
    with pool().connection() as conn:
        found = db.get_task_types(conn)
    return ok([task_type_json(t) for t in found])


@bp.get("/jobs/<job_id>")
def get_job(job_id: str) -> Response:
    jid = _job_id(job_id)
    with pool().connection() as conn:
        job = db.get_job(conn, job_id=jid)
    if job is None:
        raise _not_found(jid)
    return ok(job_json(job))


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
        problem = _bad_text(value) or (f"must be at most {QUEUE_MAX} characters" if len(value) > QUEUE_MAX else None)
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
    return ok({
        "jobs": [job_json(j) for j in page.jobs],
        "nextCursor": encode_cursor(page.next_cursor) if page.next_cursor else None,
    })


@bp.get("/stats")
def stats() -> Response:
    """Jobs per status, from queue_stats() (history figures estimated beyond 10,000): its own route."""
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


@bp.post("/jobs/<job_id>/cancel")
def cancel_job(job_id: str) -> Response:
    """pending/failed → cancelled; processing: its worker is asked to stop (cancel_job). 409 (QS409)
    when the job has already finished, 404 (QN404) when unknown."""
    jid = _job_id(job_id)
    with pool().connection() as conn:
        job = db.cancel_job(conn, job_id=jid)
    response = ok(job_json(job), 202)
    response.headers["Location"] = url_for("api.get_job", job_id=job.id)
    return response


def queue_json(q: db.QueueInfo | db.QueueRow) -> dict[str, Any]:
    rate = None if q.jobs_per_second is None else float(q.jobs_per_second)  # at most 6 decimals: exact enough
    return {"name": q.name, "paused": q.paused, "maxRunning": q.max_running, "jobsPerSecond": rate}


def _queue_name(name: str) -> str:
    """The SQL functions check blank and over-long names (QV400); NUL and surrogates never reach them."""
    problem = _bad_text(name)
    if problem:
        raise ApiError(400, "invalid_argument", f"the queue name {problem}",
                       [{"field": "name", "problem": problem}])
    return name


@bp.get("/queues")
def list_queues() -> Response:
    """Every known queue (one with a job, or paused or limited): its settings and its numbers now."""
    with pool().connection() as conn:
        found = db.list_queues(conn)
    return ok([{**queue_json(q), "depth": q.depth, "running": q.running,
                "oldestReadyAgeSeconds": q.oldest_ready_age_seconds} for q in found])


def _create_queue(body: Any = None) -> bool:
    """?create=true (or "create": true in a JSON body): set up a queue that is not known yet (else 404)."""
    raw = request.args.get("create")
    if raw is not None and raw.lower() not in ("true", "false", "1", "0"):
        raise ApiError(400, "invalid_argument", "create must be true or false",
                       [{"field": "create", "problem": "must be true or false"}])
    flag = body.get("create", False) if isinstance(body, dict) else False
    if not isinstance(flag, bool):
        raise ApiError(400, "invalid_argument", "create must be true or false",
                       [{"field": "create", "problem": "must be true or false"}])
    return flag or (raw is not None and raw.lower() in ("true", "1"))


@bp.post("/queues/<name>/pause")
def pause_queue(name: str) -> Response:
    """Claims skip the queue; enqueues still land in it (pause_queue). Idempotent. A queue not known
    yet is 404 unless ?create=true."""
    queue = _queue_name(name)
    with pool().connection() as conn:
        row = db.pause_queue(conn, queue=queue, create=_create_queue())
    return ok(queue_json(row))


@bp.post("/queues/<name>/resume")
def resume_queue(name: str) -> Response:
    """Claims take from the queue again (resume_queue). Idempotent. A queue not known yet is 404 unless
    ?create=true."""
    queue = _queue_name(name)
    with pool().connection() as conn:
        row = db.resume_queue(conn, queue=queue, create=_create_queue())
    return ok(queue_json(row))


@bp.route("/queues/<name>/limit", methods=["PUT", "POST"])
def set_queue_limit(name: str) -> Response:
    """{"max_running": n | null}: at most n of the queue's jobs processing at once (set_queue_limit)."""
    queue = _queue_name(name)
    _require_json_body()
    body = _read_json_body()
    if not isinstance(body, dict) or "max_running" not in body:
        raise ApiError(400, "invalid_argument", 'send {"max_running": n} (a whole number of at least 1) or null',
                       [{"field": "max_running", "problem": "is required"}])
    unknown = sorted(set(body) - {"max_running", "create"})
    if unknown:
        raise ApiError(400, "invalid_argument", f"unknown field {unknown[0][:64]!r}",
                       [{"field": k[:64], "problem": "unknown field"} for k in unknown])
    n = body["max_running"]
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= PRIORITY_MAX):
        problem = f"must be a whole number from 1 to {PRIORITY_MAX}, or null for no limit"
        raise ApiError(400, "invalid_argument", f"max_running {problem}",
                       [{"field": "max_running", "problem": problem}])
    with pool().connection() as conn:
        row = db.set_queue_limit(conn, queue=queue, max_running=n, create=_create_queue(body))
    return ok(queue_json(row))


def worker_json(w: db.WorkerStatus) -> dict[str, Any]:
    return {"id": w.id, "hostname": w.hostname, "pid": w.pid, "queues": w.queues, "taskTypes": w.task_types,
            "concurrency": w.concurrency, "startedAt": iso(w.started_at), "lastSeenAt": iso(w.last_seen_at),
            "expiresAt": iso(w.expires_at), "stoppedAt": iso(w.stopped_at), "alive": w.alive}


WORKERS_SHOWN = 200


@bp.get("/workers")
def list_workers() -> Response:
    """The workers that registered (register_worker), the live ones first, at most 200. alive is the
    database's verdict: the worker's own heartbeat keeps expires_at ahead of now() and it has not stopped."""
    with pool().connection() as conn:
        found = db.list_worker_status(conn, limit=WORKERS_SHOWN)
    return ok([worker_json(w) for w in found])


THROUGHPUT_MINUTES_DEFAULT, THROUGHPUT_MINUTES_MAX, THROUGHPUT_BUCKETS = 60, 1440, 60


@bp.get("/throughput")
def throughput() -> Response:
    """Finished attempts per queue over the last `minutes` (default 60, at most 1440), in buckets of equal
    width ending now: at most 60 of them (one a minute for the last hour)."""
    errors: list[dict[str, str]] = []
    minutes = THROUGHPUT_MINUTES_DEFAULT
    text = request.args.get("minutes")
    if text is not None:
        if text.isascii() and text.isdigit() and len(text) <= 4 and 1 <= int(text) <= THROUGHPUT_MINUTES_MAX:
            minutes = int(text)
        else:
            errors.append({"field": "minutes", "problem": f"must be a whole number from 1 to {THROUGHPUT_MINUTES_MAX}"})
    for name in sorted(set(request.args) - {"minutes"}):
        errors.append({"field": name[:64], "problem": "unknown query parameter"})
    if errors:
        raise ApiError(400, "invalid_query",
                       "bad query: " + "; ".join(f"{e['field']} {e['problem']}" for e in errors), errors)
    buckets = min(minutes, THROUGHPUT_BUCKETS)
    with pool().connection() as conn:
        found = db.throughput(conn, minutes=minutes, buckets=buckets)
    queues: dict[str, dict[str, Any]] = {}
    for c in found.counts:
        q = queues.setdefault(c.queue, {"name": c.queue, "succeeded": [0] * buckets, "failed": [0] * buckets})
        q["succeeded"][c.bucket] += c.succeeded
        q["failed"][c.bucket] += c.failed
    return ok({"since": iso(found.since), "until": iso(found.until), "minutes": minutes, "buckets": buckets,
               "bucketSeconds": minutes * 60 / buckets,
               "queues": [{**q, "totalSucceeded": sum(q["succeeded"]), "totalFailed": sum(q["failed"])}
                          for q in sorted(queues.values(), key=lambda q: q["name"])]})


def schedule_json(s: db.Schedule, now: datetime) -> dict[str, Any]:
    from pgqw.cron import next_slot_of

    from .serialize import iso as _iso

    return {"name": s.name, "task_type": s.task_type, "cron": s.cron, "payload": s.payload, "queue": s.queue,
            "priority": s.priority, "catch_up": s.catch_up, "paused": s.paused, "last_slot": _iso(s.last_slot),
            "next_slot": _iso(next_slot_of(s, now)), "source": s.source, "created_at": _iso(s.created_at),
            "updated_at": _iso(s.updated_at)}


def _schedule_name(name: str) -> str:
    """Any other name is no schedule's (the schedules_name_charset rule): 404, as for an unknown one."""
    if not SCHEDULE_NAME_RE.fullmatch(name):
        raise ApiError(404, "schedule_not_found", f"no schedule is named {name[:64]!r}")
    return name


@bp.get("/schedules")
def list_schedules() -> Response:
    """Every schedule by name, with its next slot (croniter, from the server's clock; null when paused)."""
    with pool().connection() as conn:
        now = db.server_now(conn)
        found = db.list_schedules(conn)
    return ok({"schedules": [schedule_json(s, now) for s in found]})


@bp.post("/schedules/<name>/pause")
def pause_schedule(name: str) -> Response:
    """The schedule enqueues nothing until resumed (pause_schedule). Idempotent; 404 (QR404) when unknown."""
    with pool().connection() as conn:
        row = db.pause_schedule(conn, name=_schedule_name(name))
        now = db.server_now(conn)
    return ok(schedule_json(row, now))


@bp.post("/schedules/<name>/resume")
def resume_schedule(name: str) -> Response:
    """Enqueues again from the next slot after now (resume_schedule). Idempotent; 404 (QR404) when unknown."""
    with pool().connection() as conn:
        row = db.resume_schedule(conn, name=_schedule_name(name))
        now = db.server_now(conn)
    return ok(schedule_json(row, now))
@bp.route("/queues/<name>/rate", methods=["PUT", "POST"])
def set_queue_rate(name: str) -> Response:
    """{"jobs_per_second": x | null}: at most x of the queue's jobs started per second (set_queue_rate).
    The function checks the range and the decimal places (QV400); a non-number never reaches it."""
    queue = _queue_name(name)
    _require_json_body()
    body = _read_json_body()
    if not isinstance(body, dict) or "jobs_per_second" not in body:
        raise ApiError(400, "invalid_argument", 'send {"jobs_per_second": x} (a number above 0) or null',
                       [{"field": "jobs_per_second", "problem": "is required"}])
    unknown = sorted(set(body) - {"jobs_per_second", "create"})
    if unknown:
        raise ApiError(400, "invalid_argument", f"unknown field {unknown[0][:64]!r}",
                       [{"field": k[:64], "problem": "unknown field"} for k in unknown])
    x = body["jobs_per_second"]
    if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x)
                          or not 0 < x <= RATE_MAX):
        problem = f"must be a number above 0 and at most {RATE_MAX}, or null for no rate"
        raise ApiError(400, "invalid_argument", f"jobs_per_second {problem}",
                       [{"field": "jobs_per_second", "problem": problem}])
    with pool().connection() as conn:
        row = db.set_queue_rate(conn, queue=queue, jobs_per_second=x, create=_create_queue(body))
    return ok(queue_json(row))


def _result_of(jid: uuid.UUID) -> tuple[db.Job, db.Result | None]:
    with pool().connection() as conn:
        job = db.get_job(conn, job_id=jid)
        if job is None:
            raise _not_found(jid)
        return job, (db.get_result(conn, job_id=jid) if job.status == "succeeded" else None)


@bp.get("/jobs/<job_id>/result")
def get_result(job_id: str) -> Response:
    """The job's result once it has succeeded: {"data": value} for a JSON result, else the file with
    its content type. 404 result_not_ready before; 404 no_result for a success without one."""
    jid = _job_id(job_id)
    job, result = _result_of(jid)
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


# The demo's route, registered by create_app only when its task modules include pgqw.demo.
demo_bp = Blueprint("demo", __name__, url_prefix="/api")
FLYER_PATH = "/api/jobs/{id}/flyer"  # as the OpenAPI document names it


@demo_bp.get("/jobs/<job_id>/flyer")
def get_flyer(job_id: str) -> Response:
    """The demo's PDF (the result of a listing_flyer job) once the job has succeeded; 404 before."""
    jid = _job_id(job_id)
    job, result = _result_of(jid)
    if result is None or result.data is None or result.content_type != "application/pdf":
        raise ApiError(404, "flyer_not_ready",
                       f"job {jid} is {job.status}; its flyer is served once the job has succeeded",
                       {"status": job.status})
    response = Response(bytes(result.data), mimetype="application/pdf")
    response.headers["Content-Disposition"] = f'inline; filename="flyer-{jid}.pdf"'
    response.headers["Cache-Control"] = "private, max-age=3600"
    return response


@bp.get("/openapi.json")
def openapi() -> Response:
    from . import auth

    # A type whose schema the API cannot use accepts no job (invalid_payload_schema): not documented.
    doc = document(auth_required=auth.enabled(current_app),
                   task_types=[(t.name, t.payload_schema, t.description) for t in task_types().all() if _usable(t)])
    if "demo.get_flyer" not in current_app.view_functions:  # the demo is not loaded: no flyer route
        doc["paths"] = {path: item for path, item in doc["paths"].items() if path != FLYER_PATH}
    return jsonify(doc)
