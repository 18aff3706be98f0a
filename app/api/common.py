"""What every area of the API shares: its limits, the pool, the {"data": ...} answer, reading a JSON
body, and the words a refused field is described in."""
from __future__ import annotations

import json
import math
import re
import uuid
from typing import Any

from flask import Response, current_app, jsonify, request
from pydantic import BaseModel, ValidationError
from werkzeug.exceptions import RequestEntityTooLarge

from .. import POOL_KEY, ApiPool
from ..errors import ApiError

IDEMPOTENCY_KEY_MAX = 255
# The rule of the jobs_idempotency_key_charset constraint (db/migrations/0002), checked here first
# so the answer can say what is wrong with the header.
IDEMPOTENCY_KEY_RE = re.compile(r"[!-~]{1,255}")
# The schedules_name_charset constraint's rule (db/migrations/0010_schedules.sql).
SCHEDULE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")
LIMIT_DEFAULT, LIMIT_MAX = 20, 100
CURSOR_MAX = 200
# Nesting of a request body: psycopg and jsonify encode JSON recursively, so a body nested close to
# the interpreter's recursion limit would parse and then fail to be stored (a 500, not a 4xx).
JSON_DEPTH_MAX = 100
# The stored form of a windowed key (enqueue_job's p_unique_for), `<key>@<window start>`, which a schedule's
# slots share (`schedule:<name>@<slot>`): a plain key may end like that only if it starts with schedule:,
# and a windowed key may not start so, or it would be the key of some other job (enqueue_job: QI422).
WINDOWED_KEY_RE = re.compile(r"@[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z\Z")
SCHEDULE_KEY_PREFIX = "schedule:"


def pool() -> ApiPool:
    return current_app.extensions[POOL_KEY]


def ok(data: BaseModel | list[Any] | Any, status: int = 200) -> Response:
    """{"data": ...}: a resource (or a list of them) dumped by its model, or a job's JSON result as it is."""
    if isinstance(data, BaseModel):
        data = data.model_dump(by_alias=True, mode="json")
    elif isinstance(data, list) and data and isinstance(data[0], BaseModel):
        data = [d.model_dump(by_alias=True, mode="json") for d in data]
    response = jsonify({"data": data})
    response.status_code = status
    return response


def parse_job_id(text: str) -> uuid.UUID:
    """A malformed id names no job: 404, the same as an id nobody has."""
    try:
        return uuid.UUID(text)
    except ValueError:
        raise ApiError(404, "job_not_found", f"no job has the id {text[:64]!r}: a job id is a UUID") from None


def not_found(job_id: uuid.UUID) -> ApiError:
    return ApiError(404, "job_not_found", f"job {job_id} does not exist")


def bad_text(value: Any) -> str | None:
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
            problem = bad_text(k) or bad_text(v)
            if problem:
                return problem
    if isinstance(value, list):
        for v in value:
            problem = bad_text(v)
            if problem:
                return problem
    return None


NUMBER_PROBLEM = "must be a number from -1.7976931348623157e308 to 1.7976931348623157e308 (a double's range)"


def unstorable_numbers(value: Any, path: str) -> list[dict[str, str]]:
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


def reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def require_json_body() -> None:
    """413 by the Content-Length header before anything else, then 415 unless application/json."""
    limit = current_app.config.get("MAX_CONTENT_LENGTH")
    if limit is not None and request.content_length is not None and request.content_length > limit:
        raise RequestEntityTooLarge()
    if request.mimetype != "application/json":
        got = request.mimetype or "no Content-Type"
        raise ApiError(415, "unsupported_media_type", f"send the body as application/json, not {got}")


def read_body() -> bytes:
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


def depth(value: Any) -> int:
    """How deeply arrays and objects nest in a parsed JSON value (a scalar: 0), without recursion."""
    deepest, level = 0, [(value, 1)]
    while level:
        node, depth = level.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            level.extend((child, depth + 1) for child in children)
    return deepest


def read_json_body() -> Any:
    raw = read_body()
    try:
        body = json.loads(raw.decode("utf-8"), parse_constant=reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {str(exc)[:200]}") from None
    if depth(body) > JSON_DEPTH_MAX:
        raise ApiError(400, "invalid_json", f"the body nests arrays and objects more than {JSON_DEPTH_MAX} levels deep")
    return body


def pydantic_problem(e: Any) -> str:
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
    if kind.startswith("uuid_"):
        return "must be a UUID"
    if kind.startswith(("datetime_", "timezone_")):
        return "must be a date and time with a time zone (ISO 8601, e.g. 2030-01-01T09:00:00Z)"
    return str(e.get("msg", "is not valid")).removeprefix("Value error, ")


def pydantic_errors(exc: ValidationError) -> list[dict[str, str]]:
    return [{"field": ".".join(str(p) for p in e.get("loc", ())) or "body", "problem": pydantic_problem(e)}
            for e in exc.errors(include_url=False)]
