"""pgqw.tasks: task definitions, checked when they are made; a worker with a bad one stops at start with
one line naming it."""
from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pydantic
import pytest
from pydantic import BaseModel, ConfigDict
from typing_extensions import TypedDict

from pgqw.tasks import File, PermanentError, Registry, Retry, TaskDefinitionError, parse_modules, result_row

ROOT = Path(__file__).resolve().parents[1]


class Order(BaseModel):
    order_id: int
    note: str = ""


class Thing:
    pass


class Opaque(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    thing: Thing


class Point(TypedDict):
    x: int
    y: int


def test_task_payload_model_from_the_annotation_and_its_json_schema() -> None:
    r = Registry()

    @r.task("ship", queue="orders", priority=2, max_attempts=3, lease_ms=1000,
            retry=Retry(base_ms=10, max_delay_ms=100, max_jitter_ms=0, permanent=(KeyError,)))
    def ship(payload: Order, ctx: Any) -> None:
        """Ships an order.

        More text that is not part of the description."""

    t = r.get("ship")
    assert t is ship and t.model is Order and not t.is_async
    assert t.payload_schema["required"] == ["order_id"] and t.payload_schema["type"] == "object"
    assert t.parse({"order_id": 4}) == Order(order_id=4)
    assert t.dump(Order(order_id=5)) == {"order_id": 5, "note": ""}
    assert t.registration() == {
        "name": "ship", "payload_schema": t.payload_schema, "description": "Ships an order.", "queue": "orders",
        "priority": 2, "max_attempts": 3, "backoff_base_ms": 10, "backoff_max_delay_ms": 100,
        "backoff_max_jitter_ms": 0, "lease_ms": 1000, "timeout_ms": None, "expire_after_ms": None,
        "max_snoozes": None, "retain_succeeded_ms": None, "retain_failed_ms": None}
    assert t.is_permanent(KeyError()) and t.is_permanent(PermanentError())
    assert not t.is_permanent(ValueError())
    with pytest.raises(pydantic.ValidationError):
        t.parse({"order_id": "x"})
    assert t.is_permanent(_validation_error())

    @r.task()
    async def plot(payload: Point, ctx: Any) -> None:
        pass

    assert r.names() == ["plot", "ship"] and r.get("plot").is_async
    assert r.get("plot").payload_schema["required"] == ["x", "y"]


def _validation_error() -> pydantic.ValidationError:
    try:
        Order.model_validate({})
    except pydantic.ValidationError as exc:
        return exc
    raise AssertionError


@pytest.mark.parametrize("define, message", [
    (lambda r: r.task("dup")(lambda p, c: None) and None, None),
    (lambda r: r.task("x", model=Opaque)(lambda p, c: None), "has no JSON Schema"),
    (lambda r: r.task("x", model=int)(lambda p, c: None), "must describe a JSON object"),
    (lambda r: r.task("x")(42), "is not callable"),
    (lambda r: r.task("x")(lambda p, c: None), "annotate the handler's first parameter"),
    (lambda r: r.task("", model=Order)(lambda p, c: None), "non-blank"),
    (lambda r: r.task("x", model=Order, max_attempts=0)(lambda p, c: None), "max_attempts must be"),
    (lambda r: r.task("x", model=Order, lease_ms=-1)(lambda p, c: None), "lease_ms must be"),
    (lambda r: r.task("x", model=Order, retry=Retry(permanent=("oops",)))(lambda p, c: None), "not an exception"),
    (lambda r: r.task(lambda p, c: None), "with parentheses"),
])
def test_task_bad_definitions_raise_naming_the_problem(define, message) -> None:
    r = Registry()
    if message is None:  # a second, different function under the same name
        r.task("dup", model=Order)(lambda p, c: 1)
        with pytest.raises(TaskDefinitionError, match="'dup' is defined twice"):
            r.task("dup", model=Order)(_other_handler)
        return
    with pytest.raises(TaskDefinitionError, match=message):
        define(r)
    assert len(r) == 0


def _other_handler(payload: Order, ctx: Any) -> None:
    pass


def test_task_results_as_stored() -> None:
    assert result_row(None) is None
    assert result_row({"a": [1, 2]}) == ("application/json", {"a": [1, 2]}, None)
    assert result_row(Order(order_id=1)) == ("application/json", {"order_id": 1, "note": ""}, None)
    assert result_row(File(b"%PDF", "application/pdf")) == ("application/pdf", None, b"%PDF")
    assert result_row(b"raw") == ("application/octet-stream", None, b"raw")


def test_task_modules_from_text_or_repeated_options() -> None:
    assert parse_modules(" a.tasks, b.tasks ,,a.tasks") == ("a.tasks", "b.tasks")
    assert parse_modules(["a.tasks", "b.tasks,c.tasks"]) == ("a.tasks", "b.tasks", "c.tasks")
    assert parse_modules(None) == ()


BAD_MODULES = {
    "duplicate_tasks": ("from pydantic import BaseModel\nfrom pgqw.tasks import task\n"
                        "class P(BaseModel):\n    x: int\n"
                        "@task('same')\ndef one(payload: P, ctx): pass\n"
                        "@task('same')\ndef two(payload: P, ctx): pass\n", "'same' is defined twice"),
    "schemaless_tasks": ("from pydantic import BaseModel, ConfigDict\nfrom pgqw.tasks import task\n"
                         "class T: pass\n"
                         "class P(BaseModel):\n    model_config = ConfigDict(arbitrary_types_allowed=True)\n    t: T\n"
                         "@task('opaque')\ndef one(payload: P, ctx): pass\n", "has no JSON Schema"),
    "uncallable_tasks": ("from pgqw.tasks import task\nhandler = task('broken')(42)\n", "is not callable"),
    "crashing_tasks": ("raise RuntimeError('config missing')\n", "failed to import: RuntimeError: config missing"),
    "empty_tasks": ("x = 1\n", "no task is defined in empty_tasks"),
}


@pytest.mark.parametrize("module", [*BAD_MODULES, "no_such_module"])
def test_worker_with_a_bad_task_definition_stops_at_start_in_one_line(module: str, tmp_path: Path,
                                                                      db_url: str) -> None:
    if module in BAD_MODULES:
        (tmp_path / f"{module}.py").write_text(BAD_MODULES[module][0])
    expected = BAD_MODULES[module][1] if module in BAD_MODULES else "cannot import task module 'no_such_module'"
    done = subprocess.run([sys.executable, "-m", "pgqw.cli", "worker", "--tasks", module], cwd=tmp_path,
                          env={**os.environ, "DATABASE_URL": db_url, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("pgqw worker: ") and expected in line, line


def test_task_expiry_snooze_limit_and_retention_are_registered_as_code_defaults() -> None:
    r = Registry()

    @r.task("render", expire_after_ms=60_000, max_snoozes=3, retain_succeeded=timedelta(hours=1),
            retain_failed=timedelta(days=90))
    def render(payload: Point, ctx: Any) -> None:
        pass

    row = r.get("render").registration()
    assert (row["expire_after_ms"], row["max_snoozes"]) == (60_000, 3)
    assert (row["retain_succeeded_ms"], row["retain_failed_ms"]) == (3_600_000, 90 * 86_400_000)


@pytest.mark.parametrize("options", [{"expire_after_ms": 0}, {"max_snoozes": 1001}, {"max_snoozes": -1},
                                     {"retain_succeeded": timedelta(seconds=-1)}, {"retain_failed": 3600},
                                     {"retain_failed": timedelta(days=40000)}])
def test_task_bad_expiry_snooze_limit_or_retention_is_a_definition_error(options: dict[str, Any]) -> None:
    with pytest.raises(TaskDefinitionError):
        Registry().task("bad", model=Point, **options)(lambda payload, ctx: None)
