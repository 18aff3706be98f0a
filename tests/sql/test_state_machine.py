"""A hypothesis stateful test of the stored state machine against a small Python model of it.

Random interleavings of enqueue (one, a batch, a reused key), claim by several workers (each on its
own connection, of some queues and task types or all), mark_succeeded (one and in a batch, with a
JSON or bytes result or none), mark_failed (retryable or not, backoff now or later), heartbeat,
release_job, a virtual clock moving on, sweep_stuck and retry_dead, plus results presented with a
lease token that does not hold the job: a stale one (its attempt swept, handed back or ended), another
job's, or a made-up one. The model keeps every attempt's lease token, as its claim returned it.
After every step the database is read back and must agree with the model (status, attempts,
max_attempts, owner, lease, run_at, every attempt row and its token's SHA-256, every result) and
keep the invariants: attempts <= max_attempts; one job_attempts row per attempt, numbered 1..n;
status processing <=> locked_by and lease set; at most one open attempt per job, and only the current
attempt of a processing job; a result only for a succeeded job, the one its success was given.

The machine's two task types are registered with no settings of their own, so every default is
queue_settings' (SETTINGS_ROW).

The clock. The owner's claim_jobs_at and sweep_stuck_at take p_now (the test runs as the owner): the
model passes its virtual clock, which starts 12 hours ahead of the server's clock and moves on in
whole hours, so leases given by claim are exact
(p_now + p_lease_ms). Values set from the server's real now() (run_at of a new, released, swept or
retried job; the lease set by heartbeat; run_at after a backoff) are bounded by clock_timestamp()
read just before and just after the call, checked to fall inside those bounds, and then taken as
exact. To land a backoff or a heartbeat's lease at a virtual time, the test passes a duration of
(virtual now - server time before the call) + k hours; any value set from real now() with a short
duration is far behind the virtual clock, so it is ready (or expired) at once. A lease longer than a
day is refused (QV400): a heartbeat once the virtual clock is that far ahead is expected to be.

Two tests use the machine: a random run, and a fixed story that takes every path once (hypothesis
turns rules off per example, so a random run is not sure to reach, say, a claim of a failed job).

Size of the random run: PGQW_HYPOTHESIS_EXAMPLES (default 60) examples of PGQW_HYPOTHESIS_STEPS
(default 50) steps each, about 10 s (`pytest --fuzz-examples N` sets the first too). A long hunt:
    PGQW_HYPOTHESIS_EXAMPLES=2000 PGQW_HYPOTHESIS_STEPS=100 pytest tests/sql/test_state_machine.py
Hypothesis keeps no example database (database=None): no .hypothesis/ folder is written.
Replays are not exactly repeatable: jobs that tie on priority and run_at (those one sweep puts back
together) are claimed in the order of their random ids, so a failing example may be reported as
flaky when it is shrunk; the failure it first found is still reported.
"""
from __future__ import annotations

import hashlib
import itertools
import os
import uuid
from collections import Counter, defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterator

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test
from psycopg.types.json import Jsonb

from tests.helpers import one, rows

EXAMPLES = int(os.environ.get("PGQW_HYPOTHESIS_EXAMPLES", "60"))
STEPS = int(os.environ.get("PGQW_HYPOTHESIS_STEPS", "50"))

HOUR = timedelta(hours=1)
HOUR_MS = 3_600_000
DAY_MS = 86_400_000  # the longest lease a claim or a heartbeat grants
AHEAD = timedelta(hours=12)  # the virtual clock's lead on the server's clock at the start
MAX_VIRTUAL_SPAN = timedelta(days=20)  # keeps every duration passed as p_*_ms inside an integer
WORKERS = ("w1", "w2", "w3")
QUEUES = ("default", "emails")
TYPES = ("listing_flyer", "email")
INT_MAX = 2**31 - 1

# queue_settings as the migration leaves them; the test checks they are still so.
SETTINGS_ROW = {"max_attempts": 5, "lease_ms": 60_000, "retry_extra_attempts": 5, "backoff_max_delay_ms": 3_600_000}

# Text a worker or a person might send: anything but NUL (Postgres text cannot hold it; see
# test_hostile_inputs.py) and lone surrogates (not encodable as UTF-8).
TEXT = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.text(TEXT, max_size=12))
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(TEXT, max_size=6), inner, max_size=3),
    max_leaves=6,
)
PAYLOADS = st.dictionaries(st.text(TEXT, max_size=8), JSON_VALUES, max_size=4)
# Error texts: blank ones (refused with QV400) and ones with something visible in them. Texts made
# only of other whitespace (tabs, newlines) are left to test_hostile_inputs.py.
VISIBLE_TEXT = st.text(TEXT, min_size=1, max_size=40).filter(lambda s: s.strip() != "")
ERRORS = st.one_of(st.sampled_from(["", "   ", "x" * 10_050, "печать не удалась 🖨"]), VISIBLE_TEXT, VISIBLE_TEXT)
REASONS = st.one_of(st.none(), st.sampled_from(["", "  ", "worker shutting down"]),
                    st.text(TEXT, min_size=1, max_size=20).filter(lambda s: s.strip() != ""))
PICK = st.integers(min_value=0, max_value=10**6)
# A success's result: none, a JSON value (JSON null included: a result whose value is null), or bytes.
RESULTS = st.one_of(st.none(), st.tuples(st.just("application/json"), JSON_VALUES, st.none()),
                    st.tuples(st.just("application/pdf"), st.none(), st.binary(max_size=16)))
# mark_jobs_succeeded's results, one per pair: a JSON value, or null for none.
BATCH_RESULTS = st.one_of(st.none(), st.lists(JSON_VALUES, max_size=5))
TASK_TYPE_FILTERS = st.sampled_from([None, None, ["listing_flyer"], ["email"], ["email", "listing_flyer"]])


@dataclass(frozen=True)
class Target:
    """Which (job, lease token) a result is presented with, from the connection of `worker`: how is
    'holder' (a held job with its token), 'near-miss' (a held job with another job's token, shift 0; a
    made-up one, shift 1; the job's previous attempt's, shift -1), 'stale' (any job with one of its own
    attempts' tokens: the last one, shift 0; an earlier one, -1; a made-up one, 1) or 'unknown' (no
    such job, with a real token)."""

    pick: int
    how: str
    worker: str
    shift: int


