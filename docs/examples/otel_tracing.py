"""OpenTelemetry tracing for a pgqw worker: one span around every attempt, named `pgqw.task <type>`.

    pip install opentelemetry-distro opentelemetry-exporter-otlp
    opentelemetry-instrument pgqw worker --tasks otel_tracing,myapp.tasks

`opentelemetry-instrument` sets up the SDK from the OTEL_* variables (OTEL_SERVICE_NAME,
OTEL_EXPORTER_OTLP_ENDPOINT, ...); an application that sets up its TracerProvider in code does it in
one of its task modules, before the first job runs. Without an SDK the spans cost next to nothing.

The hook runs where the handler runs (its thread, or its asyncio task for an `async def` handler), so
the attempt's span is current in the handler: a span the handler opens, or one its instrumented
libraries open (HTTP clients, database drivers), is a child of it. A failed attempt's span records the
exception and has status ERROR; a cancelled one says so in `pgqw.outcome`.
"""
from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from pgqw import hooks

tracer = trace.get_tracer("pgqw")


@hooks.around_attempt
def trace_attempt(attempt: hooks.Attempt) -> hooks.Around:
    attributes = {
        "messaging.system": "pgqw",
        "messaging.operation.type": "process",
        "messaging.destination.name": attempt.queue,
        "messaging.message.id": str(attempt.job_id),
        "pgqw.job_id": str(attempt.job_id),
        "pgqw.type": attempt.type,
        "pgqw.queue": attempt.queue,
        "pgqw.attempt": attempt.attempt,
        "pgqw.max_attempts": attempt.max_attempts,
        "pgqw.worker": attempt.worker_id,
    }
    # The outcome is sent in, not raised: the span records it below instead of the `with` doing it.
    with tracer.start_as_current_span(f"pgqw.task {attempt.type}", kind=SpanKind.CONSUMER, attributes=attributes,
                                      record_exception=False, set_status_on_exception=False) as span:
        outcome = yield
        span.set_attribute("pgqw.outcome", outcome.outcome)
        if outcome.error is not None:
            span.record_exception(outcome.error)
        if outcome.failed:
            span.set_attribute("pgqw.retryable", outcome.retryable)
            span.set_status(Status(StatusCode.ERROR, outcome.message))
