"""Job handlers by type, registered in one place: HANDLERS maps a job type to a callable(job, ctx).

A handler returns normally when the work is done (optionally a short note for the log), raises
PermanentError when retrying cannot help (the job goes dead at once), and raises anything else for
a transient failure (the job is retried with backoff while it has attempts left).

Handlers must be idempotent: a job can run more than once (a worker dies mid-work, or its lease
expires while it still runs), so the work checks what is already done.

A handler whose work ends in a row of its own (the flyer) stores it with ctx.finish(store): in the
worker, store and mark_succeeded run in one transaction, so the output exists exactly when the job
succeeded. A worker killed between the two, or one whose lease ran out, leaves neither behind; its
late commit is refused (QL409) and rolls the output back with it.
"""
from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, TypeVar

import psycopg

from pgqw import config, db
from pgqw.config import Settings
from pgqw.listing import InvalidPayload, check_listing

T = TypeVar("T")


class PermanentError(Exception):
    """The job can never succeed as it is (bad payload, unknown type): dead at once, no retries."""


class TransientError(Exception):
    """A failure that may go away on another try; the message is recorded as is."""


# Runs fn with a database connection and returns its result. The worker's version takes a pooled
# connection and retries connection errors, so a dropped connection does not cost an attempt.
DbRunner = Callable[[Callable[[psycopg.Connection], T]], T]


@dataclass
class Context:
    """What a handler may use besides its job."""

    settings: Settings
    worker_id: str
    db: DbRunner
    rng: random.Random = field(default_factory=random.Random)
    sleep: Callable[[float], None] = time.sleep
    # Runs store(conn) in a transaction and returns its result. The worker's version records the
    # job's success in the same transaction (and raises QL409 when this attempt no longer holds
    # the job); outside a worker (tools, tests) there is no attempt to record, only the store.
    complete: Callable[[Callable[[psycopg.Connection], T]], T] | None = None

    def finish(self, store: Callable[[psycopg.Connection], T]) -> T:
        if self.complete is not None:
            return self.complete(store)

        def in_transaction(conn: psycopg.Connection) -> T:
            with conn.transaction():
                return store(conn)

        return self.db(in_transaction)

    @classmethod
    def connecting(cls, settings: Settings, conninfo: str, **kwargs: Any) -> "Context":
        """A context that opens one autocommit connection per database call (tools, tests)."""

        def run(fn: Callable[[psycopg.Connection], T]) -> T:
            with psycopg.connect(conninfo, autocommit=True) as conn:
                return fn(conn)

        return cls(settings=settings, worker_id=settings.worker_id, db=run, **kwargs)


Handler = Callable[[db.Job, Context], "str | None"]


def listing_flyer(job: db.Job, ctx: Context) -> str | None:
    """Renders the listing flyer PDF of a job and stores it; one flyer however often it runs."""
    try:
        check_listing(job.payload)
    except InvalidPayload as exc:
        raise PermanentError(str(exc)) from exc

    # A retry first asks whether the flyer exists already. In a worker the flyer is stored only with
    # the job's success (ctx.finish), so this finds one only when something else stored it (the
    # check-idempotency tool runs this work outside a worker); then the work is not redone and cannot
    # fail. A first attempt skips the query.
    if job.attempts > 1 and ctx.db(lambda conn: db.flyer_exists(conn, job_id=job.id)):
        return "flyer already existed"

    s = ctx.settings
    ctx.sleep(ctx.rng.uniform(s.sim_min_latency_ms, s.sim_max_latency_ms) / 1000.0)
    if ctx.rng.random() < s.sim_failure_rate:
        raise TransientError(f"Simulated rendering failure (SIM_FAILURE_RATE={s.sim_failure_rate:g})")

    # A run of the same job at the same time (a worker that lost its lease but still runs) may have
    # saved it meanwhile.
    if ctx.db(lambda conn: db.flyer_exists(conn, job_id=job.id)):
        return "flyer already existed"
    from pgqw.worker.flyer import render_flyer  # reportlab is imported only by processes that render

    pdf = render_flyer(job.payload, job_id=str(job.id), flyer_url=config.flyer_url(s, job.id))
    if ctx.finish(lambda conn: db.save_flyer(conn, job_id=job.id, pdf=pdf)):
        return f"flyer saved ({len(pdf) // 1024} KiB)"
    return "flyer already saved by a concurrent run"


def noop(job: db.Job, ctx: Context) -> None:
    """Does nothing: measures the queue itself (registered only with PGQW_BENCH_NOOP=1)."""
    return None


HANDLERS: dict[str, Handler] = {
    "listing_flyer": listing_flyer,
}


def registry(environ: Mapping[str, str] = os.environ) -> dict[str, Handler]:
    """The handlers this process runs: HANDLERS, plus noop when PGQW_BENCH_NOOP=1."""
    found = dict(HANDLERS)
    if environ.get("PGQW_BENCH_NOOP") == "1":
        found["noop"] = noop
    return found