TARGETS = st.builds(Target, pick=PICK, how=st.sampled_from(["holder", "holder", "near-miss", "stale", "unknown"]),
                    worker=st.sampled_from(WORKERS), shift=st.integers(-1, 1))
JOB_SPEC = st.fixed_dictionaries({
    "type": st.sampled_from(TYPES),
    "payload": PAYLOADS,
    "queue": st.sampled_from(QUEUES),
    "priority": st.integers(0, 2),
    "max_attempts": st.sampled_from([None, 1, 2, 3]),
})


@dataclass
class Instant:
    """A time the model knows exactly (lo == hi) or only within bounds until it reads the row."""

    lo: datetime
    hi: datetime

    @classmethod
    def exactly(cls, at: datetime) -> Instant:
        return cls(at, at)

    @property
    def value(self) -> datetime:
        assert self.lo == self.hi, "model error: a time is used before the database pinned it"
        return self.lo

    def pin(self, actual: datetime | None, what: str) -> None:
        assert actual is not None and self.lo <= actual <= self.hi, (
            f"{what} is {actual}, expected within [{self.lo}, {self.hi}]")
        self.lo = self.hi = actual


@dataclass
class ModelAttempt:
    worker: str
    started_at: datetime
    token: uuid.UUID
    outcome: str | None = None
    reason: str | None = None
    error: str | None = None  # exact text when the model knows it
    error_prefix: str | None = None  # or how it starts (the sweep's message names a time)


@dataclass
class ModelJob:
    id: uuid.UUID
    key: str
    type: str
    payload: dict[str, Any]
    queue: str
    priority: int
    max_attempts: int
    run_at: Instant
    status: str = "pending"
    attempts: int = 0
    locked_by: str | None = None
    lease: Instant | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    last_error: str | None = None
    last_error_prefix: str | None = None
    history: list[ModelAttempt] = field(default_factory=list)
    result: tuple[str, Any, bytes | None] | None = None  # (content type, JSON value, bytes) once succeeded
    isolated: bool = False  # listed in job_isolation by a sweep: it runs alone

    def holds(self, token: uuid.UUID) -> bool:
        """The token is this job's current attempt's, and that attempt is open."""
        return (self.status == "processing" and bool(self.history) and self.history[-1].token == token
                and self.history[-1].outcome is None)

    def attempt_of(self, token: uuid.UUID) -> ModelAttempt | None:
        return next((a for a in self.history if a.token == token), None)


def _clock(conn: psycopg.Connection) -> datetime:
    return one(conn, "select clock_timestamp() as t")["t"]


def _ms(delta: timedelta) -> int:
    return delta // timedelta(milliseconds=1)


