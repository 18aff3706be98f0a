"""The queues: list, pause and resume, the limit, the limit per concurrency key and the rate, and the
throughput per queue."""
from __future__ import annotations

import math
from typing import Any

from flask import Blueprint, Response, request

from pgqw import db

from ..errors import ApiError
from ..models import (
    PRIORITY_MAX,
    RATE_MAX,
    Queue,
    QueueKeyLimit,
    QueueLimit,
    QueueRate,
    QueueStatus,
    QueueThroughput,
    Throughput,
)
from .common import bad_text, ok, pool, read_json_body, require_json_body

bp = Blueprint("queues", __name__)

THROUGHPUT_MINUTES_DEFAULT, THROUGHPUT_MINUTES_MAX, THROUGHPUT_BUCKETS = 60, 1440, 60


def queue_name(name: str) -> str:
    """The SQL functions check blank and over-long names (QV400); NUL and surrogates never reach them."""
    problem = bad_text(name)
    if problem:
        raise ApiError(400, "invalid_argument", f"the queue name {problem}",
                       [{"field": "name", "problem": problem}])
    return name


@bp.get("/queues")
def list_queues() -> Response:
    """Every known queue (one with a job, or paused or limited): its settings and its numbers now."""
    with pool().connection() as conn:
        found = db.list_queues(conn)
    return ok([QueueStatus.of(q) for q in found])


def create_queue(body: Any = None) -> bool:
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
    queue = queue_name(name)
    with pool().connection() as conn:
        row = db.pause_queue(conn, queue=queue, create=create_queue())
    return ok(Queue.of(row))


@bp.post("/queues/<name>/resume")
def resume_queue(name: str) -> Response:
    """Claims take from the queue again (resume_queue). Idempotent. A queue not known yet is 404 unless
    ?create=true."""
    queue = queue_name(name)
    with pool().connection() as conn:
        row = db.resume_queue(conn, queue=queue, create=create_queue())
    return ok(Queue.of(row))


def _setting(body: Any, camel: str, snake: str, missing: str) -> tuple[str, Any]:
    """The key the body gives the setting under (camelCase; the snake_case key is deprecated, still
    accepted) and its value; 400 when neither is there or another key is."""
    key = camel if isinstance(body, dict) and camel in body else snake
    if not isinstance(body, dict) or key not in body:
        raise ApiError(400, "invalid_argument", missing, [{"field": camel, "problem": "is required"}])
    unknown = sorted(set(body) - {key, "create"})
    if unknown:
        raise ApiError(400, "invalid_argument", f"unknown field {unknown[0][:64]!r}",
                       [{"field": k[:64], "problem": "unknown field"} for k in unknown])
    return key, body[key]


def _refused(key: str, problem: str) -> ApiError:
    return ApiError(400, "invalid_argument", f"{key} {problem}", [{"field": key, "problem": problem}])


@bp.route("/queues/<name>/limit", methods=["PUT", "POST"])
def set_queue_limit(name: str) -> Response:
    """{"maxRunning": n | null}: at most n of the queue's jobs processing at once (set_queue_limit)."""
    queue = queue_name(name)
    require_json_body()
    body = read_json_body()
    key, n = _setting(body, "maxRunning", "max_running",
                      'send {"maxRunning": n} (a whole number of at least 1) or null')
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= PRIORITY_MAX):
        raise _refused(key, f"must be a whole number from 1 to {PRIORITY_MAX}, or null for no limit")
    create = create_queue(body)
    limit = QueueLimit.model_validate({key: n})
    with pool().connection() as conn:
        row = db.set_queue_limit(conn, queue=queue, max_running=limit.max_running, create=create)
    return ok(Queue.of(row))


@bp.route("/queues/<name>/key-limit", methods=["PUT", "POST"])
def set_queue_key_limit(name: str) -> Response:
    """{"maxRunning": n | null}: at most n of the queue's jobs processing at once per concurrency key
    (set_queue_key_limit)."""
    queue = queue_name(name)
    require_json_body()
    body = read_json_body()
    key, n = _setting(body, "maxRunning", "maxRunning",
                      'send {"maxRunning": n} (a whole number of at least 1) or null')
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= PRIORITY_MAX):
        raise _refused(key, f"must be a whole number from 1 to {PRIORITY_MAX}, or null for no limit")
    create = create_queue(body)
    limit = QueueKeyLimit.model_validate({key: n})
    with pool().connection() as conn:
        row = db.set_queue_key_limit(conn, queue=queue, max_running=limit.max_running, create=create)
    return ok(Queue.of(row))


@bp.route("/queues/<name>/rate", methods=["PUT", "POST"])
def set_queue_rate(name: str) -> Response:
    """{"jobsPerSecond": x | null}: at most x of the queue's jobs started per second (set_queue_rate).
    The function checks the range and the decimal places (QV400); a non-number never reaches it."""
    queue = queue_name(name)
    require_json_body()
    body = read_json_body()
    key, x = _setting(body, "jobsPerSecond", "jobs_per_second",
                      'send {"jobsPerSecond": x} (a number above 0) or null')
    if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x)
                          or not 0 < x <= RATE_MAX):
        raise _refused(key, f"must be a number above 0 and at most {RATE_MAX}, or null for no rate")
    create = create_queue(body)
    rate = QueueRate.model_validate({key: x})
    with pool().connection() as conn:
        row = db.set_queue_rate(conn, queue=queue, jobs_per_second=x if rate.jobs_per_second is not None else None,
                                create=create)
    return ok(Queue.of(row))


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
    succeeded: dict[str, list[int]] = {}
    failed: dict[str, list[int]] = {}
    for c in found.counts:
        succeeded.setdefault(c.queue, [0] * buckets)[c.bucket] += c.succeeded
        failed.setdefault(c.queue, [0] * buckets)[c.bucket] += c.failed
    return ok(Throughput(
        since=found.since, until=found.until, minutes=minutes, buckets=buckets, bucket_seconds=minutes * 60 / buckets,
        queues=[QueueThroughput(name=name, succeeded=succeeded[name], failed=failed[name],
                                total_succeeded=sum(succeeded[name]), total_failed=sum(failed[name]))
                for name in sorted(succeeded)]))
