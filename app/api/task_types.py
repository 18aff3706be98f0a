"""The registered task types: GET /api/task-types, the cache POST /api/jobs reads them from, and the
check of a payload against its type's JSON Schema."""
from __future__ import annotations

import functools
import json
import threading
import time
from typing import Any

from flask import Blueprint, Response, current_app

from pgqw import db, payload_schema

from ..errors import ApiError
from ..models import TaskType
from .common import ok, pool

bp = Blueprint("task_types", __name__)

# How long checking one payload against its type's schema may take (pgqw.payload_schema.errors).
PAYLOAD_CHECK_SECONDS = 1.0

_JSON_KINDS = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
               "object": "a JSON object", "array": "a JSON array", "null": "null"}


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


def schema_errors(task_type: db.TaskType, payload: dict[str, Any]) -> list[dict[str, str]]:
    """Every field of the payload that breaks its type's JSON Schema, once each, under payload.

    422 invalid_payload_schema when the type's schema is one the API cannot use (pgqw.payload_schema's
    rules), and 422 payload_check_timeout when the check takes more than PAYLOAD_CHECK_SECONDS."""
    schema = task_type.payload_schema
    checked = validator_of(task_type)
    try:
        found = payload_schema.errors(checked, payload, seconds=PAYLOAD_CHECK_SECONDS)
    except payload_schema.PayloadCheckTimeout:
        raise ApiError(422, "payload_check_timeout",
                       f"checking the payload against the schema of task type {task_type.name!r} took more than "
                       f"{PAYLOAD_CHECK_SECONDS:g} s; the job was not accepted",
                       {"taskType": task_type.name}) from None
    except payload_schema.PayloadSchemaError as exc:
        raise unusable_schema(task_type.name, str(exc)) from None
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


def unusable_schema(name: str, problem: str) -> ApiError:
    return ApiError(422, "invalid_payload_schema",
                    f"the payload schema registered for task type {name!r} is one the API cannot use, so no job "
                    f"of it is accepted until the type is registered again with a valid schema: {problem}",
                    {"taskType": name, "problem": problem})


# The checked validator (or what is wrong with the schema) of each schema dict the task-type cache holds
# (its id, with the dict kept alive): no serializing of the schema per request to find it.
_VALIDATORS: dict[int, tuple[dict[str, Any], Any]] = {}


def validator_of(task_type: db.TaskType) -> Any:
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
        raise unusable_schema(task_type.name, problem)
    return checked


@functools.lru_cache(maxsize=256)
def _validator(schema_json: str) -> tuple[Any, str | None]:
    """(validator, None), or (None, the rule the schema breaks)."""
    try:
        return payload_schema.validator(json.loads(schema_json)), None
    except payload_schema.PayloadSchemaError as exc:
        current_app.logger.warning("a registered payload schema cannot be used: %s", exc)
        return None, str(exc)


def usable(task_type: db.TaskType) -> bool:
    try:
        validator_of(task_type)
    except ApiError:
        return False
    return True


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


@bp.get("/task-types")
def list_task_types() -> Response:
    """Every registered task type: its payload schema and its effective settings."""
    with pool().connection() as conn:
        found = db.get_task_types(conn)
    return ok([TaskType.of(t) for t in found])