class QueueMachine(RuleBasedStateMachine):
    """The model and the rules. conns is set by the test: 'observer' and one connection per worker."""

    conns: dict[str, psycopg.Connection] = {}
    seen: Counter[str] = Counter()  # what the run exercised, checked at the end of the test

    def __init__(self) -> None:
        super().__init__()
        self.db = self.conns["observer"]
        self.db.execute("truncate jobs, job_attempts, job_results, task_types, workers cascade")
        self.db.execute("select register_task_types(%s::jsonb)",
                        [Jsonb([{"name": n, "payload_schema": {}} for t in TYPES for n in (t, t + "-other")])])
        settings_row = one(self.db, "select max_attempts, lease_ms, retry_extra_attempts, backoff_max_delay_ms"
                                    " from queue_settings")
        assert settings_row == SETTINGS_ROW
        self.start = _clock(self.db)
        self.now = self.start + AHEAD
        self.jobs: dict[uuid.UUID, ModelJob] = {}
        self.order: list[uuid.UUID] = []
        self.keys = itertools.count()
        self.ticks = itertools.count(1)  # microseconds that keep the run_at values the test sets apart

    # ---- helpers -------------------------------------------------------------------------------

    def _worker(self, worker: str) -> psycopg.Connection:
        return self.conns[worker]

    def _tick(self) -> timedelta:
        return timedelta(microseconds=next(self.ticks))

    def _unused(self, run_at: datetime) -> datetime:
        """run_at itself (so run_at = p_now happens), or a microsecond earlier until no job has it."""
        while any(j.run_at.lo <= run_at <= j.run_at.hi for j in self.jobs.values()):
            run_at -= timedelta(microseconds=1)
        return run_at

    def _note(self, what: str) -> None:
        self.seen[what] += 1

    def _add(self, job: ModelJob) -> None:
        self.jobs[job.id] = job
        self.order.append(job.id)

    def _pick(self, pick: int) -> ModelJob:
        return self.jobs[self.order[pick % len(self.order)]]

    def _processing(self) -> list[ModelJob]:
        return [self.jobs[i] for i in self.order if self.jobs[i].status == "processing"]

    def _tokens(self) -> list[tuple[uuid.UUID, uuid.UUID]]:
        """(job id, token) of every attempt so far, in the order they were made."""
        return [(i, a.token) for i in self.order for a in self.jobs[i].history]

    def _token_for(self, job: ModelJob, shift: int, pick: int) -> uuid.UUID:
        """One of the job's own attempts' tokens (the last, shift 0; the one before, -1), or a made-up one."""
        if shift == 1 or not job.history:
            return uuid.uuid4()
        if shift == -1:
            return job.history[-2].token if len(job.history) >= 2 else uuid.uuid4()
        return job.history[-1].token

    def _target(self, whom: Target) -> tuple[ModelJob | None, uuid.UUID]:
        """The job a result is presented for (None: no such job) and the lease token presented with it."""
        processing = self._processing()
        if whom.how in ("holder", "near-miss") and processing:
            job = processing[whom.pick % len(processing)]
            if whom.how == "holder":
                return job, job.history[-1].token
            if whom.shift == 0:
                others = [t for i, t in self._tokens() if i != job.id]
                return job, others[whom.pick % len(others)] if others else uuid.uuid4()
            return job, self._token_for(job, whom.shift, whom.pick)
        tokens = self._tokens()
        if whom.how == "unknown":
            return None, tokens[whom.pick % len(tokens)][1] if tokens else uuid.uuid4()
        job = self._pick(whom.pick)
        return job, self._token_for(job, whom.shift, whom.pick)

    def _why_refused(self, job: ModelJob, token: uuid.UUID) -> None:
        """Notes which kind of token a refusal was for."""
        attempt = job.attempt_of(token)
        if attempt is None:
            owner = next((i for i, t in self._tokens() if t == token), None)
            self._note("refused another job's token" if owner is not None else "refused a made-up token")
        elif attempt.reason == "lease_expired":
            self._note("refused a stale token after a sweep")

    @staticmethod
    def _recorded(job: ModelJob | None, token: uuid.UUID, outcome: str, **kw: Any) -> bool:
        """The token's attempt already ended this way: the function answers already_recorded (a retry
        after a lost reply) instead of refusing."""
        done = None if job is None else job.attempt_of(token)
        return done is not None and done.outcome == outcome and all(
            getattr(done, name) == value for name, value in kw.items())

    def _expect_error(self, code: str, conn: psycopg.Connection, query: str, params: Any) -> None:
        with pytest.raises(psycopg.Error) as exc:
            conn.execute(query, params)
        assert exc.value.sqlstate == code, exc.value
        self._note(f"refused with {code}")

    def _finish_attempt(self, job: ModelJob, outcome: str, **kw: Any) -> None:
        last = job.history[-1]
        last.outcome = outcome
        for name, value in kw.items():
            setattr(last, name, value)

    def _ready(self, queues: list[str] | None, types: list[str] | None = None) -> list[ModelJob]:
        ready = [j for j in self.jobs.values()
                 if j.status in ("pending", "failed") and j.run_at.value <= self.now
                 and j.attempts < j.max_attempts and (queues is None or j.queue in queues)
                 and (types is None or j.type in types)]
        return sorted(ready, key=lambda j: (-j.priority, j.run_at.value, j.id))

    # ---- enqueue -------------------------------------------------------------------------------

    @rule(spec=JOB_SPEC, delay_hours=st.sampled_from([None, 0, 1, 3]),
          reuse=st.sampled_from([None, None, "same", "type", "payload", "queue", "priority"]), pick=PICK)
    def enqueue(self, spec: dict[str, Any], delay_hours: int | None, reuse: str | None, pick: int) -> None:
        """A new job; or a key used again: the same job back unchanged, QI409 when the request differs."""
        if reuse is not None and self.order:
            self._enqueue_same_key(self._pick(pick), reuse, spec["max_attempts"])
            return
        key = f"key-{next(self.keys)}"
        run_at = None if delay_hours is None else self._unused(self.now + delay_hours * HOUR)
        before = _clock(self.db)
        row = one(self.db, "select (r.job).*, r.created from enqueue_job(%s::text, %s::jsonb, %s::text, %s::text,"
                           " %s::integer, %s::timestamptz, %s::integer) r",
                  [spec["type"], Jsonb(spec["payload"]), key, spec["queue"], spec["priority"], run_at,
                   spec["max_attempts"]])
        after = _clock(self.db)
        assert row["created"] is True and row["status"] == "pending" and row["attempts"] == 0
        self._add(ModelJob(
            id=row["id"], key=key, type=spec["type"], payload=spec["payload"], queue=spec["queue"],
            priority=spec["priority"], max_attempts=spec["max_attempts"] or SETTINGS_ROW["max_attempts"],
            run_at=Instant(before, after) if run_at is None else Instant.exactly(run_at)))

    def _enqueue_same_key(self, job: ModelJob, change: str, max_attempts: int | None) -> None:
        args = {"type": job.type, "payload": job.payload, "queue": job.queue, "priority": job.priority}
        if change == "type":
            args["type"] = job.type + "-other"
        elif change == "payload":
            args["payload"] = {**job.payload, "changed": True} if job.payload.get("changed") is not True else {}
        elif change == "queue":
            args["queue"] = "elsewhere"
        elif change == "priority":
            args["priority"] = job.priority + 1
        # max_attempts is not part of the request's identity: the existing job keeps its own.
        query = ("select (r.job).*, r.created from enqueue_job(%s::text, %s::jsonb, %s::text, %s::text, %s::integer,"
                 " null::timestamptz, %s::integer) r")
        params = [args["type"], Jsonb(args["payload"]), job.key, args["queue"], args["priority"], max_attempts]
        if change != "same":
            self._expect_error("QI409", self.db, query, params)
            return
        row = one(self.db, query, params)
        assert row["created"] is False and row["id"] == job.id
        assert (row["status"], row["attempts"], row["max_attempts"]) == (job.status, job.attempts, job.max_attempts)
        self._note("enqueue_job gave back the job of a used key")

    @rule(specs=st.lists(JOB_SPEC, min_size=1, max_size=3), reuse=st.booleans(), pick=PICK)
    def enqueue_batch(self, specs: list[dict[str, Any]], reuse: bool, pick: int) -> None:
        elements: list[dict[str, Any]] = []
        for spec in specs:
            element = {k: v for k, v in spec.items() if v is not None}
            element["idempotency_key"] = f"key-{next(self.keys)}"
            if elements:  # the first takes run_at = now(); the others are given one, all different
                element["run_at"] = (self.now - HOUR - self._tick()).isoformat()
            elements.append(element)
        existing = self._pick(pick) if reuse and self.order else None
        if existing is not None:
            elements.insert(pick % (len(elements) + 1), {
                "type": existing.type, "payload": existing.payload, "queue": existing.queue,
                "priority": existing.priority, "idempotency_key": existing.key, "max_attempts": 3})
        before = _clock(self.db)
        got = rows(self.db, "select (r.job).*, r.created from enqueue_jobs(%s::jsonb) r", [Jsonb(elements)])
        after = _clock(self.db)
        assert [r["idempotency_key"] for r in got] == [e["idempotency_key"] for e in elements]
        for element, row in zip(elements, got):
            if existing is not None and element["idempotency_key"] == existing.key:
                assert row["created"] is False and row["id"] == existing.id and row["status"] == existing.status
                assert row["max_attempts"] == existing.max_attempts
                continue
            assert row["created"] is True and row["status"] == "pending"
            self._add(ModelJob(
                id=row["id"], key=element["idempotency_key"], type=element["type"], payload=element["payload"],
                queue=element["queue"], priority=element["priority"],
                max_attempts=element.get("max_attempts", SETTINGS_ROW["max_attempts"]),
                run_at=Instant.exactly(datetime.fromisoformat(element["run_at"])) if "run_at" in element
                else Instant(before, after)))

    # ---- claim ---------------------------------------------------------------------------------

    @rule(worker=st.sampled_from(WORKERS), limit=st.sampled_from([1, 2, 3, 20, 20]),
          queues=st.sampled_from([None, None, ["default"], ["emails"], ["emails", "default"]]),
          lease_hours=st.sampled_from([None, 1, 2, 4]), types=TASK_TYPE_FILTERS)
    def claim(self, worker: str, limit: int, queues: list[str] | None, lease_hours: int | None,
              types: list[str] | None = None) -> None:
        """Takes exactly the ready jobs the model expects: of these queues and task types, highest
        priority, then oldest run_at, then id."""
        ready = self._ready(queues, types)
        holds = [j for j in self._processing() if j.locked_by == worker]
        alone = [j for j in ready if j.isolated]
        if any(j.isolated for j in holds):
            expected = []  # it runs an isolated job: nothing else
            if ready:
                self._note("claim took nothing while its worker ran an isolated job")
        elif alone:
            expected = [] if holds else alone[:1]  # a worker holding others takes it once they end
            self._note("claim took an isolated job alone" if expected else "claim waited for its worker to empty")
        else:
            expected = [j for j in ready if not j.isolated][:limit]
        if types is not None and len(expected) < limit and len(self._ready(queues)) > len(expected):
            self._note("claim passed over a job of another task type")
        lease_ms = None if lease_hours is None else lease_hours * HOUR_MS
        conn = self._worker(worker)
        # The owner's claim as of the virtual now: claim_job and claim_jobs are claim_jobs_at at now().
        got = rows(conn, "select (r.job).*, r.lease_token from claim_jobs_at(%s::timestamptz, %s::text, %s::integer,"
                         " %s::text[], %s::integer, %s::text[]) r", [self.now, worker, limit, queues, lease_ms, types])
        assert [r["id"] for r in got] == [j.id for j in expected], "claim took other jobs than the ready ones"
        lease = self.now + timedelta(milliseconds=lease_ms or SETTINGS_ROW["lease_ms"])
        for job, row in zip(expected, got):
            self._note(f"claim took a {job.status} job")
            if job.attempts >= 1 and job.status == "pending":
                self._note("claim took a job again after a sweep, a hand-back or a retry")
            job.status, job.attempts, job.locked_by = "processing", job.attempts + 1, worker
            job.lease, job.started_at = Instant.exactly(lease), self.now
            token = row["lease_token"]
            assert isinstance(token, uuid.UUID) and token not in {t for _, t in self._tokens()}, "a token given twice"
            job.history.append(ModelAttempt(worker=worker, started_at=self.now, token=token))
            assert (row["attempts"], row["lease_expires_at"]) == (job.attempts, lease)

    # ---- results -------------------------------------------------------------------------------

    @precondition(lambda self: self.order)
    @rule(whom=TARGETS, batch=st.booleans(),
          more=st.lists(st.tuples(PICK, st.integers(-1, 1)), max_size=3), result=RESULTS, results=BATCH_RESULTS)
    def succeed(self, whom: Target, batch: bool, more: list[tuple[int, int]],
                result: tuple[str, Any, bytes | None] | None = None, results: list[Any] | None = None) -> None:
        """mark_succeeded for one (job, token) with its result; or mark_jobs_succeeded for it and a few more
        pairs, each job with one of its own tokens (current or stale) or a made-up one, with a JSON result
        each: only the pairs whose token holds the job change, and only they get a result (a repeated or
        refused success stores none)."""
        job, token = self._target(whom)
        conn = self._worker(whom.worker)
        if batch:
            pairs = [(job.id if job else uuid.uuid4(), token)]
            pairs += [(self._pick(p).id, self._token_for(self._pick(p), shift, p)) for p, shift in more]
            results = None if results is None else results[:len(pairs)]
            expected = {i for i, t in pairs if i in self.jobs and self.jobs[i].holds(t)}
            recorded = {i for i, t in pairs if self._recorded(self.jobs.get(i), t, "succeeded")}
            got = rows(conn, "select (r.job).*, r.already_recorded from mark_jobs_succeeded(%s::uuid[], %s::uuid[], %s::jsonb) r",
                       [[p[0] for p in pairs], [p[1] for p in pairs], None if results is None else Jsonb(results)])
            assert sorted(r["id"] for r in got if not r["already_recorded"]) == sorted(expected)
            assert sorted(r["id"] for r in got if r["already_recorded"]) == sorted(recorded)
            assert all(r["status"] == "succeeded" for r in got)
            if recorded:
                self._note("mark_jobs_succeeded answered already recorded")
            if expected:
                self._note("mark_jobs_succeeded changed a job")
            for job_id in expected:
                held = self.jobs[job_id]
                # The result of the held pair's first listing that gives one (JSON null: none).
                given = [results[n] for n, pair in enumerate(pairs)
                         if results is not None and n < len(results) and results[n] is not None
                         and pair == (job_id, held.history[-1].token)]
                self._succeeded(held, ("application/json", given[0], None) if given else None)
                if given:
                    self._note("mark_jobs_succeeded stored a result")
            return
        query = "select (r.job).*, r.already_recorded from mark_succeeded(%s::uuid, %s::uuid, %s::text, %s::jsonb, %s::bytea) r"
        content_type, value, data = result if result is not None else (None, None, None)
        params = [job.id if job else uuid.uuid4(), token, content_type,
                  Jsonb(value) if content_type == "application/json" else None, data]
        if job is None:
            self._expect_error("QN404", conn, query, params)
            return
        if self._recorded(job, token, "succeeded"):
            row = one(conn, query, params)
            assert (row["status"], row["already_recorded"]) == ("succeeded", True)
            self._note("mark_succeeded answered already recorded")
            return
        if not job.holds(token):
            self._expect_error("QL409", conn, query, params)
            self._why_refused(job, token)
            return
        row = one(conn, query, params)
        self._note("mark_succeeded changed a job")
        if result is not None:
            self._note("mark_succeeded stored a result")
        self._succeeded(job, result)
        assert (row["status"], row["already_recorded"]) == ("succeeded", False)

    def _succeeded(self, job: ModelJob, result: tuple[str, Any, bytes | None] | None = None) -> None:
        job.status, job.locked_by, job.lease, job.result = "succeeded", None, None, result
        # greatest(now(), started_at): the virtual start is ahead of the server's clock.
        job.finished_at = job.started_at
        self._finish_attempt(job, "succeeded")

    @precondition(lambda self: self.order)
    @rule(whom=TARGETS, error=ERRORS, retryable=st.sampled_from([True, True, False]),
          backoff=st.one_of(
              st.tuples(st.just("soon"), st.sampled_from([0, 1000]), st.sampled_from([0, 500])),
              st.tuples(st.just("soon"), st.sampled_from([0, 1000]), st.sampled_from([0, 500])),
              st.tuples(st.just("later"), st.integers(1, 2), st.sampled_from([0, 500]))))
    def fail(self, whom: Target, error: str, retryable: bool, backoff: tuple[str, int, int]) -> None:
        """mark_failed: failed with a backoff the model bounds, or dead (no tries left, or permanent)."""
        job, token = self._target(whom)
        conn = self._worker(whom.worker)
        kind, amount, jitter_ms = backoff
        before = _clock(conn)
        if kind == "soon":
            base_ms, max_delay_ms = amount, None
        else:  # the cap lands the retry `amount` whole hours after the virtual now
            base_ms, max_delay_ms = INT_MAX, _ms(self.now - before) + amount * HOUR_MS
        query = ("select (r.job).*, r.already_recorded from mark_failed(%s::uuid, %s::uuid, %s::text, %s::boolean,"
                 " %s::integer, %s::integer, %s::integer) r")
        params = [job.id if job else uuid.uuid4(), token, error, retryable, base_ms, jitter_ms, max_delay_ms]
        if error.strip(" ") == "":
            self._expect_error("QV400", conn, query, params)
            return
        if job is None:
            self._expect_error("QN404", conn, query, params)
            return
        if self._recorded(job, token, "failed", error=error[:10_000]):
            row = one(conn, query, params)
            assert (row["id"], row["already_recorded"]) == (job.id, True)
            self._note("mark_failed answered already recorded")
            return
        if not job.holds(token):
            self._expect_error("QL409", conn, query, params)
            self._why_refused(job, token)
            return
        row = one(conn, query, params)
        assert row["already_recorded"] is False
        after = _clock(conn)
        job.locked_by, job.lease, job.last_error, job.last_error_prefix = None, None, error[:10_000], None
        self._finish_attempt(job, "failed", error=error[:10_000])
        if retryable and job.attempts < job.max_attempts:
            cap = max_delay_ms if max_delay_ms is not None else SETTINGS_ROW["backoff_max_delay_ms"]
            grown = base_ms * 2 ** min(job.attempts - 1, 60)
            low, high = min(grown, cap), min(grown + jitter_ms, cap)
            job.status = "failed"
            job.run_at = Instant(before + timedelta(milliseconds=low), after + timedelta(milliseconds=high))
        else:
            job.status, job.finished_at = "dead", job.started_at
        assert row["status"] == job.status
        self._note(f"mark_failed made a job {job.status}")

    @precondition(lambda self: self.order)
    @rule(whom=TARGETS, reason=REASONS)
    def release(self, whom: Target, reason: str | None) -> None:
        """A worker shutting down hands the job back: pending at once, the try not spent."""
        job, token = self._target(whom)
        conn = self._worker(whom.worker)
        query = "select (r.job).*, r.already_recorded from release_job(%s::uuid, %s::uuid, %s::text) r"
        if job is None:
            self._expect_error("QN404", conn, query, [uuid.uuid4(), token, reason])
            return
        if self._recorded(job, token, "abandoned", reason="handed_back"):
            row = one(conn, query, [job.id, token, reason])
            assert (row["id"], row["already_recorded"]) == (job.id, True)
            self._note("release_job answered already recorded")
            return
        if not job.holds(token):
            self._expect_error("QL409", conn, query, [job.id, token, reason])
            self._why_refused(job, token)
            return
        worker = job.history[-1].worker  # the reason names the worker whose claim the token came from
        before = _clock(conn)
        row = one(conn, query, [job.id, token, reason])
        assert row["already_recorded"] is False
        after = _clock(conn)
        self._note("release_job changed a job")
        said = (reason or "").strip(" ") or "no reason given"
        job.status, job.locked_by, job.lease = "pending", None, None
        job.max_attempts += 1
        job.run_at = Instant(before, after)
        self._finish_attempt(job, "abandoned", reason="handed_back",
                             error=f"handed back by worker {worker}: {said}"[:10_000])
        assert (row["status"], row["max_attempts"]) == ("pending", job.max_attempts)

    @precondition(lambda self: self.order)
    @rule(worker=st.sampled_from(WORKERS), held=st.booleans(),
          picks=st.lists(st.tuples(PICK, st.integers(-1, 1)), max_size=3), unknown=st.booleans(),
          lease_hours=st.sampled_from([None, 1, 3]))
    def heartbeat(self, worker: str, held: bool, picks: list[tuple[int, int]], unknown: bool,
                  lease_hours: int | None) -> None:
        """Extends the leases of the listed jobs whose token still holds them, and of no other job. held:
        the list starts with every job this worker holds, with its token, as a live worker's heartbeat does;
        then jobs with one of their own tokens (current or stale) or a made-up one."""
        pairs = [(j.id, j.history[-1].token) for j in self._processing() if j.locked_by == worker] if held else []
        pairs += [(self._pick(p).id, self._token_for(self._pick(p), shift, p)) for p, shift in picks]
        if unknown:
            tokens = self._tokens()
            pairs.append((uuid.uuid4(), tokens[-1][1] if tokens else uuid.uuid4()))
        conn = self._worker(worker)
        before = _clock(conn)
        # None: the settings' 60 s from the server's now, far behind the virtual clock (expired).
        lease_ms = None if lease_hours is None else _ms(self.now - before) + lease_hours * HOUR_MS
        query = "select * from heartbeat(%s::uuid[], %s::uuid[], %s::integer)"
        params = [[p[0] for p in pairs], [p[1] for p in pairs], lease_ms]
        if lease_ms is not None and lease_ms > DAY_MS:  # the virtual clock is more than a day ahead
            self._expect_error("QV400", conn, query, params)
            return
        got = rows(conn, query, params)
        after = _clock(conn)
        expected = {i for i, t in pairs if i in self.jobs and self.jobs[i].holds(t)}
        assert sorted(r["job_id"] for r in got) == sorted(expected)
        if expected:
            self._note("heartbeat extended a lease")
        if any(i in self.jobs and not self.jobs[i].holds(t) for i, t in pairs):
            self._note("heartbeat passed over a token that does not hold its job")
        duration = timedelta(milliseconds=lease_ms or SETTINGS_ROW["lease_ms"])
        for job_id in expected:
            self.jobs[job_id].lease = Instant(before + duration, after + duration)
        for r in got:
            self.jobs[r["job_id"]].lease.pin(r["lease_expires_at"], "heartbeat's returned lease")  # type: ignore[union-attr]

    # ---- time and recovery ---------------------------------------------------------------------

    @precondition(lambda self: self.now - self.start < MAX_VIRTUAL_SPAN)
    @rule(hours=st.integers(1, 6))
    def advance_clock(self, hours: int) -> None:
        self.now += hours * HOUR

    @rule()
    def sweep(self) -> None:
        """Every processing job whose lease ran out before the virtual now goes back (or dead)."""
        stuck = sorted((j for j in self._processing() if j.lease.value < self.now),  # type: ignore[union-attr]
                       key=lambda j: (j.lease.value, j.id))  # type: ignore[union-attr]
        before = _clock(self.db)
        got = rows(self.db, "select * from sweep_stuck_at(%s::timestamptz)", [self.now])
        after = _clock(self.db)
        expected = []
        for job in stuck:
            worker = job.locked_by
            # Which job stopped its worker is not known unless it ran alone: the attempt is given back and
            # the job runs alone next.
            if not job.isolated and job.max_attempts < 1000:
                job.max_attempts += 1
                job.isolated = True
                self._note("sweep gave an attempt back")
            else:
                self._note("sweep counted an isolated job's attempt")
            expected.append({"job_id": job.id, "attempt": job.attempts, "worker_id": worker,
                             "status": "pending" if job.attempts < job.max_attempts else "dead",
                             "lease_expired_at": job.lease.value})  # type: ignore[union-attr]
            job.status, job.locked_by, job.lease = expected[-1]["status"], None, None
            job.last_error, job.last_error_prefix = None, f"worker {worker} stopped responding"
            if job.status == "pending":
                job.run_at = Instant(before, after)
            else:
                job.finished_at = job.started_at
            self._finish_attempt(job, "abandoned", reason="lease_expired",
                                 error_prefix=f"worker {worker} stopped responding")
        assert got == expected
        for r in got:
            self._note(f"sweep made a job {r['status']}")

    @precondition(lambda self: self.order)
    @rule(pick=PICK, extra=st.sampled_from([None, 1, 2]), how=st.sampled_from(["dead", "dead", "any", "unknown"]))
    def retry_dead(self, pick: int, extra: int | None, how: str) -> None:
        """A person retries a job: only a dead one goes back (QS409 otherwise, QN404 for no job)."""
        dead = [self.jobs[i] for i in self.order if self.jobs[i].status == "dead"]
        job = dead[pick % len(dead)] if how == "dead" and dead else self._pick(pick)
        query = "select * from retry_dead(%s::uuid, %s::integer)"
        if how == "unknown":
            self._expect_error("QN404", self.db, query, [uuid.uuid4(), extra])
            return
        if job.status != "dead":
            self._expect_error("QS409", self.db, query, [job.id, extra])
            return
        before = _clock(self.db)
        row = one(self.db, query, [job.id, extra])
        after = _clock(self.db)
        self._note("retry_dead changed a job")
        job.status, job.finished_at, job.run_at = "pending", None, Instant(before, after)
        job.max_attempts += extra or SETTINGS_ROW["retry_extra_attempts"]
        assert (row["status"], row["max_attempts"]) == ("pending", job.max_attempts)

    # ---- after every step ----------------------------------------------------------------------

    @invariant()
    def database_agrees_with_model(self) -> None:
        jobs = rows(self.db, "select * from jobs")
        attempts = rows(self.db, "select * from job_attempts order by job_id, attempt")
        by_job: dict[uuid.UUID, list[dict[str, Any]]] = defaultdict(list)
        for a in attempts:
            by_job[a["job_id"]].append(a)
        assert set(by_job) <= {j["id"] for j in jobs}
        for j in jobs:
            mine = by_job[j["id"]]
            # The invariants, from the database alone.
            assert j["attempts"] <= j["max_attempts"], j
            assert [a["attempt"] for a in mine] == list(range(1, j["attempts"] + 1)), (j, mine)
            processing = j["status"] == "processing"
            assert processing == (j["locked_by"] is not None and j["lease_expires_at"] is not None), j
            open_attempts = [a for a in mine if a["outcome"] is None]
            assert len(open_attempts) == (1 if processing else 0), (j, mine)
            if processing:
                assert (open_attempts[0]["attempt"], open_attempts[0]["worker_id"]) == (j["attempts"], j["locked_by"])
        # A result only for a succeeded job: the one given with its success, never changed after.
        results = {r["job_id"]: r for r in rows(self.db, "select * from job_results")}
        status = {j["id"]: j["status"] for j in jobs}
        assert [i for i in results if status.get(i) != "succeeded"] == []
        # The model.
        assert {j["id"] for j in jobs} == set(self.jobs)
        for j in jobs:
            self._agrees(self.jobs[j["id"]], j, by_job[j["id"]])
        got_results = {i: (r["content_type"], r["value"], None if r["data"] is None else bytes(r["data"]))
                       for i, r in results.items()}
        assert got_results == {m.id: m.result for m in self.jobs.values() if m.result is not None}

    def _agrees(self, m: ModelJob, j: dict[str, Any], attempts: list[dict[str, Any]]) -> None:
        got = (j["status"], j["attempts"], j["max_attempts"], j["locked_by"], j["started_at"], j["finished_at"])
        want = (m.status, m.attempts, m.max_attempts, m.locked_by, m.started_at, m.finished_at)
        assert got == want, f"job {m.id}: (status, attempts, max, owner, started, finished) {got} != {want}"
        assert (j["idempotency_key"], j["type"], j["queue"], j["priority"], j["payload"]) == (
            m.key, m.type, m.queue, m.priority, m.payload)
        m.run_at.pin(j["run_at"], f"job {m.id} run_at")
        if m.lease is None:
            assert j["lease_expires_at"] is None
        else:
            m.lease.pin(j["lease_expires_at"], f"job {m.id} lease")
        if m.last_error_prefix is not None:
            assert j["last_error"].startswith(m.last_error_prefix), j["last_error"]
        else:
            assert j["last_error"] == m.last_error
        for a, h in zip(attempts, m.history, strict=True):
            # The attempt keeps only the SHA-256 of the token its claim returned.
            assert bytes(a["lease_token_hash"]) == hashlib.sha256(h.token.bytes).digest(), a
            assert (a["worker_id"], a["started_at"], a["outcome"], a["abandon_reason"]) == (
                h.worker, h.started_at, h.outcome, h.reason), (a, h)
            assert a["finished_at"] == (None if h.outcome is None else h.started_at), a
            if h.error_prefix is not None:
                assert a["error"].startswith(h.error_prefix), a
            else:
                assert a["error"] == h.error, a


SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
    # Shrinking a failure replays examples against the database for up to 5 minutes: worth it at a
    # desk, not in CI (.ci/run sets CI), where the failing example is printed unshrunk at once.
    phases=[p for p in Phase if p not in (Phase.shrink, Phase.explain)] if os.environ.get("CI")
    else settings.default.phases,
)


# Every path of the model. The scripted walk below takes each one; random runs take most of them,
# but hypothesis turns rules off per example (swarm testing), so no single run is sure to take all.
EVERY_PATH = (
    "claim took a pending job", "claim took a failed job", "mark_succeeded changed a job",
    "mark_jobs_succeeded changed a job", "mark_failed made a job failed", "mark_failed made a job dead",
    "release_job changed a job", "heartbeat extended a lease", "sweep made a job pending",
    "sweep made a job dead", "retry_dead changed a job", "refused with QL409", "refused with QS409",
    "refused with QI409", "refused with QN404", "refused with QV400",
    "enqueue_job gave back the job of a used key",
    "claim took a job again after a sweep, a hand-back or a retry",
    "claim passed over a job of another task type", "mark_succeeded stored a result",
    "mark_jobs_succeeded stored a result", "refused a stale token after a sweep", "refused another job's token",
    "refused a made-up token", "heartbeat passed over a token that does not hold its job",
    "sweep gave an attempt back", "sweep counted an isolated job's attempt", "claim took an isolated job alone",
    "claim took nothing while its worker ran an isolated job",
)
# Paths every random run takes dozens of times (at least ~50 in every measured run of the defaults):
# missing one means the run exercised far less than it should.
COMMON_PATHS = ("claim took a pending job", "refused with QL409", "refused with QN404", "refused with QI409",
                "refused with QS409")


