"""docs/examples/otel_tracing.py: a span per attempt, from real jobs run by a real worker (in process,
real database), exported to the SDK's InMemorySpanExporter."""
from __future__ import annotations

import importlib.util
import io
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from pgqw import hooks
from pgqw.tasks import Registry
from pgqw.worker.runner import Worker
from tests.helpers import enqueue
from tests.worker.parts import registered, settings

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "otel_tracing.py"
handler_tracer = trace.get_tracer("tests.handlers")  # the handlers' own spans


class Out(io.StringIO):
    """The worker's output; wait(check) until its text passes check."""

    def __init__(self) -> None:
        super().__init__()
        self.cond = threading.Condition()

    def write(self, text: str) -> int:
        with self.cond:
            n = super().write(text)
            self.cond.notify_all()
            return n

    def wait(self, check: Callable[[str], bool], timeout: float = 15.0) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: check(self.getvalue()), timeout)


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    """The process's SDK TracerProvider (set here unless a TracerProvider is already the global one),
    exporting every span as it ends to one in-memory exporter."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    found = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(found))
    return found


@pytest.fixture
def spans(exporter: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    exporter.clear()
    yield exporter
    exporter.clear()


@pytest.fixture
def example() -> Iterator[ModuleType]:
    """The example imported as a task module is (it registers its hook in pgqw.hooks.registry), and
    unregistered at the end."""
    module = sys.modules.get("otel_tracing")
    if module is None:
        spec = importlib.util.spec_from_file_location("otel_tracing", EXAMPLE)
        assert spec is not None and spec.loader is not None
        module = sys.modules["otel_tracing"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    hooks.around_attempt(module.trace_attempt)  # again after an earlier test's teardown (once either way)
    yield module
    hooks.remove(module.trace_attempt)


def _tasks() -> Registry:
    r = Registry()

    @r.task("report", model=dict)
    def report(payload: dict, ctx: object) -> dict:
        with handler_tracer.start_as_current_span("render report"):
            return {"pages": payload["pages"]}

    @r.task("explode", model=dict)
    def explode(payload: dict, ctx: object) -> None:
        raise RuntimeError("the printer caught fire")

    @r.task("fetch", model=dict)
    async def fetch(payload: dict, ctx: object) -> dict:
        with handler_tracer.start_as_current_span("fetch page"):
            return {"fetched": True}

    return r


def _run_jobs(db_url: str, conn: psycopg.Connection, jobs: list[tuple[str, dict, int]]) -> Out:
    """A worker runs the jobs until each has ended (success or dead); then it stops."""
    tasks = _tasks()
    for name in tasks.names():
        registered(conn, name)
    for type_, payload, max_attempts in jobs:
        enqueue(conn, type=type_, payload=payload, queue="reports", max_attempts=max_attempts)
    out = Out()
    worker = Worker(settings(lease_ms=5000, poll_interval_ms=50), db_url, tasks=tasks, out=out)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(worker.run()), daemon=True)
    thread.start()
    try:
        assert out.wait(lambda text: text.count("] success ") + text.count("→ dead") == len(jobs)), out.getvalue()
    finally:
        worker.stop("test over")
        thread.join(15)
    assert result == [0], out.getvalue()
    return out


def _attempt_spans(spans: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {s.name: s for s in spans.get_finished_spans() if s.name.startswith("pgqw.task ")}


def test_hooks_otel_spans_of_a_succeeding_and_a_failing_job(db_url: str, conn: psycopg.Connection,
                                                           spans: InMemorySpanExporter, example: ModuleType) -> None:
    _run_jobs(db_url, conn, [("report", {"pages": 3}, 5), ("explode", {}, 1)])
    found = _attempt_spans(spans)
    assert set(found) == {"pgqw.task report", "pgqw.task explode"}
    ok, failed = found["pgqw.task report"], found["pgqw.task explode"]
    job_ids = {row[0]: str(row[1]) for row in conn.execute("select type, id from jobs")}
    assert ok.kind == SpanKind.CONSUMER and ok.status.status_code == StatusCode.UNSET
    assert ok.attributes is not None and failed.attributes is not None
    assert {k: ok.attributes[k] for k in ("pgqw.job_id", "pgqw.queue", "pgqw.type", "pgqw.attempt",
                                          "pgqw.max_attempts", "pgqw.worker", "pgqw.outcome")} == {
        "pgqw.job_id": job_ids["report"], "pgqw.queue": "reports", "pgqw.type": "report", "pgqw.attempt": 1,
        "pgqw.max_attempts": 5, "pgqw.worker": "w1", "pgqw.outcome": "succeeded"}
    assert ok.attributes["messaging.message.id"] == job_ids["report"] and not ok.events

    assert failed.attributes["pgqw.outcome"] == "failed" and failed.attributes["pgqw.job_id"] == job_ids["explode"]
    assert failed.attributes["pgqw.retryable"] is True
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.status.description == "RuntimeError: the printer caught fire"
    [event] = failed.events
    assert event.name == "exception" and event.attributes is not None
    assert event.attributes["exception.type"] == "RuntimeError"
    assert event.attributes["exception.message"] == "the printer caught fire"
    assert "explode" in str(event.attributes["exception.stacktrace"])  # the handler's frame


def test_hooks_otel_handler_span_is_a_child_of_the_attempt_span(db_url: str, conn: psycopg.Connection,
                                                               spans: InMemorySpanExporter,
                                                               example: ModuleType) -> None:
    _run_jobs(db_url, conn, [("report", {"pages": 1}, 5), ("fetch", {}, 5)])
    found = _attempt_spans(spans)
    children = {s.name: s for s in spans.get_finished_spans() if not s.name.startswith("pgqw.task ")}
    # A plain handler on an executor thread, an async one in its task on the event loop.
    for attempt, child in (("pgqw.task report", "render report"), ("pgqw.task fetch", "fetch page")):
        parent = found[attempt].get_span_context()
        assert children[child].parent is not None, child
        assert children[child].parent.span_id == parent.span_id, child
        assert children[child].context.trace_id == parent.trace_id
    # Each attempt is a trace of its own (nothing current in the worker's threads leaks into the next).
    assert found["pgqw.task report"].parent is None and found["pgqw.task fetch"].parent is None
    assert found["pgqw.task report"].context.trace_id != found["pgqw.task fetch"].context.trace_id