@contextmanager
def _machine_class(db_url: str) -> Iterator[type[QueueMachine]]:
    conns = {name: psycopg.connect(db_url, autocommit=True) for name in ("observer", *WORKERS)}
    try:
        yield type("QueueMachineOnDatabase", (QueueMachine,), {"conns": conns, "seen": Counter()})
    finally:
        for c in conns.values():
            c.close()


@pytest.mark.timeout(900)  # a failure is shrunk for up to 5 minutes (not in CI, see SETTINGS)
def test_state_machine_database_agrees_with_model(db_url: str) -> None:
    with _machine_class(db_url) as machine:
        run_state_machine_as_test(machine, settings=SETTINGS)
    print("paths walked:", dict(sorted(machine.seen.items())))
    assert [path for path in COMMON_PATHS if not machine.seen[path]] == []


def _spec(queue: str = "default", priority: int = 0, max_attempts: int | None = None) -> dict[str, Any]:
    return {"type": "listing_flyer", "payload": {"title": "flat"}, "queue": queue, "priority": priority,
            "max_attempts": max_attempts}


def _whom(how: str, pick: int = 0, worker: str = "w1", shift: int = 0) -> Target:
    return Target(pick=pick, how=how, worker=worker, shift=shift)


def test_state_machine_scripted_walk_takes_every_path(db_url: str) -> None:
    """The same machine and checks, driven through one fixed story that takes every path once."""
    with _machine_class(db_url) as machine_class:
        m = machine_class()
        new = {"delay_hours": None, "reuse": None, "pick": 0}
        story: list[tuple[Any, dict[str, Any]]] = [
            (m.enqueue, {"spec": _spec(), **new}),  # A
            (m.enqueue, {"spec": _spec("emails", 2, max_attempts=1), **new}),  # B
            (m.enqueue, {"spec": _spec(), **new, "reuse": "same"}),  # A again
            (m.enqueue, {"spec": _spec(), **new, "reuse": "priority"}),  # QI409
            (m.enqueue_batch, {"specs": [_spec(priority=1, max_attempts=2)], "reuse": True, "pick": 0}),  # C, A
            (m.claim, {"worker": "w1", "limit": 1, "queues": None, "lease_hours": 1}),  # B
            (m.fail, {"whom": _whom("holder"), "error": "boom", "retryable": True,
                      "backoff": ("soon", 0, 0)}),  # B dead: its one try is spent
            (m.retry_dead, {"pick": 0, "extra": None, "how": "dead"}),  # B pending, 6 tries
            (m.retry_dead, {"pick": 0, "extra": None, "how": "any"}),  # A is pending: QS409
            (m.retry_dead, {"pick": 0, "extra": None, "how": "unknown"}),  # QN404
            (m.claim, {"worker": "w2", "limit": 20, "queues": None, "lease_hours": 1}),  # B, C, A
            (m.heartbeat, {"worker": "w2", "held": True, "picks": [], "unknown": True, "lease_hours": 3}),
            (m.succeed, {"whom": _whom("near-miss", shift=1), "batch": False, "more": []}),  # made up: QL409
            (m.succeed, {"whom": _whom("near-miss", shift=0), "batch": True, "more": []}),  # another job's: nothing
            (m.succeed, {"whom": _whom("near-miss", shift=0), "batch": False, "more": []}),  # another job's: QL409
            (m.fail, {"whom": _whom("near-miss", shift=0), "error": "boom", "retryable": True,
                      "backoff": ("soon", 0, 0)}),  # QL409
            (m.release, {"whom": _whom("near-miss", shift=-1), "reason": None}),  # QL409
            (m.release, {"whom": _whom("near-miss", shift=0), "reason": None}),  # QL409
            (m.fail, {"whom": _whom("near-miss", shift=1), "error": "boom", "retryable": True,
                      "backoff": ("soon", 0, 0)}),  # QL409
            # A with a made-up token, B with its first (failed) attempt's, C with a made-up one: nothing.
            (m.heartbeat, {"worker": "w1", "held": False, "picks": [(0, 1), (1, -1), (2, 1)], "unknown": False,
                           "lease_hours": 1}),
            (m.succeed, {"whom": _whom("holder", pick=0), "batch": False, "more": [],
                         "result": ("application/pdf", None, b"%PDF-A")}),  # A succeeded, with its PDF
            (m.succeed, {"whom": _whom("stale", pick=0, worker="w2"), "batch": False, "more": [],
                         "result": ("application/json", {"late": True}, None)}),  # A's again: its PDF stays
            (m.succeed, {"whom": _whom("stale", pick=0, worker="w2", shift=1), "batch": False, "more": []}),  # QL409
            (m.succeed, {"whom": _whom("unknown"), "batch": False, "more": []}),  # QN404
            (m.fail, {"whom": _whom("holder", pick=0), "error": "printer jammed", "retryable": True,
                      "backoff": ("soon", 1000, 500)}),  # B failed, ready at once
            (m.fail, {"whom": _whom("holder", pick=0), "error": "   ", "retryable": True,
                      "backoff": ("soon", 0, 0)}),  # QV400
            (m.claim, {"worker": "w3", "limit": 1, "queues": ["emails"], "lease_hours": 1}),  # B
            (m.release, {"whom": _whom("holder", pick=0), "reason": "shutting down"}),  # B pending
            (m.advance_clock, {"hours": 2}),
            (m.claim, {"worker": "w1", "limit": 1, "queues": ["emails"], "lease_hours": None}),
            (m.advance_clock, {"hours": 2}),  # B's and C's leases run out
            (m.sweep, {}),  # both pending, their attempts given back: each runs alone next
            (m.enqueue, {"spec": _spec(max_attempts=1), **new}),  # D
            (m.claim, {"worker": "w1", "limit": 20, "queues": None, "lease_hours": 1}),  # B alone; C and D wait
            (m.claim, {"worker": "w1", "limit": 20, "queues": None, "lease_hours": 1}),  # nothing: w1 runs B alone
            # B's swept attempt's token, now that the sweep handed B on: refused, B is not failed.
            (m.fail, {"whom": _whom("stale", pick=1, shift=-1), "error": "late", "retryable": False,
                      "backoff": ("soon", 0, 0)}),  # QL409
            (m.release, {"whom": _whom("stale", pick=1, shift=-1), "reason": None}),  # QL409
            (m.heartbeat, {"worker": "w2", "held": False, "picks": [(1, -1)], "unknown": False,
                           "lease_hours": 3}),  # nothing
            (m.claim, {"worker": "w2", "limit": 20, "queues": None, "lease_hours": 1}),  # C alone
            (m.claim, {"worker": "w3", "limit": 20, "queues": None, "lease_hours": 1}),  # D: no isolated job waits
            (m.advance_clock, {"hours": 2}),
            (m.sweep, {}),  # B and C pending, the attempts counted (they ran alone); D's given back
            (m.claim, {"worker": "w2", "limit": 1, "queues": None, "lease_hours": 1}),  # B alone
            (m.succeed, {"whom": _whom("holder", pick=0), "batch": True, "more": [(2, 0)],
                         "results": [{"b": 1}, {"c": 1}]}),  # B with its result; C not held, none
            (m.claim, {"worker": "w3", "limit": 1, "queues": None, "lease_hours": 1}),  # C alone, its last try
            (m.advance_clock, {"hours": 1}),
            (m.sweep, {}),  # C's lease ends exactly now: not expired yet
            (m.advance_clock, {"hours": 1}),
            (m.sweep, {}),  # C dead: its last try ran alone
            (m.enqueue, {"spec": _spec(), **new}),  # E
            (m.claim, {"worker": "w1", "limit": 20, "queues": None, "lease_hours": 1}),  # D alone; E waits
            (m.fail, {"whom": _whom("holder"), "error": "bad payload", "retryable": False,
                      "backoff": ("soon", 0, 0)}),  # D dead at once: not retryable
            (m.enqueue, {"spec": _spec(priority=2), **new, "delay_hours": 1}),  # F, ready in an hour
            (m.advance_clock, {"hours": 1}),  # F's run_at is now: ready
            (m.claim, {"worker": "w2", "limit": 1, "queues": None, "lease_hours": 1,
                       "types": ["email"]}),  # F is a listing_flyer: nothing
            (m.claim, {"worker": "w2", "limit": 1, "queues": None, "lease_hours": 1}),  # F, before E
        ]
        m.database_agrees_with_model()
        for step, arguments in story:
            step(**arguments)
            m.database_agrees_with_model()
        assert [m.jobs[i].status for i in m.order] == [
            "succeeded", "succeeded", "dead", "dead", "pending", "processing"]
    print("paths walked:", dict(sorted(machine_class.seen.items())))
    assert [path for path in EVERY_PATH if not machine_class.seen[path]] == []
