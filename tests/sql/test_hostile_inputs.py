"""Every stored function called with nulls, unknown ids, wrong states and hostile text and numbers.

Each bad call must raise its documented SQLSTATE (the function file's header, docs/errors.md) and
change nothing: a digest of every row of jobs, job_attempts, job_results, task_types, workers and
queue_settings is the same before and after. A generic code leaking where a Q-code is documented
(XX000, 22xxx, 23xxx) is a finding, and so is a bad call that succeeds. Errors PostgreSQL raises
before the function runs keep their own codes: 22P02 for a job id or lease token that is not a UUID,
54000 for chr(0) (text cannot hold NUL), 22P05 for "\\u0000" in JSON, and 42883 for a call in a form the functions no longer take
(a worker id and an attempt number in place of a lease token, a time given to a role's claim or sweep).

The calls run against one database per module holding one job in every state (pending, processing
held by w1 at attempt 1, succeeded with its PDF result, failed waiting a day, dead; each claimed one
with the lease token its claim returned), the demo's two
task types and one live worker w1; a test that changes it
(a failure) gets it seeded again for the next. A second set of calls is hostile but valid: they must
succeed and still change nothing. The last tests store hostile text through the functions and read
it back unchanged.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.helpers import database_copy, one, rows

FUNCTIONS_DIR = Path(__file__).resolve().parents[2] / "db" / "functions"
UNKNOWN = uuid.UUID("00000000-0000-4000-8000-000000000000")
MADE_UP = uuid.UUID("7b0e2c9e-55f1-4c7a-9d43-3f0e6a1b2c4d")  # a lease token no claim returned
INJECTION = "'; drop table jobs; --"
BLANK = r"E' \t\r\n '"  # whitespace that is not only spaces: as blank as '   '
NUL = "chr(0)"
DAY_MS = 86_400_000


@dataclass(frozen=True)
class Call:
    function: str
    what: str
    sql: str
    expect: str | None = None  # a SQLSTATE for a bad call; None for a call that must succeed
    result: Any = None  # for a call that must succeed: what the query's first column returns


def bad(function: str, what: str, statement: str, code: str) -> Any:
    return pytest.param(Call(function, what, statement, code), id=f"{function}-{what}")


def fine(function: str, what: str, statement: str, result: Any) -> Any:
    return pytest.param(Call(function, what, statement, None, result), id=f"{function}-{what}")


# Placeholders: <pending>, <processing>, <succeeded>, <failed>, <dead>, <unknown> become the uuid
# of the world's job in that state (or of no job); <tok:processing>, <tok:succeeded>, <tok:failed>,
# <tok:dead> the lease token its claim returned; <made-up> a token no claim returned.
BAD_CALLS = [
    bad("next_run_at", "null-limit", "select * from next_run_at(p_limit => null)", "QV400"),
    bad("wait_for_jobs", "null-worker", "select wait_for_jobs(null)", "QV400"),
    bad("wait_for_jobs", "empty-queues", "select wait_for_jobs('w', '{}'::text[])", "QV400"),
    bad("wait_for_jobs", "null-queue", "select wait_for_jobs('w', array[null]::text[])", "QV400"),
    bad("wait_for_jobs", "blank-worker", "select wait_for_jobs(' ')", "QV400"),
    bad("wait_for_jobs", "blank-queue", "select wait_for_jobs('w', array[''])", "QV400"),
    bad("wait_for_jobs", "min-int-for", "select wait_for_jobs('w', null, -2147483648)", "QV400"),
    bad("wait_for_jobs", "max-int-for", "select wait_for_jobs('w', null, 2147483647)", "QV400"),
    bad("waits_settled", "null-xid", "select waits_settled(null)", "QV400"),
    bad("next_run_at", "zero-limit", "select * from next_run_at(p_limit => 0)", "QV400"),
    bad("next_run_at", "limit-1001", "select * from next_run_at(p_limit => 1001)", "QV400"),
    bad("next_run_at", "min-int-limit", "select * from next_run_at(p_limit => -2147483648)", "QV400"),
    bad("next_run_at", "empty-queues", "select * from next_run_at('{}'::text[])", "QV400"),
    bad("next_run_at", "empty-task-types", "select * from next_run_at(p_task_types => '{}'::text[])", "QV400"),
    # backoff_delay(attempt, base_ms, max_jitter_ms, max_delay_ms, jitter)
    bad("backoff_delay", "null-attempt", "select backoff_delay(null)", "QV400"),
    bad("backoff_delay", "zero-attempt", "select backoff_delay(0)", "QV400"),
    bad("backoff_delay", "min-int-attempt", "select backoff_delay(-2147483648)", "QV400"),
    bad("backoff_delay", "negative-base", "select backoff_delay(1, -1)", "QV400"),
    bad("backoff_delay", "min-int-base", "select backoff_delay(1, -2147483648, 0, 0)", "QV400"),
    bad("backoff_delay", "negative-jitter", "select backoff_delay(1, null, -1)", "QV400"),
    bad("backoff_delay", "negative-max-delay", "select backoff_delay(1, null, null, -1)", "QV400"),
    bad("backoff_delay", "null-jitter", "select backoff_delay(1, p_jitter => null)", "QV400"),
    bad("backoff_delay", "jitter-below-0", "select backoff_delay(1, p_jitter => -0.001)", "QV400"),
    bad("backoff_delay", "jitter-above-1", "select backoff_delay(1, p_jitter => 1.001)", "QV400"),
    bad("backoff_delay", "jitter-nan", "select backoff_delay(1, p_jitter => 'NaN')", "QV400"),
    bad("backoff_delay", "jitter-infinity", "select backoff_delay(1, p_jitter => 'Infinity')", "QV400"),
    bad("backoff_delay", "jitter-minus-infinity", "select backoff_delay(1, p_jitter => '-Infinity')", "QV400"),
    # claim_job(worker_id, queues, lease_ms, task_types)
    bad("claim_job", "null-worker", "select * from claim_job(null)", "QV400"),
    bad("claim_job", "empty-worker", "select * from claim_job('')", "QV400"),
    bad("claim_job", "spaces-worker", "select * from claim_job('   ')", "QV400"),
    bad("claim_job", "whitespace-worker", f"select * from claim_job({BLANK})", "QV400"),
    bad("claim_job", "long-worker", "select * from claim_job(repeat('w', 201))", "QV400"),
    bad("claim_job", "nul-worker", f"select * from claim_job('w' || {NUL})", "54000"),
    bad("claim_job", "empty-queues", "select * from claim_job('w9', '{}'::text[])", "QV400"),
    bad("claim_job", "empty-task-types", "select * from claim_job('w9', p_task_types => '{}'::text[])", "QV400"),
    bad("claim_job", "zero-lease", "select * from claim_job('w9', null, 0)", "QV400"),
    bad("claim_job", "min-int-lease", "select * from claim_job('w9', null, -2147483648)", "QV400"),
    # ... a role's claim takes no time (the server's clock): the old forms with one match no function
    bad("claim_job", "old-form-with-now", "select * from claim_job('w9', p_now => now())", "42883"),
    bad("claim_job", "old-form-positional-now",
        "select * from claim_job('w9'::text, null::text[], null::integer, now(), null::text[])", "42883"),
    # claim_jobs(worker_id, limit, queues, lease_ms, task_types)
    bad("claim_jobs", "null-worker", "select * from claim_jobs(null, 1)", "QV400"),
    bad("claim_jobs", "empty-worker", "select * from claim_jobs('', 1)", "QV400"),
    bad("claim_jobs", "whitespace-worker", f"select * from claim_jobs({BLANK}, 1)", "QV400"),
    bad("claim_jobs", "long-worker", "select * from claim_jobs(repeat('é', 201), 1)", "QV400"),
    bad("claim_jobs", "null-limit", "select * from claim_jobs('w9', null)", "QV400"),
    bad("claim_jobs", "zero-limit", "select * from claim_jobs('w9', 0)", "QV400"),
    bad("claim_jobs", "negative-limit", "select * from claim_jobs('w9', -1)", "QV400"),
    bad("claim_jobs", "limit-1001", "select * from claim_jobs('w9', 1001)", "QV400"),
    bad("claim_jobs", "max-int-limit", "select * from claim_jobs('w9', 2147483647)", "QV400"),
    bad("claim_jobs", "min-int-limit", "select * from claim_jobs('w9', -2147483648)", "QV400"),
    bad("claim_jobs", "empty-queues", "select * from claim_jobs('w9', 1, '{}'::text[])", "QV400"),
    bad("claim_jobs", "empty-task-types", "select * from claim_jobs('w9', 1, p_task_types => '{}'::text[])",
        "QV400"),
    bad("claim_jobs", "negative-lease", "select * from claim_jobs('w9', 1, null, -1)", "QV400"),
    bad("claim_jobs", "lease-over-a-day", f"select * from claim_jobs('w9', 1, null, {DAY_MS + 1})", "QV400"),
    bad("claim_jobs", "old-form-with-now", "select * from claim_jobs('w9', 1, p_now => now())", "42883"),
    bad("claim_jobs", "old-form-positional-now",
        "select * from claim_jobs('w9'::text, 5, null::text[], null::integer, 'infinity'::timestamptz)", "42883"),
    # claim_jobs_at(now, worker_id, limit, queues, lease_ms, task_types): the owner's clock
    bad("claim_jobs_at", "null-now", "select * from claim_jobs_at(null, 'w9', 1)", "QV400"),
    bad("claim_jobs_at", "infinite-now", "select * from claim_jobs_at('infinity', 'w9', 5)", "QV400"),
    bad("claim_jobs_at", "now-minus-infinity", "select * from claim_jobs_at('-infinity', 'w9', 1)", "QV400"),
    bad("claim_jobs_at", "now-at-end-of-time",
        "select * from claim_jobs_at('294276-12-31 00:00:00+00', 'w9', 1, p_lease_ms => 86400000)", "QV400"),
    bad("claim_jobs_at", "null-worker", "select * from claim_jobs_at(now(), null, 1)", "QV400"),
    bad("claim_jobs_at", "whitespace-worker", f"select * from claim_jobs_at(now(), {BLANK}, 1)", "QV400"),
    bad("claim_jobs_at", "null-limit", "select * from claim_jobs_at(now(), 'w9', null)", "QV400"),
    bad("claim_jobs_at", "limit-1001", "select * from claim_jobs_at(now(), 'w9', 1001)", "QV400"),
    bad("claim_jobs_at", "empty-queues", "select * from claim_jobs_at(now(), 'w9', 1, '{}'::text[])", "QV400"),
    bad("claim_jobs_at", "zero-lease", "select * from claim_jobs_at(now(), 'w9', 1, null, 0)", "QV400"),
    bad("claim_jobs_at", "empty-task-types", "select * from claim_jobs_at(now(), 'w9', 1, null, null, '{}')",
        "QV400"),
    # enqueue_job(type, payload, idempotency_key, queue, priority, run_at, max_attempts)
    bad("enqueue_job", "null-type", "select enqueue_job(null, '{}', 'h1')", "QV400"),
    bad("enqueue_job", "empty-type", "select enqueue_job('', '{}', 'h1')", "QV400"),
    bad("enqueue_job", "spaces-type", "select enqueue_job('   ', '{}', 'h1')", "QV400"),
    bad("enqueue_job", "whitespace-type", f"select enqueue_job({BLANK}, '{{}}', 'h1')", "QV400"),
    bad("enqueue_job", "long-type", "select enqueue_job(repeat('t', 101), '{}', 'h1')", "QV400"),
    bad("enqueue_job", "long-multibyte-type", "select enqueue_job(repeat('€', 101), '{}', 'h1')", "QV400"),
    bad("enqueue_job", "nul-type", f"select enqueue_job('t' || {NUL}, '{{}}', 'h1')", "54000"),
    bad("enqueue_job", "injection-type-null-payload", f"select enqueue_job($${INJECTION}$$, null, 'h1')", "QV400"),
    bad("enqueue_job", "null-payload", "select enqueue_job('t', null, 'h1')", "QV400"),
    bad("enqueue_job", "json-null-payload", "select enqueue_job('t', 'null'::jsonb, 'h1')", "QV400"),
    bad("enqueue_job", "array-payload", "select enqueue_job('t', '[{\"a\": 1}]', 'h1')", "QV400"),
    bad("enqueue_job", "string-payload", "select enqueue_job('t', '\"{}\"', 'h1')", "QV400"),
    bad("enqueue_job", "number-payload", "select enqueue_job('t', '1e400', 'h1')", "QV400"),
    bad("enqueue_job", "boolean-payload", "select enqueue_job('t', 'true', 'h1')", "QV400"),
    bad("enqueue_job", "large-payload",
        "select enqueue_job('t', jsonb_build_object('x', repeat('a', 70000)), 'h1')", "QV413"),
    bad("enqueue_job", "large-multibyte-payload",
        "select enqueue_job('t', jsonb_build_object('x', repeat('€', 22000)), 'h1')", "QV413"),
    bad("enqueue_job", "nul-in-json", "select enqueue_job('t', '{\"a\": \"\\u0000\"}', 'h1')", "22P05"),
    bad("enqueue_job", "null-key", "select enqueue_job('t', '{}', null)", "QV400"),
    bad("enqueue_job", "empty-key", "select enqueue_job('t', '{}', '')", "QV400"),
    bad("enqueue_job", "spaces-key", "select enqueue_job('t', '{}', '  ')", "QV400"),
    bad("enqueue_job", "whitespace-key", f"select enqueue_job('t', '{{}}', {BLANK})", "QV400"),
    bad("enqueue_job", "long-key", "select enqueue_job('t', '{}', repeat('k', 256))", "QV400"),
    bad("enqueue_job", "key-with-space", "select enqueue_job('t', '{}', 'my key')", "QV400"),
    bad("enqueue_job", "non-ascii-key", "select enqueue_job('t', '{}', 'ключ-📄')", "QV400"),
    bad("enqueue_job", "control-character-key", "select enqueue_job('t', '{}', 'k' || chr(27) || '[2J')", "QV400"),
    bad("enqueue_job", "injection-key-with-spaces", f"select enqueue_job('t', '{{}}', $${INJECTION}$$)", "QV400"),
    bad("enqueue_job", "nul-key", f"select enqueue_job('t', '{{}}', 'k' || {NUL})", "54000"),
    bad("enqueue_job", "empty-queue", "select enqueue_job('t', '{}', 'h1', '')", "QV400"),
    bad("enqueue_job", "whitespace-queue", f"select enqueue_job('t', '{{}}', 'h1', {BLANK})", "QV400"),
    bad("enqueue_job", "long-queue", "select enqueue_job('t', '{}', 'h1', repeat('q', 101))", "QV400"),
    bad("enqueue_job", "zero-max-attempts", "select enqueue_job('t', '{}', 'h1', p_max_attempts => 0)", "QV400"),
    bad("enqueue_job", "max-attempts-1001", "select enqueue_job('t', '{}', 'h1', p_max_attempts => 1001)", "QV400"),
    bad("enqueue_job", "max-int-max-attempts",
        "select enqueue_job('t', '{}', 'h1', p_max_attempts => 2147483647)", "QV400"),
    bad("enqueue_job", "min-int-max-attempts",
        "select enqueue_job('t', '{}', 'h1', p_max_attempts => -2147483648)", "QV400"),
    bad("enqueue_job", "key-reused-other-payload",
        "select enqueue_job('listing_flyer', '{\"n\": \"other\"}', 'world-pending', 'world')", "QI409"),
    bad("enqueue_job", "key-reused-other-type",
        "select enqueue_job('email', '{\"n\": \"pending\"}', 'world-pending', 'world')", "QI409"),
    bad("enqueue_job", "key-reused-other-queue",
        "select enqueue_job('listing_flyer', '{\"n\": \"pending\"}', 'world-pending', 'default')", "QI409"),
    bad("enqueue_job", "key-reused-other-priority",
        "select enqueue_job('listing_flyer', '{\"n\": \"pending\"}', 'world-pending', 'world', 1)", "QI409"),
    bad("enqueue_job", "expires-at-past", "select enqueue_job('t', '{}', 'h1', p_expires_at => now() - interval '1 s')",
        "QV400"),
    bad("enqueue_job", "expires-at-before-run-at", "select enqueue_job('t', '{}', 'h1', "
        "p_run_at => now() + interval '1 hour', p_expires_at => now() + interval '1 minute')", "QV400"),
    bad("enqueue_job", "infinite-expires-at", "select enqueue_job('t', '{}', 'h1', p_expires_at => 'infinity')", "QV400"),
    bad("enqueue_job", "both-expiries", "select enqueue_job('t', '{}', 'h1', "
        "p_expires_at => now() + interval '1 hour', p_expire_after_ms => 1000)", "QV400"),
    bad("enqueue_job", "zero-expire-after", "select enqueue_job('t', '{}', 'h1', p_expire_after_ms => 0)", "QV400"),
    bad("enqueue_job", "min-int-expire-after",
        "select enqueue_job('t', '{}', 'h1', p_expire_after_ms => -2147483648)", "QV400"),
    # enqueue_jobs(jobs)
    bad("enqueue_jobs", "null", "select * from enqueue_jobs(null)", "QV400"),
    bad("enqueue_jobs", "json-null", "select * from enqueue_jobs('null')", "QV400"),
    bad("enqueue_jobs", "object", "select * from enqueue_jobs('{}')", "QV400"),
    bad("enqueue_jobs", "string", "select * from enqueue_jobs('\"[]\"')", "QV400"),
    bad("enqueue_jobs", "array-of-number", "select * from enqueue_jobs('[1]')", "QV400"),
    bad("enqueue_jobs", "array-of-null", "select * from enqueue_jobs('[null]')", "QV400"),
    bad("enqueue_jobs", "array-of-array", "select * from enqueue_jobs('[[]]')", "QV400"),
    bad("enqueue_jobs", "no-type", "select * from enqueue_jobs('[{\"payload\": {}, \"idempotency_key\": \"h1\"}]')",
        "QV400"),
    bad("enqueue_jobs", "no-payload", "select * from enqueue_jobs('[{\"type\": \"t\", \"idempotency_key\": \"h1\"}]')",
        "QV400"),
    bad("enqueue_jobs", "no-key", "select * from enqueue_jobs('[{\"type\": \"t\", \"payload\": {}}]')", "QV400"),
    bad("enqueue_jobs", "whitespace-type",
        "select * from enqueue_jobs('[{\"type\": \" \\t\\n\", \"payload\": {}, \"idempotency_key\": \"h1\"}]')",
        "QV400"),
    bad("enqueue_jobs", "long-key", "select * from enqueue_jobs(jsonb_build_array(jsonb_build_object("
        "'type', 't', 'payload', '{}'::jsonb, 'idempotency_key', repeat('k', 256))))", "QV400"),
    bad("enqueue_jobs", "non-ascii-key",
        "select * from enqueue_jobs('[{\"type\": \"t\", \"payload\": {}, \"idempotency_key\": \"ключ\"}]')",
        "QV400"),
    bad("enqueue_jobs", "whitespace-queue", "select * from enqueue_jobs("
        "'[{\"type\": \"t\", \"payload\": {}, \"idempotency_key\": \"h1\", \"queue\": \"\\t\\n\"}]')",
        "QV400"),
    bad("enqueue_jobs", "past-expires-at", "select * from enqueue_jobs(jsonb_build_array(jsonb_build_object("
        "'type', 't', 'payload', '{}'::jsonb, 'idempotency_key', 'h1', 'expires_at', '2001-01-01T00:00:00Z')))", "QV400"),
    bad("enqueue_jobs", "both-expiries", "select * from enqueue_jobs(jsonb_build_array(jsonb_build_object("
        "'type', 't', 'payload', '{}'::jsonb, 'idempotency_key', 'h1', 'expires_at', (now() + interval '1 hour')::text, "
        "'expire_after_ms', 1000)))", "QV400"),
    bad("enqueue_jobs", "zero-expire-after", "select * from enqueue_jobs(jsonb_build_array(jsonb_build_object("
        "'type', 't', 'payload', '{}'::jsonb, 'idempotency_key', 'h1', 'expire_after_ms', 0)))", "QV400"),
    bad("enqueue_jobs", "number-expires-at", "select * from enqueue_jobs(jsonb_build_array(jsonb_build_object("
        "'type', 't', 'payload', '{}'::jsonb, 'idempotency_key', 'h1', 'expires_at', 5)))", "QV400"),
    bad("enqueue_jobs", "array-payload",
        "select * from enqueue_jobs('[{\"type\": \"t\", \"payload\": [], \"idempotency_key\": \"h1\"}]')", "QV400"),
    bad("enqueue_jobs", "empty-queue", "select * from enqueue_jobs("
        "'[{\"type\": \"t\", \"payload\": {}, \"idempotency_key\": \"h1\", \"queue\": \"\"}]')", "QV400"),
    bad("enqueue_jobs", "text-priority", "select * from enqueue_jobs("
        "'[{\"type\": \"t\", \"payload\": {}, \"idempotency_key\": \"h1\", \"priority\": \"high\"}]')", "QV400"),
    bad("enqueue_jobs", "fractional-priority", "select * from enqueue_jobs("
        "'[{\"type\": \"t\", \"payload\": {}, \"idempotency_key\": \"h1\", \"priority\": 1.5}]')", "QV400"),
    bad("enqueue_jobs", "huge-priority", "select * from enqueue_jobs("
        "'[{\"type\": \"t\", \"payload\": {}, \"idempotency_key\": \"h1\", \"priority\": 99999999999}]')", "QV400"),
    bad("enqueue_jobs", "bad-run-at", "select * from enqueue_jobs("
        "'[{\"type\": \"t\", \"payload\": {}, \"idempotency_key\": \"h1\", \"run_at\": \"soon\"}]')", "QV400"),
    bad("enqueue_jobs", "text-delay", "select * from enqueue_jobs("
        "'[{\"type\": \"t\", \"payload\": {}, \"idempotency_key\": \"h1\", \"delay_ms\": \"soon\"}]')", "QV400"),
    bad("enqueue_jobs", "negative-delay", "select * from enqueue_jobs("
        "'[{\"type\": \"t\", \"payload\": {}, \"idempotency_key\": \"h1\", \"delay_ms\": -1}]')", "QV400"),
    bad("enqueue_jobs", "fractional-delay", "select * from enqueue_jobs("
        "'[{\"type\": \"t\", \"payload\": {}, \"idempotency_key\": \"h1\", \"delay_ms\": 0.5}]')", "QV400"),
    bad("enqueue_jobs", "huge-delay", "select * from enqueue_jobs("
        "'[{\"type\": \"t\", \"payload\": {}, \"idempotency_key\": \"h1\", \"delay_ms\": 1e300}]')", "QV400"),
    bad("enqueue_jobs", "delay-past-end-of-time", "select * from enqueue_jobs("
        "'[{\"type\": \"t\", \"payload\": {}, \"idempotency_key\": \"h1\", \"delay_ms\": 9e18}]')", "QV400"),
    bad("enqueue_jobs", "run-at-and-delay", "select * from enqueue_jobs('[{\"type\": \"t\", \"payload\": {}, "
        "\"idempotency_key\": \"h1\", \"run_at\": \"2030-01-01T00:00:00Z\", \"delay_ms\": 1000}]')", "QV400"),
    bad("enqueue_jobs", "zero-max-attempts", "select * from enqueue_jobs("
        "'[{\"type\": \"t\", \"payload\": {}, \"idempotency_key\": \"h1\", \"max_attempts\": 0}]')", "QV400"),
    bad("enqueue_jobs", "text-max-attempts", "select * from enqueue_jobs("
        "'[{\"type\": \"t\", \"payload\": {}, \"idempotency_key\": \"h1\", \"max_attempts\": \"5\\u00bd\"}]')",
        "QV400"),
    bad("enqueue_jobs", "key-twice", "select * from enqueue_jobs('[{\"type\": \"t\", \"payload\": {}, "
        "\"idempotency_key\": \"h1\"}, {\"type\": \"t\", \"payload\": {}, \"idempotency_key\": \"h1\"}]')", "QV400"),
    bad("enqueue_jobs", "good-then-bad", "select * from enqueue_jobs('[{\"type\": \"t\", \"payload\": {}, "
        "\"idempotency_key\": \"h1\"}, {\"type\": \"t\", \"payload\": 7, \"idempotency_key\": \"h2\"}]')", "QV400"),
    bad("enqueue_jobs", "good-then-large", "select * from enqueue_jobs(jsonb_build_array("
        "jsonb_build_object('type', 't', 'payload', '{}'::jsonb, 'idempotency_key', 'h1'),"
        "jsonb_build_object('type', 't', 'payload', jsonb_build_object('x', repeat('a', 70000)),"
        " 'idempotency_key', 'h2')))", "QV413"),
    bad("enqueue_jobs", "good-then-key-reused", "select * from enqueue_jobs('[{\"type\": \"t\", \"payload\": {}, "
        "\"idempotency_key\": \"h1\"}, {\"type\": \"listing_flyer\", \"payload\": {\"n\": \"other\"}, "
        "\"idempotency_key\": \"world-pending\", \"queue\": \"world\"}]')", "QI409"),
    bad("enqueue_jobs", "nul-in-json", "select * from enqueue_jobs('[{\"type\": \"t\", \"payload\": "
        "{\"a\": \"\\u0000\"}, \"idempotency_key\": \"h1\"}]')", "22P05"),
    bad("enqueue_jobs", "10001-jobs", "select * from enqueue_jobs((select jsonb_agg(jsonb_build_object("
        "'type', 't', 'payload', '{}'::jsonb, 'idempotency_key', 'b' || i)) from generate_series(1, 10001) i))",
        "QV400"),
    # heartbeat(job_ids, lease_tokens, lease_ms): one token per job id
    bad("heartbeat", "null-ids", "select * from heartbeat(null, array[<tok:processing>])", "QV400"),
    bad("heartbeat", "null-tokens", "select * from heartbeat(array[<processing>], null)", "QV400"),
    bad("heartbeat", "nulls", "select * from heartbeat(null, null)", "QV400"),
    bad("heartbeat", "more-ids-than-tokens",
        "select * from heartbeat(array[<processing>, <pending>], array[<tok:processing>])", "QV400"),
    bad("heartbeat", "more-tokens-than-ids",
        "select * from heartbeat(array[<processing>], array[<tok:processing>, <tok:processing>])", "QV400"),
    bad("heartbeat", "ids-without-tokens", "select * from heartbeat(array[<processing>], '{}')", "QV400"),
    bad("heartbeat", "tokens-without-ids", "select * from heartbeat('{}', array[<tok:processing>])", "QV400"),
    bad("heartbeat", "zero-lease", "select * from heartbeat(array[<processing>], array[<tok:processing>], 0)",
        "QV400"),
    bad("heartbeat", "lease-over-a-day",
        f"select * from heartbeat(array[<processing>], array[<tok:processing>], {DAY_MS + 1})", "QV400"),
    bad("heartbeat", "max-int-lease",
        "select * from heartbeat(array[<processing>], array[<tok:processing>], 2147483647)", "QV400"),
    bad("heartbeat", "min-int-lease",
        "select * from heartbeat(array[<processing>], array[<tok:processing>], -2147483648)", "QV400"),
    bad("heartbeat", "id-not-uuid", "select * from heartbeat(array['not-a-uuid']::uuid[], array[<tok:processing>])",
        "22P02"),
    bad("heartbeat", "token-not-uuid", "select * from heartbeat(array[<processing>], array['w1']::uuid[])", "22P02"),
    bad("heartbeat", "old-form", "select * from heartbeat('w1'::text, array[<processing>])", "42883"),
    bad("heartbeat", "old-form-with-lease", "select * from heartbeat('w1'::text, array[<processing>], 60000)",
        "42883"),
    # mark_succeeded(job_id, lease_token, result_type, result_value, result_data)
    bad("mark_succeeded", "null-job", "select * from mark_succeeded(null, <tok:processing>)", "QV400"),
    bad("mark_succeeded", "null-token", "select * from mark_succeeded(<processing>, null)", "QV400"),
    bad("mark_succeeded", "nulls", "select * from mark_succeeded(null, null)", "QV400"),
    bad("mark_succeeded", "unknown-job", "select * from mark_succeeded(<unknown>, <made-up>)", "QN404"),
    bad("mark_succeeded", "unknown-job-real-token", "select * from mark_succeeded(<unknown>, <tok:processing>)",
        "QN404"),
    bad("mark_succeeded", "id-not-uuid", "select * from mark_succeeded('not-a-uuid', <tok:processing>)", "22P02"),
    bad("mark_succeeded", "token-not-uuid", "select * from mark_succeeded(<processing>, 'w1')", "22P02"),
    bad("mark_succeeded", "token-injection", f"select * from mark_succeeded(<processing>, $${INJECTION}$$)", "22P02"),
    bad("mark_succeeded", "made-up-token", "select * from mark_succeeded(<processing>, <made-up>)", "QL409"),
    bad("mark_succeeded", "nil-token",
        "select * from mark_succeeded(<processing>, '00000000-0000-0000-0000-000000000000')", "QL409"),
    bad("mark_succeeded", "other-jobs-token", "select * from mark_succeeded(<processing>, <tok:failed>)", "QL409"),
    bad("mark_succeeded", "succeeded-jobs-token", "select * from mark_succeeded(<processing>, <tok:succeeded>)",
        "QL409"),
    bad("mark_succeeded", "pending-job", "select * from mark_succeeded(<pending>, <tok:processing>)", "QL409"),
    bad("mark_succeeded", "succeeded-job-other-token", "select * from mark_succeeded(<succeeded>, <tok:processing>)",
        "QL409"),
    bad("mark_succeeded", "failed-job-own-token", "select * from mark_succeeded(<failed>, <tok:failed>)", "QL409"),
    bad("mark_succeeded", "dead-job-own-token", "select * from mark_succeeded(<dead>, <tok:dead>)", "QL409"),
    bad("mark_succeeded", "old-form", "select * from mark_succeeded(<processing>, 'w1'::text, 1)", "42883"),
    bad("mark_succeeded", "old-form-with-result",
        "select * from mark_succeeded(<processing>, 'w1'::text, 1, 'application/json', '1'::jsonb)", "42883"),
    # ... with its result (result_type, result_value, result_data): checked before the job is looked at
    bad("mark_succeeded", "type-without-result",
        "select * from mark_succeeded(<processing>, <tok:processing>, 'application/json')", "QV400"),
    bad("mark_succeeded", "value-without-type",
        "select * from mark_succeeded(<processing>, <tok:processing>, null, '{\"a\": 1}')", "QV400"),
    bad("mark_succeeded", "data-without-type",
        "select * from mark_succeeded(<processing>, <tok:processing>, null, null, '%PDF-1.4')", "QV400"),
    bad("mark_succeeded", "value-and-data",
        "select * from mark_succeeded(<processing>, <tok:processing>, 'application/json', '1', '%PDF-1.4')", "QV400"),
    bad("mark_succeeded", "json-as-text-plain",
        "select * from mark_succeeded(<processing>, <tok:processing>, 'text/plain', '\"hi\"')", "QV400"),
    bad("mark_succeeded", "type-without-slash",
        "select * from mark_succeeded(<processing>, <tok:processing>, 'pdf', null, '%PDF-1.4')", "QV400"),
    bad("mark_succeeded", "type-with-space",
        "select * from mark_succeeded(<processing>, <tok:processing>, 'application/ pdf', null, '%PDF-1.4')", "QV400"),
    bad("mark_succeeded", "empty-type",
        "select * from mark_succeeded(<processing>, <tok:processing>, '', null, '%PDF-1.4')", "QV400"),
    bad("mark_succeeded", "long-type",
        "select * from mark_succeeded(<processing>, <tok:processing>, 'a/' || repeat('b', 199), null, 'x')", "QV400"),
    bad("mark_succeeded", "non-ascii-type",
        "select * from mark_succeeded(<processing>, <tok:processing>, 'application/pdé', null, 'x')", "QV400"),
    bad("mark_succeeded", "injection-type",
        f"select * from mark_succeeded(<processing>, <tok:processing>, $${INJECTION}$$, null, 'x')", "QV400"),
    bad("mark_succeeded", "nul-type",
        f"select * from mark_succeeded(<processing>, <tok:processing>, 'a/b' || {NUL}, null, 'x')", "54000"),
    bad("mark_succeeded", "result-made-up-token",
        "select * from mark_succeeded(<processing>, <made-up>, 'application/json', '1')", "QL409"),
    bad("mark_succeeded", "result-other-jobs-token",
        "select * from mark_succeeded(<processing>, <tok:dead>, 'application/json', '1')", "QL409"),
    bad("mark_succeeded", "result-pending-job",
        "select * from mark_succeeded(<pending>, <made-up>, 'application/pdf', null, '%PDF-1.4')", "QL409"),
    bad("mark_succeeded", "result-dead-job",
        "select * from mark_succeeded(<dead>, <tok:dead>, 'application/json', '1')", "QL409"),
    bad("mark_succeeded", "result-unknown-job",
        "select * from mark_succeeded(<unknown>, <tok:processing>, 'application/json', '1')", "QN404"),
    # mark_failed(job_id, lease_token, error, retryable, base_ms, max_jitter_ms, max_delay_ms)
    bad("mark_failed", "null-job", "select * from mark_failed(null, <tok:processing>, 'boom')", "QV400"),
    bad("mark_failed", "null-token", "select * from mark_failed(<processing>, null, 'boom')", "QV400"),
    bad("mark_failed", "null-retryable", "select * from mark_failed(<processing>, <tok:processing>, 'boom', null)",
        "QV400"),
    bad("mark_failed", "null-error", "select * from mark_failed(<processing>, <tok:processing>, null)", "QV400"),
    bad("mark_failed", "empty-error", "select * from mark_failed(<processing>, <tok:processing>, '')", "QV400"),
    bad("mark_failed", "spaces-error", "select * from mark_failed(<processing>, <tok:processing>, '    ')", "QV400"),
    bad("mark_failed", "whitespace-error", f"select * from mark_failed(<processing>, <tok:processing>, {BLANK})",
        "QV400"),
    bad("mark_failed", "nul-error", f"select * from mark_failed(<processing>, <tok:processing>, 'a' || {NUL})",
        "54000"),
    bad("mark_failed", "negative-base",
        "select * from mark_failed(<processing>, <tok:processing>, 'boom', true, -1)", "QV400"),
    bad("mark_failed", "negative-jitter",
        "select * from mark_failed(<processing>, <tok:processing>, 'boom', true, null, -1)", "QV400"),
    bad("mark_failed", "min-int-max-delay",
        "select * from mark_failed(<processing>, <tok:processing>, 'boom', true, null, null, -2147483648)", "QV400"),
    bad("mark_failed", "unknown-job", "select * from mark_failed(<unknown>, <made-up>, 'boom')", "QN404"),
    bad("mark_failed", "id-not-uuid", "select * from mark_failed('x', <tok:processing>, 'boom')", "22P02"),
    bad("mark_failed", "token-not-uuid", "select * from mark_failed(<processing>, 'w1', 'boom')", "22P02"),
    bad("mark_failed", "pending-job", "select * from mark_failed(<pending>, <made-up>, 'boom')", "QL409"),
    bad("mark_failed", "succeeded-job-own-token", "select * from mark_failed(<succeeded>, <tok:succeeded>, 'boom')",
        "QL409"),
    bad("mark_failed", "failed-job-own-token-other-error",
        "select * from mark_failed(<failed>, <tok:failed>, 'boom')", "QL409"),
    bad("mark_failed", "dead-job-own-token-other-error",
        "select * from mark_failed(<dead>, <tok:dead>, 'boom', false)", "QL409"),
    # Forcing another's job dead needs its token: a made-up one, or another job's, is refused.
    bad("mark_failed", "made-up-token-not-retryable",
        "select * from mark_failed(<processing>, <made-up>, 'boom', false)", "QL409"),
    bad("mark_failed", "other-jobs-token-not-retryable",
        "select * from mark_failed(<processing>, <tok:failed>, 'printer jammed', false)", "QL409"),
    bad("mark_failed", "old-form", "select * from mark_failed(<processing>, 'w1'::text, 1, 'boom')", "42883"),
    # mark_jobs_succeeded(job_ids, lease_tokens, results): one token per job id
    bad("mark_jobs_succeeded", "null-ids", "select * from mark_jobs_succeeded(null, array[<tok:processing>])",
        "QV400"),
    bad("mark_jobs_succeeded", "null-tokens", "select * from mark_jobs_succeeded(array[<processing>], null)",
        "QV400"),
    bad("mark_jobs_succeeded", "more-ids-than-tokens",
        "select * from mark_jobs_succeeded(array[<processing>, <pending>], array[<tok:processing>])", "QV400"),
    bad("mark_jobs_succeeded", "more-tokens-than-ids",
        "select * from mark_jobs_succeeded(array[<processing>], array[<tok:processing>, <made-up>])", "QV400"),
    bad("mark_jobs_succeeded", "ids-without-tokens", "select * from mark_jobs_succeeded(array[<processing>], '{}')",
        "QV400"),
    bad("mark_jobs_succeeded", "token-not-uuid",
        "select * from mark_jobs_succeeded(array[<processing>], '{w1}')", "22P02"),
    bad("mark_jobs_succeeded", "results-object",
        "select * from mark_jobs_succeeded(array[<processing>], array[<tok:processing>], '{\"a\": 1}')", "QV400"),
    bad("mark_jobs_succeeded", "results-string",
        "select * from mark_jobs_succeeded(array[<processing>], array[<tok:processing>], '\"[1]\"')", "QV400"),
    bad("mark_jobs_succeeded", "results-json-null",
        "select * from mark_jobs_succeeded(array[<processing>], array[<tok:processing>], 'null')", "QV400"),
    bad("mark_jobs_succeeded", "more-results-than-ids",
        "select * from mark_jobs_succeeded(array[<processing>], array[<tok:processing>], '[1, 2]')", "QV400"),
    bad("mark_jobs_succeeded", "nul-in-results",
        "select * from mark_jobs_succeeded(array[<processing>], array[<tok:processing>], '[\"\\u0000\"]')", "22P05"),
    bad("mark_jobs_succeeded", "old-form",
        "select * from mark_jobs_succeeded('w1'::text, array[<processing>], '{1}'::integer[])", "42883"),
    # release_job(job_id, lease_token, reason)
    bad("release_job", "null-job", "select * from release_job(null, <tok:processing>)", "QV400"),
    bad("release_job", "null-token", "select * from release_job(<processing>, null)", "QV400"),
    bad("release_job", "unknown-job", "select * from release_job(<unknown>, <tok:processing>)", "QN404"),
    bad("release_job", "id-not-uuid", "select * from release_job('x', <tok:processing>)", "22P02"),
    bad("release_job", "token-not-uuid", "select * from release_job(<processing>, '1')", "22P02"),
    bad("release_job", "made-up-token", "select * from release_job(<processing>, <made-up>)", "QL409"),
    bad("release_job", "other-jobs-token", "select * from release_job(<processing>, <tok:dead>)", "QL409"),
    bad("release_job", "pending-job", "select * from release_job(<pending>, <made-up>)", "QL409"),
    bad("release_job", "succeeded-job-own-token", "select * from release_job(<succeeded>, <tok:succeeded>)", "QL409"),
    bad("release_job", "dead-job-own-token", "select * from release_job(<dead>, <tok:dead>)", "QL409"),
    bad("release_job", "nul-reason", f"select * from release_job(<processing>, <tok:processing>, 'bye' || {NUL})",
        "54000"),
    bad("release_job", "old-form", "select * from release_job(<processing>, 'w1'::text, 1)", "42883"),
    # retry_dead(job_id, extra_attempts)
    bad("retry_dead", "null-job", "select * from retry_dead(null)", "QV400"),
    bad("retry_dead", "zero-extra", "select * from retry_dead(<dead>, 0)", "QV400"),
    bad("retry_dead", "negative-extra", "select * from retry_dead(<dead>, -1)", "QV400"),
    bad("retry_dead", "extra-1001", "select * from retry_dead(<dead>, 1001)", "QV400"),
    bad("retry_dead", "min-int-extra", "select * from retry_dead(<dead>, -2147483648)", "QV400"),
    bad("retry_dead", "max-int-extra", "select * from retry_dead(<dead>, 2147483647)", "QV400"),
    bad("retry_dead", "unknown-job", "select * from retry_dead(<unknown>)", "QN404"),
    bad("retry_dead", "id-not-uuid", "select * from retry_dead('not-a-uuid')", "22P02"),
    bad("retry_dead", "pending-job", "select * from retry_dead(<pending>)", "QS409"),
    bad("retry_dead", "processing-job", "select * from retry_dead(<processing>)", "QS409"),
    bad("retry_dead", "succeeded-job", "select * from retry_dead(<succeeded>)", "QS409"),
    bad("retry_dead", "failed-job", "select * from retry_dead(<failed>)", "QS409"),
    # cancel_job(job_id): only a job not yet finished
    bad("cancel_job", "null-job", "select * from cancel_job(null)", "QV400"),
    bad("cancel_job", "unknown-job", "select * from cancel_job(<unknown>)", "QN404"),
    bad("cancel_job", "id-not-uuid", "select * from cancel_job('not-a-uuid')", "22P02"),
    bad("cancel_job", "succeeded-job", "select * from cancel_job(<succeeded>)", "QS409"),
    # Dependencies, batches, workflows, limits per key and bulk actions.
    bad("enqueue_job", "unknown-parent",
        "select enqueue_job('listing_flyer', '{}', 'k-dep', p_depends_on => array[<unknown>]::uuid[])", "QW422"),
    bad("enqueue_job", "null-parent",
        "select enqueue_job('listing_flyer', '{}', 'k-dep', p_depends_on => array[null]::uuid[])", "QV400"),
    bad("enqueue_job", "empty-serial-key", "select enqueue_job('listing_flyer', '{}', 'k-dep', p_serial_key => '')",
        "QV400"),
    bad("enqueue_job", "long-concurrency-key",
        "select enqueue_job('listing_flyer', '{}', 'k-dep', p_concurrency_key => repeat('x', 201))", "QV400"),
    bad("enqueue_job", "null-run-anyway", "select enqueue_job('listing_flyer', '{}', 'k-dep', p_run_anyway => null)",
        "QV400"),
    bad("enqueue_jobs", "forward-reference", """select * from enqueue_jobs('[{"type": "listing_flyer", "payload": {},
        "idempotency_key": "f1", "depends_on": [2]}, {"type": "listing_flyer", "payload": {}, "idempotency_key": "f2"}]')""",
        "QW422"),
    bad("enqueue_jobs", "self-reference", """select * from enqueue_jobs('[{"type": "listing_flyer", "payload": {},
        "idempotency_key": "f1", "depends_on": [1]}]')""", "QW422"),
    bad("enqueue_jobs", "depends-on-not-array", """select * from enqueue_jobs('[{"type": "listing_flyer", "payload": {},
        "idempotency_key": "f1", "depends_on": "x"}]')""", "QV400"),
    bad("enqueue_jobs", "bad-workflow-id", """select * from enqueue_jobs('[{"type": "listing_flyer", "payload": {},
        "idempotency_key": "f1", "workflow_id": "nope"}]')""", "QV400"),
    bad("enqueue_jobs_into", "forward-reference", """select * from enqueue_jobs_into('[{"type": "listing_flyer",
        "payload": {}, "idempotency_key": "f1", "depends_on": [3]}]', null)""", "QW422"),
    bad("enqueue_batch", "empty", "select * from enqueue_batch('[]')", "QV400"),
    bad("enqueue_batch", "null", "select * from enqueue_batch(null)", "QV400"),
    bad("enqueue_batch", "callback-not-object", """select * from enqueue_batch('[{"type": "listing_flyer",
        "payload": {}, "idempotency_key": "b1"}]', '[]')""", "QV400"),
    bad("enqueue_batch", "callback-unknown-type", """select * from enqueue_batch('[{"type": "listing_flyer",
        "payload": {}, "idempotency_key": "b1"}]', '{"type": "no-such-type"}')""", "QT422"),
    bad("enqueue_batch", "key-of-another-job", """select * from enqueue_batch('[{"type": "listing_flyer",
        "payload": {"n": "pending"}, "idempotency_key": "world-pending", "queue": "world"}]')""", "QI409"),
    bad("batch_status", "null", "select * from batch_status(null)", "QV400"),
    bad("batch_status", "unknown", "select * from batch_status(<unknown>)", "QN404"),
    bad("workflow_jobs", "null", "select * from workflow_jobs(null)", "QV400"),
    bad("workflow_jobs", "unknown", "select * from workflow_jobs(<unknown>)", "QN404"),
    bad("parent_results", "null", "select * from parent_results(null)", "QV400"),
    bad("parent_results", "unknown", "select * from parent_results(<unknown>)", "QN404"),
    bad("set_queue_key_limit", "null-queue", "select * from set_queue_key_limit(null, 1)", "QV400"),
    bad("set_queue_key_limit", "zero-limit", "select * from set_queue_key_limit('world', 0)", "QV400"),
    bad("set_queue_key_limit", "unknown-queue", "select * from set_queue_key_limit('no-such-queue', 1)", "QU404"),
    bad("retry_dead_jobs", "zero-limit", "select retry_dead_jobs(p_limit => 0)", "QV400"),
    bad("retry_dead_jobs", "since-after-until",
        "select retry_dead_jobs(p_since => now(), p_until => now() - interval '1 hour')", "QV400"),
    bad("retry_dead_jobs", "blank-type", f"select retry_dead_jobs(p_type => {BLANK})", "QV400"),
    bad("cancel_jobs", "bad-status", "select cancel_jobs(p_statuses => array['succeeded'])", "QV400"),
    bad("cancel_jobs", "empty-statuses", "select cancel_jobs(p_statuses => '{}'::text[])", "QV400"),
    bad("cancel_jobs", "empty-error", "select cancel_jobs(p_error => '')", "QV400"),
    bad("check_bulk_filter", "null-limit", "select check_bulk_filter(null, null, null, null, null, null)", "QV400"),
    # watch_job(job_id), unwatch_job(job_id): an existing job
    bad("watch_job", "null-job", "select watch_job(null)", "QV400"),
    bad("watch_job", "unknown-job", "select watch_job(<unknown>)", "QN404"),
    bad("watch_job", "id-not-uuid", "select watch_job('not-a-uuid')", "22P02"),
    bad("unwatch_job", "null-job", "select unwatch_job(null)", "QV400"),
    bad("unwatch_job", "id-not-uuid", "select unwatch_job('not-a-uuid')", "22P02"),
    # snooze_job(job_id, lease_token, until, delay_ms): exactly one of until and delay_ms
    bad("snooze_job", "null-job", "select * from snooze_job(null, <tok:processing>, p_delay_ms => 1)", "QV400"),
    bad("snooze_job", "null-token", "select * from snooze_job(<processing>, null, p_delay_ms => 1)", "QV400"),
    bad("snooze_job", "no-time", "select * from snooze_job(<processing>, <tok:processing>)", "QV400"),
    bad("snooze_job", "both-times",
        "select * from snooze_job(<processing>, <tok:processing>, now() + interval '1 hour', 1)", "QV400"),
    bad("snooze_job", "min-int-delay",
        "select * from snooze_job(<processing>, <tok:processing>, p_delay_ms => -2147483648)", "QV400"),
    bad("snooze_job", "infinite-until", "select * from snooze_job(<processing>, <tok:processing>, 'infinity')",
        "QV400"),
    bad("snooze_job", "unknown-job", "select * from snooze_job(<unknown>, <made-up>, p_delay_ms => 1)", "QN404"),
    bad("snooze_job", "id-not-uuid", "select * from snooze_job('x', <tok:processing>, p_delay_ms => 1)", "22P02"),
    bad("snooze_job", "made-up-token", "select * from snooze_job(<processing>, <made-up>, p_delay_ms => 1)",
        "QL409"),
    bad("snooze_job", "other-jobs-token", "select * from snooze_job(<processing>, <tok:dead>, p_delay_ms => 1)",
        "QL409"),
    bad("snooze_job", "pending-job", "select * from snooze_job(<pending>, <made-up>, p_delay_ms => 1)", "QL409"),
    bad("snooze_job", "succeeded-job-own-token",
        "select * from snooze_job(<succeeded>, <tok:succeeded>, p_delay_ms => 1)", "QL409"),
    bad("snooze_job", "failed-job-own-token", "select * from snooze_job(<failed>, <tok:failed>, p_delay_ms => 1)",
        "QL409"),
    # mark_cancelled(job_id, lease_token): only once a cancel was requested
    bad("mark_cancelled", "null-job", "select * from mark_cancelled(null, <tok:processing>)", "QV400"),
    bad("mark_cancelled", "null-token", "select * from mark_cancelled(<processing>, null)", "QV400"),
    bad("mark_cancelled", "unknown-job", "select * from mark_cancelled(<unknown>, <tok:processing>)", "QN404"),
    bad("mark_cancelled", "not-requested", "select * from mark_cancelled(<processing>, <tok:processing>)", "QS409"),
    bad("mark_cancelled", "other-token", "select * from mark_cancelled(<processing>, <tok:failed>)", "QL409"),
    # mark_timed_out(job_id, lease_token, base_ms, max_jitter_ms, max_delay_ms): once the attempt's deadline passed
    bad("mark_timed_out", "null-job", "select * from mark_timed_out(null, <tok:processing>)", "QV400"),
    bad("mark_timed_out", "null-token", "select * from mark_timed_out(<processing>, null)", "QV400"),
    bad("mark_timed_out", "negative-base", "select * from mark_timed_out(<processing>, <tok:processing>, -1)", "QV400"),
    bad("mark_timed_out", "unknown-job", "select * from mark_timed_out(<unknown>, <tok:processing>)", "QN404"),
    bad("mark_timed_out", "no-deadline", "select * from mark_timed_out(<processing>, <tok:processing>)", "QS409"),
    bad("mark_timed_out", "other-token", "select * from mark_timed_out(<processing>, <tok:failed>)", "QL409"),
    bad("mark_timed_out", "made-up-token", "select * from mark_timed_out(<processing>, <made-up>)", "QL409"),
    bad("mark_timed_out", "finished-job", "select * from mark_timed_out(<succeeded>, <tok:succeeded>)", "QL409"),
    # time_out_attempt(job_id, attempt, ...): internal; an attempt that does not hold its job is refused
    bad("time_out_attempt", "unknown-job", "select time_out_attempt(<unknown>, 1)", "QN404"),
    bad("time_out_attempt", "not-held", "select time_out_attempt(<pending>, 1)", "QL409"),
    # register_task_types(types): a JSON array of {name, payload_schema, and settings}
    bad("register_task_types", "null", "select * from register_task_types(null)", "QV400"),
    bad("register_task_types", "json-null", "select * from register_task_types('null')", "QV400"),
    bad("register_task_types", "object", "select * from register_task_types('{\"name\": \"t\"}')", "QV400"),
    bad("register_task_types", "array-of-string", "select * from register_task_types('[\"t\"]')", "QV400"),
    bad("register_task_types", "array-of-null", "select * from register_task_types('[null]')", "QV400"),
    bad("register_task_types", "no-name", "select * from register_task_types('[{\"payload_schema\": {}}]')",
        "QV400"),
    bad("register_task_types", "number-name",
        "select * from register_task_types('[{\"name\": 7, \"payload_schema\": {}}]')", "QV400"),
    bad("register_task_types", "empty-name",
        "select * from register_task_types('[{\"name\": \"\", \"payload_schema\": {}}]')", "QV400"),
    bad("register_task_types", "whitespace-name",
        "select * from register_task_types('[{\"name\": \" \\t\\n\", \"payload_schema\": {}}]')", "QV400"),
    bad("register_task_types", "long-name", "select * from register_task_types(jsonb_build_array(jsonb_build_object("
        "'name', repeat('€', 101), 'payload_schema', '{}'::jsonb)))", "QV400"),
    bad("register_task_types", "nul-in-name",
        "select * from register_task_types('[{\"name\": \"t\\u0000\", \"payload_schema\": {}}]')", "22P05"),
    bad("register_task_types", "no-schema", "select * from register_task_types('[{\"name\": \"t\"}]')", "QV400"),
    bad("register_task_types", "array-schema",
        "select * from register_task_types('[{\"name\": \"t\", \"payload_schema\": []}]')", "QV400"),
    bad("register_task_types", "number-description", "select * from register_task_types("
        "'[{\"name\": \"t\", \"payload_schema\": {}, \"description\": 1}]')", "QV400"),
    bad("register_task_types", "number-queue", "select * from register_task_types("
        "'[{\"name\": \"t\", \"payload_schema\": {}, \"queue\": 1}]')", "QV400"),
    bad("register_task_types", "empty-queue", "select * from register_task_types("
        "'[{\"name\": \"t\", \"payload_schema\": {}, \"queue\": \"\"}]')", "QV400"),
    bad("register_task_types", "whitespace-queue", "select * from register_task_types("
        "'[{\"name\": \"t\", \"payload_schema\": {}, \"queue\": \" \\t \"}]')", "QV400"),
    bad("register_task_types", "long-queue", "select * from register_task_types(jsonb_build_array(jsonb_build_object("
        "'name', 't', 'payload_schema', '{}'::jsonb, 'queue', repeat('q', 101))))", "QV400"),
    bad("register_task_types", "text-priority", "select * from register_task_types("
        "'[{\"name\": \"t\", \"payload_schema\": {}, \"priority\": \"high\"}]')", "QV400"),
    bad("register_task_types", "fractional-priority", "select * from register_task_types("
        "'[{\"name\": \"t\", \"payload_schema\": {}, \"priority\": 1.5}]')", "QV400"),
    bad("register_task_types", "huge-priority", "select * from register_task_types("
        "'[{\"name\": \"t\", \"payload_schema\": {}, \"priority\": 1e400}]')", "QV400"),
    bad("register_task_types", "zero-max-attempts", "select * from register_task_types("
        "'[{\"name\": \"t\", \"payload_schema\": {}, \"max_attempts\": 0}]')", "QV400"),
    bad("register_task_types", "max-attempts-1001", "select * from register_task_types("
        "'[{\"name\": \"t\", \"payload_schema\": {}, \"max_attempts\": 1001}]')", "QV400"),
    bad("register_task_types", "negative-backoff", "select * from register_task_types("
        "'[{\"name\": \"t\", \"payload_schema\": {}, \"backoff_base_ms\": -1}]')", "QV400"),
    bad("register_task_types", "negative-jitter", "select * from register_task_types("
        "'[{\"name\": \"t\", \"payload_schema\": {}, \"backoff_max_jitter_ms\": -1}]')", "QV400"),
    bad("register_task_types", "zero-lease", "select * from register_task_types("
        "'[{\"name\": \"t\", \"payload_schema\": {}, \"lease_ms\": 0}]')", "QV400"),
    bad("register_task_types", "boolean-lease", "select * from register_task_types("
        "'[{\"name\": \"t\", \"payload_schema\": {}, \"lease_ms\": true}]')", "QV400"),
    bad("register_task_types", "name-twice", "select * from register_task_types("
        "'[{\"name\": \"t\", \"payload_schema\": {}}, {\"name\": \"t\", \"payload_schema\": {}}]')", "QV400"),
    bad("register_task_types", "good-then-bad", "select * from register_task_types("
        "'[{\"name\": \"listing_flyer\", \"payload_schema\": {\"changed\": true}, \"max_attempts\": 2},"
        " {\"name\": \"t\", \"payload_schema\": {}, \"lease_ms\": -5}]')", "QV400"),
    # register_worker(worker_id, task_types, queues, concurrency, hostname, pid, ttl_ms)
    bad("register_worker", "null-worker", "select * from register_worker(null, array['listing_flyer'])", "QV400"),
    bad("register_worker", "empty-worker", "select * from register_worker('', array['listing_flyer'])", "QV400"),
    bad("register_worker", "whitespace-worker",
        f"select * from register_worker({BLANK}, array['listing_flyer'])", "QV400"),
    bad("register_worker", "long-worker",
        "select * from register_worker(repeat('w', 201), array['listing_flyer'])", "QV400"),
    bad("register_worker", "nul-worker",
        f"select * from register_worker('w1' || {NUL}, array['listing_flyer'])", "54000"),
    bad("register_worker", "null-types", "select * from register_worker('w1', null)", "QV400"),
    bad("register_worker", "null-type-name", "select * from register_worker('w1', array['listing_flyer', null])",
        "QV400"),
    bad("register_worker", "zero-concurrency",
        "select * from register_worker('w1', array['listing_flyer'], p_concurrency => 0)", "QV400"),
    bad("register_worker", "min-int-concurrency",
        "select * from register_worker('w1', array['listing_flyer'], p_concurrency => -2147483648)", "QV400"),
    bad("register_worker", "null-ttl", "select * from register_worker('w1', array['listing_flyer'], p_ttl_ms => null)",
        "QV400"),
    bad("register_worker", "zero-ttl", "select * from register_worker('w1', array['listing_flyer'], p_ttl_ms => 0)",
        "QV400"),
    bad("register_worker", "ttl-over-a-day",
        f"select * from register_worker('w1', array['listing_flyer'], p_ttl_ms => {DAY_MS + 1})", "QV400"),
    bad("register_worker", "max-int-ttl",
        "select * from register_worker('w1', array['listing_flyer'], p_ttl_ms => 2147483647)", "QV400"),
    # stop_worker(worker_id)
    bad("stop_worker", "null-worker", "select * from stop_worker(null)", "QV400"),
    bad("stop_worker", "nul-worker", f"select * from stop_worker('w1' || {NUL})", "54000"),
    # prune_expired_jobs(batch)
    bad("prune_expired_jobs", "null-batch", "select prune_expired_jobs(null)", "QV400"),
    bad("prune_expired_jobs", "zero-batch", "select prune_expired_jobs(0)", "QV400"),
    bad("prune_expired_jobs", "max-int-batch", "select prune_expired_jobs(2147483647)", "QV400"),
    # prune_jobs(older_than, statuses, batch)
    bad("prune_jobs", "negative-million-years", "select prune_jobs(interval '-1000000 years')", "QV400"),
    bad("prune_jobs", "pending-status", "select prune_jobs(interval '0', array['pending'])", "QV400"),
    bad("prune_jobs", "injection-status", f"select prune_jobs(interval '0', array[$${INJECTION}$$])", "QV400"),
    bad("prune_jobs", "max-int-batch", "select prune_jobs(interval '0', p_batch => 2147483647)", "QV400"),
    # sweep_stuck(): the server's clock; the old form with a time matches no function
    bad("sweep_stuck", "old-form-null-now", "select * from sweep_stuck(null::timestamptz)", "42883"),
    bad("sweep_stuck", "old-form-far-future", "select * from sweep_stuck('infinity'::timestamptz)", "42883"),
    # sweep_stuck_at(now): the owner's clock
    bad("sweep_stuck_at", "null-now", "select * from sweep_stuck_at(null)", "QV400"),
    # raise_job_not_held(job_id, attempt): never returns
    bad("raise_job_not_held", "nulls", "select raise_job_not_held(null, null)", "QN404"),
    bad("raise_job_not_held", "unknown-job", "select raise_job_not_held(<unknown>, 1)", "QN404"),
    bad("raise_job_not_held", "no-attempt", "select raise_job_not_held(<processing>, null)", "QL409"),
    bad("raise_job_not_held", "the-current-attempt", "select raise_job_not_held(<processing>, 1)", "QL409"),
    bad("raise_job_not_held", "min-int-attempt", "select raise_job_not_held(<dead>, -2147483648)", "QL409"),
    # find_lease_attempt(job_id, lease_token): the token's attempt, or raises as raise_job_not_held does
    bad("find_lease_attempt", "nulls", "select * from find_lease_attempt(null, null)", "QN404"),
    bad("find_lease_attempt", "unknown-job", "select * from find_lease_attempt(<unknown>, <made-up>)", "QN404"),
    bad("find_lease_attempt", "made-up-token", "select * from find_lease_attempt(<processing>, <made-up>)", "QL409"),
    bad("find_lease_attempt", "another-jobs-token", "select * from find_lease_attempt(<processing>, <tok:dead>)",
        "QL409"),
    # report_latest_jobs(limit)
    bad("report_latest_jobs", "null-limit", "select * from report_latest_jobs(null)", "QV400"),
    bad("report_latest_jobs", "zero-limit", "select * from report_latest_jobs(0)", "QV400"),
    bad("report_latest_jobs", "limit-1001", "select * from report_latest_jobs(1001)", "QV400"),
    bad("report_latest_jobs", "max-int-limit", "select * from report_latest_jobs(2147483647)", "QV400"),
    bad("report_latest_jobs", "min-int-limit", "select * from report_latest_jobs(-2147483648)", "QV400"),
    # report_timeline(job_id)
    bad("report_timeline", "null-job", "select * from report_timeline(null)", "QV400"),
    bad("report_timeline", "unknown-job", "select * from report_timeline(<unknown>)", "QN404"),
    bad("report_timeline", "id-not-uuid", "select * from report_timeline('x')", "22P02"),
    # pause_queue(queue), resume_queue(queue), set_queue_limit(queue, max_running),
    # set_queue_rate(queue, jobs_per_second)
    bad("pause_queue", "null-queue", "select * from pause_queue(null)", "QV400"),
    bad("pause_queue", "whitespace-queue", f"select * from pause_queue({BLANK})", "QV400"),
    bad("pause_queue", "queue-101-chars", "select * from pause_queue(repeat('q', 101))", "QV400"),
    bad("resume_queue", "null-queue", "select * from resume_queue(null)", "QV400"),
    bad("resume_queue", "whitespace-queue", f"select * from resume_queue({BLANK})", "QV400"),
    bad("resume_queue", "queue-101-chars", "select * from resume_queue(repeat('q', 101))", "QV400"),
    bad("set_queue_limit", "null-queue", "select * from set_queue_limit(null, 1)", "QV400"),
    bad("set_queue_limit", "whitespace-queue", f"select * from set_queue_limit({BLANK}, 1)", "QV400"),
    bad("set_queue_limit", "zero-limit", "select * from set_queue_limit('q', 0)", "QV400"),
    bad("set_queue_limit", "min-int-limit", "select * from set_queue_limit('q', -2147483648)", "QV400"),
    bad("set_queue_limit", "limit-overflow", "select * from set_queue_limit('q', 2147483648)", "42883"),
    # A queue never seen (no job, setting, worker, type or schedule), not asked to be created: QU404.
    bad("pause_queue", "unknown-queue", "select * from pause_queue('never-seen')", "QU404"),
    bad("resume_queue", "unknown-queue", f"select * from resume_queue($${INJECTION}$$)", "QU404"),
    bad("set_queue_limit", "unknown-queue", "select * from set_queue_limit('never-seen', 1)", "QU404"),
    bad("set_queue_rate", "unknown-queue", "select * from set_queue_rate('never-seen', 1, false)", "QU404"),
    # raise_unknown_queue(queue, create): returns only for a known queue or create
    bad("raise_unknown_queue", "unknown-queue", "select raise_unknown_queue('never-seen', false)", "QU404"),
    bad("raise_unknown_queue", "null-create", "select raise_unknown_queue('never-seen', null)", "QU404"),
    # set_schedule(name, task_type, cron, payload, queue, priority, catch_up)
    bad("set_schedule", "null-name", "select * from set_schedule(null, 'noop', '* * * * *')", "QV400"),
    bad("set_schedule", "injection-name", f"select * from set_schedule($${INJECTION}$$, 'noop', '* * * * *')", "QV400"),
    bad("set_schedule", "name-101-chars", "select * from set_schedule(repeat('s', 101), 'noop', '* * * * *')", "QV400"),
    bad("set_schedule", "slash-in-name", "select * from set_schedule('a/b', 'noop', '* * * * *')", "QV400"),
    bad("set_schedule", "null-cron", "select * from set_schedule('s', 'noop', null)", "QC400"),
    bad("set_schedule", "injection-cron", f"select * from set_schedule('s', 'noop', $${INJECTION}$$)", "QC400"),
    bad("set_schedule", "six-fields", "select * from set_schedule('s', 'noop', '* * * * * *')", "QC400"),
    bad("set_schedule", "minute-60", "select * from set_schedule('s', 'noop', '60 * * * *')", "QC400"),
    bad("set_schedule", "huge-cron", "select * from set_schedule('s', 'noop', repeat('* ', 1000000))", "QC400"),
    bad("set_schedule", "never", "select * from set_schedule('s', 'noop', '0 0 30 2 *')", "QC400"),
    bad("set_schedule", "unknown-task-type", "select * from set_schedule('s', 'no-such-type', '* * * * *')", "QT422"),
    bad("set_schedule", "null-task-type", "select * from set_schedule('s', null, '* * * * *')", "QV400"),
    bad("set_schedule", "array-payload", "select * from set_schedule('s', 'noop', '* * * * *', '[]')", "QV400"),
    bad("set_schedule", "huge-payload",
        "select * from set_schedule('s', 'noop', '@daily', jsonb_build_object('x', repeat('x', 70000)))", "QV413"),
    bad("set_schedule", "blank-queue", f"select * from set_schedule('s', 'noop', '@daily', '{{}}', {BLANK})", "QV400"),
    bad("set_schedule", "unknown-catch-up",
        "select * from set_schedule('s', 'noop', '@daily', p_catch_up => 'sometimes')", "QV400"),
    # pause_schedule(name), resume_schedule(name), delete_schedule(name)
    bad("pause_schedule", "null-name", "select * from pause_schedule(null)", "QV400"),
    bad("pause_schedule", "unknown-name", "select * from pause_schedule('no-such-schedule')", "QR404"),
    bad("pause_schedule", "injection-name", f"select * from pause_schedule($${INJECTION}$$)", "QR404"),
    bad("resume_schedule", "null-name", "select * from resume_schedule(null)", "QV400"),
    bad("resume_schedule", "unknown-name", "select * from resume_schedule('no-such-schedule')", "QR404"),
    bad("delete_schedule", "null-name", "select * from delete_schedule(null)", "QV400"),
    bad("delete_schedule", "unknown-name", "select * from delete_schedule(repeat('s', 1000000))", "QR404"),
    # register_schedules(task_types, schedules)
    bad("register_schedules", "null-types", "select * from register_schedules(null, '[]')", "QV400"),
    bad("register_schedules", "null-type-name", "select * from register_schedules(array[null]::text[], '[]')", "QV400"),
    bad("register_schedules", "not-an-array", "select * from register_schedules(array['noop'], '{}')", "QV400"),
    bad("register_schedules", "no-cron",
        "select * from register_schedules(array['noop'], '[{\"name\": \"s\", \"task_type\": \"noop\"}]')", "QV400"),
    bad("register_schedules", "name-twice", "select * from register_schedules(array['noop'], '["
        "{\"name\": \"s\", \"task_type\": \"noop\", \"cron\": \"@daily\"},"
        "{\"name\": \"s\", \"task_type\": \"noop\", \"cron\": \"@hourly\"}]')", "QV400"),
    bad("register_schedules", "bad-cron", "select * from register_schedules(array['noop'],"
        " '[{\"name\": \"s\", \"task_type\": \"noop\", \"cron\": \"0 0 L * *\"}]')", "QC400"),
    bad("register_schedules", "type-not-the-workers", "select * from register_schedules(array['noop'],"
        " '[{\"name\": \"s\", \"task_type\": \"listing_flyer\", \"cron\": \"@daily\"}]')", "QV400"),
    bad("register_schedules", "unknown-task-type", "select * from register_schedules(array['ghost'],"
        " '[{\"name\": \"s\", \"task_type\": \"ghost\", \"cron\": \"@daily\"}]')", "QT422"),
    bad("register_schedules", "priority-overflow", "select * from register_schedules(array['noop'],"
        " '[{\"name\": \"s\", \"task_type\": \"noop\", \"cron\": \"@daily\", \"priority\": 1e12}]')",
        "QV400"),
    # enqueue_schedule_slots(name, slots)
    bad("enqueue_schedule_slots", "null-name", "select * from enqueue_schedule_slots(null, array[now()])", "QV400"),
    bad("enqueue_schedule_slots", "not-a-slot", "select * from enqueue_schedule_slots("
        "(select name from set_schedule('every-minute', 'noop', '* * * * *')),"
        " array[date_trunc('minute', now()) - interval '59 seconds'])", "QV400"),
    bad("enqueue_schedule_slots", "unknown-name", "select * from enqueue_schedule_slots('nope', array[now()])", "QR404"),
    bad("enqueue_schedule_slots", "null-slots", "select * from enqueue_schedule_slots('nope', null)", "QV400"),
    bad("enqueue_schedule_slots", "null-slot", "select * from enqueue_schedule_slots('nope', array[null]::timestamptz[])",
        "QV400"),
    bad("enqueue_schedule_slots", "future-slot",
        "select * from enqueue_schedule_slots('nope', array[now() + interval '1 second'])", "QV400"),
    bad("enqueue_schedule_slots", "infinity", "select * from enqueue_schedule_slots('nope', array['infinity'::timestamptz])",
        "QV400"),
    bad("enqueue_schedule_slots", "minus-infinity",
        "select * from enqueue_schedule_slots('nope', array['-infinity'::timestamptz])", "QV400"),
    bad("enqueue_schedule_slots", "101-slots", "select * from enqueue_schedule_slots('nope',"
        " array(select now() - make_interval(mins => n) from generate_series(1, 101) n))", "QV400"),
    bad("set_queue_rate", "null-queue", "select * from set_queue_rate(null, 1)", "QV400"),
    bad("set_queue_rate", "whitespace-queue", f"select * from set_queue_rate({BLANK}, 1)", "QV400"),
    bad("set_queue_rate", "queue-101-chars", "select * from set_queue_rate(repeat('q', 101), 1)", "QV400"),
    bad("set_queue_rate", "nul-queue", f"select * from set_queue_rate('q' || {NUL}, 1)", "54000"),
    bad("set_queue_rate", "zero-rate", "select * from set_queue_rate('q', 0)", "QV400"),
    bad("set_queue_rate", "negative-rate", "select * from set_queue_rate('q', -0.5)", "QV400"),
    bad("set_queue_rate", "nan-rate", "select * from set_queue_rate('q', 'NaN')", "QV400"),
    bad("set_queue_rate", "infinite-rate", "select * from set_queue_rate('q', 'Infinity')", "QV400"),
    bad("set_queue_rate", "minus-infinite-rate", "select * from set_queue_rate('q', '-Infinity')", "QV400"),
    bad("set_queue_rate", "rate-above-a-million", "select * from set_queue_rate('q', 1000000.000001)", "QV400"),
    bad("set_queue_rate", "huge-rate", "select * from set_queue_rate('q', 1e1000)", "QV400"),
    bad("set_queue_rate", "tiny-rate", "select * from set_queue_rate('q', 1e-1000)", "QV400"),
    bad("set_queue_rate", "rate-7-decimals", "select * from set_queue_rate('q', 0.0000005)", "QV400"),
    bad("set_queue_rate", "rate-not-a-number", "select * from set_queue_rate('q', 'fast')", "22P02"),
]

# Hostile but valid: each must succeed, return what is said, and change nothing.
FINE_CALLS = [
    fine("settle_jobs", "unknown-job", "select settle_jobs(array[<unknown>])::text", ""),
    fine("judge_blocked", "unknown-job", "select judge_blocked(array[<unknown>])", []),
    fine("serial_turn", "unknown-key", f"select serial_turn($${INJECTION}$$, 1)", True),
    fine("prune_finished", "injection-type", f"select prune_finished($${INJECTION}$$, 'succeeded', now(), 10)", 0),
    fine("finished_types", "every-finished-type", "select finished_types() is not distinct from"
         " (select array_agg(distinct type::text order by type::text) from jobs where finished_at is not null)", True),
    fine("retry_dead_jobs", "injection-type", f"select retry_dead_jobs(p_type => $${INJECTION}$$)", 0),
    fine("cancel_jobs", "injection-error", f"select cancel_jobs(p_error => $${INJECTION}$$)", 0),
    fine("wait_for_jobs", "injection-queue",
         f"select wait_for_jobs($${INJECTION}$$, array[$${INJECTION}$$]) > now()", True),
    fine("waits_settled", "old-xid", "select waits_settled('3'::xid8)", True),
    fine("has_waiters", "injection-queue", f"select has_waiters('none waits ' || $${INJECTION}$$)"
         " = exists (select 1 from queue_waiters where queue = '*' and until > now())", True),
    fine("next_run_at", "injection-queue", f"select count(*) from next_run_at(array[$${INJECTION}$$])", 0),
    fine("next_run_at", "null-names",
         "select count(*) from next_run_at(array[null]::text[], array[null]::text[], 1000)", 0),
    fine("backoff_delay", "max-int-everything",
         "select backoff_delay(2147483647, 2147483647, 2147483647, 2147483647, 1) = interval '596:31:23.647'", True),
    fine("backoff_delay", "capped-at-zero", "select backoff_delay(60, 1000, 1000, 0, 1) = interval '0'", True),
    fine("claim_job", "unknown-queue", "select count(*) from claim_job('w9', array['no-such-queue'])", 0),
    fine("claim_job", "null-queue-name", "select count(*) from claim_job('w9', array[null]::text[])", 0),
    fine("claim_jobs", "injection-queue", f"select count(*) from claim_jobs('w9', 5, array[$${INJECTION}$$])", 0),
    fine("claim_jobs_at", "now-long-ago", "select count(*) from claim_jobs_at('1970-01-01', 'w9', 1000)", 0),
    fine("claim_jobs", "unknown-task-type",
         "select count(*) from claim_jobs('w9', 5, p_task_types => array['no-such-type'])", 0),
    fine("claim_jobs", "null-task-type-name",
         "select count(*) from claim_jobs('w9', 5, p_task_types => array[null]::text[])", 0),
    fine("claim_job", "injection-task-type",
         f"select count(*) from claim_job('w9', p_task_types => array[$${INJECTION}$$])", 0),
    fine("enqueue_job", "same-request-again",
         "select created from enqueue_job('listing_flyer', '{\"n\": \"pending\"}', 'world-pending', 'world',"
         " p_max_attempts => 1000)", False),
    # Unset (null) queue and priority mean the type's, then the default: the same request as the
    # pending job's (made with queue 'world') is answered with that job, not refused.
    fine("enqueue_job", "null-queue-same-request",
         "select created from enqueue_job('listing_flyer', '{\"n\": \"pending\"}', 'world-pending', null)", False),
    fine("enqueue_job", "null-priority-same-request",
         "select created from enqueue_job('listing_flyer', '{\"n\": \"pending\"}', 'world-pending', 'world', null)",
         False),
    fine("enqueue_jobs", "null-queue-same-request",
         "select bool_or(created) from enqueue_jobs('[{\"type\": \"listing_flyer\", \"payload\": {\"n\": \"pending\"},"
         " \"idempotency_key\": \"world-pending\", \"queue\": null, \"priority\": null}]')", False),
    fine("enqueue_jobs", "empty-array", "select count(*) from enqueue_jobs('[]')", 0),
    fine("enqueue_jobs", "same-request-again",
         "select bool_or(created) from enqueue_jobs('[{\"type\": \"listing_flyer\", \"payload\": {\"n\": \"pending\"},"
         " \"idempotency_key\": \"world-pending\", \"queue\": \"world\"}]')", False),
    # A token that does not hold the job listed with it extends nothing: made up, null, another job's,
    # or a job's own token once its attempt ended.
    fine("heartbeat", "made-up-token", "select count(*) from heartbeat(array[<processing>], array[<made-up>])", 0),
    fine("heartbeat", "null-token", "select count(*) from heartbeat(array[<processing>], array[null]::uuid[])", 0),
    fine("heartbeat", "other-jobs-token",
         "select count(*) from heartbeat(array[<processing>], array[<tok:failed>])", 0),
    fine("heartbeat", "jobs-not-processing-own-tokens", "select count(*) from heartbeat("
         "array[<pending>, <succeeded>, <failed>, <dead>, <unknown>, null],"
         " array[<made-up>, <tok:succeeded>, <tok:failed>, <tok:dead>, <tok:processing>, <tok:processing>])", 0),
    fine("heartbeat", "tokens-swapped", "select count(*) from heartbeat(array[<processing>, <failed>],"
         " array[<tok:failed>, <tok:processing>])", 0),
    fine("heartbeat", "empty-arrays", "select count(*) from heartbeat('{}', '{}')", 0),
    fine("mark_jobs_succeeded", "made-up-token",
         "select count(*) from mark_jobs_succeeded(array[<processing>], array[<made-up>])", 0),
    fine("mark_jobs_succeeded", "other-jobs-token",
         "select count(*) from mark_jobs_succeeded(array[<processing>], array[<tok:dead>])", 0),
    fine("mark_jobs_succeeded", "jobs-not-processing", "select count(*) from mark_jobs_succeeded("
         "array[<pending>, <failed>, <dead>, <unknown>, null],"
         " array[<made-up>, <tok:failed>, <tok:dead>, <tok:processing>, <tok:processing>])", 0),
    fine("mark_jobs_succeeded", "null-elements",
         "select count(*) from mark_jobs_succeeded(array[null, <processing>]::uuid[], array[<tok:processing>, null])",
         0),
    # A repeated result for an attempt that already ended this way (a retry after a lost reply, with
    # the same token) is answered already_recorded, and changes nothing.
    fine("mark_jobs_succeeded", "already-succeeded",
         "select bool_and(already_recorded) from mark_jobs_succeeded(array[<succeeded>], array[<tok:succeeded>])",
         True),
    fine("mark_succeeded", "same-token-again",
         "select already_recorded from mark_succeeded(<succeeded>, <tok:succeeded>)", True),
    # ... with another result: the first one stays (one result per job, stored with the success).
    fine("mark_succeeded", "same-token-other-result",
         "select already_recorded from mark_succeeded(<succeeded>, <tok:succeeded>, 'application/json', '{\"x\": 1}')",
         True),
    fine("mark_jobs_succeeded", "already-succeeded-other-result", "select bool_and(already_recorded)"
         " from mark_jobs_succeeded(array[<succeeded>], array[<tok:succeeded>], '[{\"x\": 1}]')", True),
    fine("mark_jobs_succeeded", "results-with-made-up-tokens",
         "select count(*) from mark_jobs_succeeded(array[<processing>], array[<made-up>], '[{\"x\": 1}]')", 0),
    fine("mark_jobs_succeeded", "fewer-results-than-ids", "select count(*) from mark_jobs_succeeded("
         "array[<pending>, <dead>], array[<made-up>, <tok:dead>], '[1]')", 0),
    fine("mark_failed", "same-token-same-error-again",
         "select already_recorded from mark_failed(<failed>, <tok:failed>, 'printer jammed')", True),
    fine("mark_jobs_succeeded", "empty-arrays", "select count(*) from mark_jobs_succeeded('{}', '{}')", 0),
    fine("register_task_types", "empty-array", "select count(*) from register_task_types('[]')", 0),
    fine("stop_worker", "unknown-worker", "select count(*) from stop_worker('no-such-worker')", 0),
    fine("stop_worker", "injection-worker", f"select count(*) from stop_worker($${INJECTION}$$)", 0),
    fine("prune_jobs", "age-of-a-million-years", "select prune_jobs(interval '1000000 years')", 0),
    fine("prune_expired_jobs", "nothing-past-its-retention", "select prune_expired_jobs(100000)", 0),
    fine("schedule_times", "reads-only", "select count(*) from schedule_times()", 0),
    fine("cron_matches", "null-cron", "select cron_matches(null, now()) is null", True),
    fine("cron_matches", "injection-cron", f"select cron_matches($${INJECTION}$$, now()) is null", True),
    fine("cron_matches", "infinity", "select cron_matches('* * * * *', 'infinity'::timestamptz) is not true", True),
    fine("sweep_stuck", "now", "select count(*) from sweep_stuck()", 0),
    fine("sweep_stuck_at", "minus-infinity", "select count(*) from sweep_stuck_at('-infinity')", 0),
    fine("queue_stats", "reads-only", "select count(*) > 0 from queue_stats()", True),
    fine("find_lease_attempt", "ended-attempt", "select outcome from find_lease_attempt(<dead>, <tok:dead>)", "failed"),
    fine("find_lease_attempt", "held-attempt",
         "select attempt, outcome is null from find_lease_attempt(<processing>, <tok:processing>)", 1),
    fine("notify_watchers", "unwatched-job", "select pg_typeof(notify_watchers(<processing>))::text", "void"),
    fine("notify_watchers", "null-job", "select pg_typeof(notify_watchers(null))::text", "void"),
    fine("notify_due", "null-queue-and-time", "select pg_typeof(notify_due(null, null))::text", "void"),
    fine("notify_due", "injection-queue", f"select pg_typeof(notify_due($${INJECTION}$$, now()))::text", "void"),
    fine("report_concurrency", "null-prefix", "select count(*) from report_concurrency(null)", 1),
    fine("report_concurrency", "percent-prefix", "select count(*) from report_concurrency('%')", 0),
    fine("report_concurrency", "underscore-prefix", "select count(*) from report_concurrency('_1')", 0),
    fine("report_concurrency", "backslash-prefix", "select count(*) from report_concurrency('\\')", 0),
    fine("report_concurrency", "injection-prefix", f"select count(*) from report_concurrency($${INJECTION}$$)", 0),
    fine("report_concurrency", "huge-prefix", "select count(*) from report_concurrency(repeat('w', 1000000))", 0),
    fine("report_double_runs", "percent-prefix", "select jobs_seen from report_double_runs('%')", 0),
    fine("report_double_runs", "null-prefix", "select jobs_seen from report_double_runs(null)", 4),
    fine("report_latest_jobs", "limit-1000", "select count(*) from report_latest_jobs(1000)", 5),
    fine("report_timeline", "never-tried-job", "select count(*) from report_timeline(<pending>)", 0),
    fine("check_schedule_cron", "valid", "select check_schedule_cron(' */5  *\t* * mon-fri ') is null", True),
    fine("check_schedule_cron", "null", "select check_schedule_cron(null) is not null", True),
    fine("check_schedule_cron", "injection", f"select check_schedule_cron($${INJECTION}$$) is not null", True),
    fine("check_schedule_cron", "huge", "select check_schedule_cron(repeat('1,', 1000000) || '1 * * * *') is not null",
         True),
    fine("register_schedules", "none-defined", "select count(*) from register_schedules(array['noop'], '[]')", 0),
    fine("list_schedules", "none", "select count(*) from list_schedules()", 0),
    fine("list_queues", "reads-only", "select count(*) > 0 from list_queues()", True),
    fine("list_worker_status", "null-limit", "select count(*) >= 0 from list_worker_status(null)", True),
    fine("list_worker_status", "limit-0", "select count(*) from list_worker_status(0)", 0),
    fine("list_task_types", "unknown-type", "select count(*) from list_task_types('no-such-type')", 0),
    fine("list_task_types", "injection-type", f"select count(*) from list_task_types($${INJECTION}$$)", 0),
    fine("count_jobs_by_status", "every-status", "select count(*) from count_jobs_by_status()", 8),
    fine("get_job_result", "unknown-job", "select count(*) from get_job_result(gen_random_uuid())", 0),
    fine("get_job_result", "null-job", "select count(*) from get_job_result(null)", 0),
    fine("queue_throughput", "long-ago", "select count(*) from queue_throughput('2000-01-01', '2000-01-02', 10)", 0),
    fine("queue_throughput", "empty-window", "select count(*) from queue_throughput(now(), now(), 10)", 0),
    fine("queue_throughput", "null-buckets", "select count(*) from queue_throughput(null, null, null)", 0),
]


# ---- the world -----------------------------------------------------------------------------------

@dataclass
class World:
    conn: psycopg.Connection
    ids: dict[str, uuid.UUID]
    tokens: dict[str, uuid.UUID]
    digest: dict[str, Any]

    def sql(self, statement: str) -> str:
        for state, job_id in {**self.ids, "unknown": UNKNOWN}.items():
            statement = statement.replace(f"<{state}>", f"'{job_id}'::uuid")
        for state, token in {**{f"tok:{k}": v for k, v in self.tokens.items()}, "made-up": MADE_UP}.items():
            statement = statement.replace(f"<{state}>", f"'{token}'::uuid")
        assert "<" not in statement.replace("<>", ""), f"a placeholder left: {statement}"
        return statement


def digest(conn: psycopg.Connection) -> dict[str, Any]:
    """One md5 per table over every row, in a fixed order, and the row counts."""
    return one(conn, """
        select (select count(*) from jobs) as jobs,
               (select md5(coalesce(string_agg(j::text, '|' order by j.id), '')) from jobs j) as jobs_md5,
               (select count(*) from job_attempts) as attempts,
               (select md5(coalesce(string_agg(a::text, '|' order by a.job_id, a.attempt), ''))
                  from job_attempts a) as attempts_md5,
               (select count(*) from job_results) as results,
               (select md5(coalesce(string_agg(r::text, '|' order by r.job_id), '')) from job_results r)
                   as results_md5,
               (select md5(coalesce(string_agg(t::text, '|' order by t.name), '')) from task_types t) as types_md5,
               (select md5(coalesce(string_agg(w::text, '|' order by w.id), '')) from workers w) as workers_md5,
               (select md5(coalesce(string_agg(q::text, '|' order by q.name), '')) from queues q) as queues_md5,
               (select md5(coalesce(string_agg(s::text, '|' order by s.name), '')) from schedules s)
                   as schedules_md5,
               (select md5(string_agg(s::text, '|')) from queue_settings s) as settings_md5""")


def seed(conn: psycopg.Connection) -> tuple[dict[str, uuid.UUID], dict[str, uuid.UUID]]:
    """One job in every state, all in queue 'world', through the functions themselves; and the lease
    token of each claimed one."""
    conn.execute("truncate jobs, job_attempts, job_results, task_types, workers cascade")
    conn.execute("select register_task_types('[{\"name\": \"listing_flyer\", \"payload_schema\": {}},"
                 " {\"name\": \"noop\", \"payload_schema\": {}}, {\"name\": \"t\", \"payload_schema\": {}},"
                 " {\"name\": \"email\", \"payload_schema\": {}}]')")
    conn.execute("select register_worker('w1', array['listing_flyer', 'noop'], p_ttl_ms => %s)", [DAY_MS])
    conn.execute("update queue_settings set max_attempts = 5, lease_ms = 60000, retry_extra_attempts = 5,"
                 " backoff_base_ms = 2000, backoff_max_jitter_ms = 1000, backoff_max_delay_ms = 3600000,"
                 " max_payload_bytes = 65536")
    ids: dict[str, uuid.UUID] = {}
    tokens: dict[str, uuid.UUID] = {}

    def enqueue_and_claim(state: str, max_attempts: int = 5) -> uuid.UUID:
        job_id = one(conn, "select (r.job).id from enqueue_job('listing_flyer', %s::jsonb, %s, 'world',"
                           " p_max_attempts => %s) r", [Jsonb({"n": state}), f"world-{state}", max_attempts])["id"]
        claimed = rows(conn, "select (r.job).id, r.lease_token from claim_job('w1', array['world'], %s) r", [DAY_MS])
        assert [r["id"] for r in claimed] == [job_id]
        ids[state], tokens[state] = job_id, claimed[0]["lease_token"]
        return job_id

    enqueue_and_claim("processing")
    enqueue_and_claim("succeeded")
    conn.execute("select mark_succeeded(%s, %s, 'application/pdf', null, '%%PDF-1.4 world')",
                 [ids["succeeded"], tokens["succeeded"]])
    enqueue_and_claim("failed")
    conn.execute("select mark_failed(%s, %s, 'printer jammed', true, %s, 0)", [ids["failed"], tokens["failed"], DAY_MS])
    enqueue_and_claim("dead", max_attempts=1)
    conn.execute("select mark_failed(%s, %s, 'bad payload', false)", [ids["dead"], tokens["dead"]])
    ids["pending"] = one(conn, "select (r.job).id from enqueue_job('listing_flyer', %s::jsonb, 'world-pending', 'world') r",
                         [Jsonb({"n": "pending"})])["id"]
    states = {r["id"]: r["status"] for r in rows(conn, "select id, status from jobs")}
    assert states == {job_id: state for state, job_id in ids.items()}
    assert rows(conn, "select job_id, data from job_results") == [{"job_id": ids["succeeded"], "data": b"%PDF-1.4 world"}]
    assert MADE_UP not in tokens.values() and len(set(tokens.values())) == 4
    return ids, tokens


@pytest.fixture(scope="module")
def world_url(pg_server: str, template_db: str) -> Iterator[str]:
    """A migrated database of this module's own."""
    with database_copy(pg_server, template_db, "pgqw_h_") as url:
        yield url


@pytest.fixture(scope="module")
def world_state(world_url: str) -> Iterator[World]:
    with psycopg.connect(world_url, autocommit=True) as conn:
        ids, tokens = seed(conn)
        yield World(conn, ids, tokens, digest(conn))


@pytest.fixture
def world(world_state: World) -> World:
    """The world as seeded: seeded again when an earlier test (a failing one) changed it."""
    if digest(world_state.conn) != world_state.digest:
        world_state.ids, world_state.tokens = seed(world_state.conn)
        world_state.digest = digest(world_state.conn)
    return world_state


# ---- the tests -----------------------------------------------------------------------------------

@pytest.mark.parametrize("call", BAD_CALLS)
def test_hostile_input_raises_documented_sqlstate_and_writes_nothing(world: World, call: Call) -> None:
    before = digest(world.conn)
    try:
        world.conn.execute(world.sql(call.sql))
    except psycopg.Error as exc:
        error: psycopg.Error | None = exc
    else:
        error = None
    after = digest(world.conn)
    changed = sorted(k for k in before if before[k] != after[k])
    assert error is not None, f"{call.function} ({call.what}) was accepted; it changed {changed or 'nothing'}"
    assert error.sqlstate == call.expect, (
        f"{call.function} ({call.what}): expected {call.expect}, got {error.sqlstate}: {error.diag.message_primary}")
    assert error.diag.message_primary
    assert after == before


@pytest.mark.parametrize("call", FINE_CALLS)
def test_hostile_but_valid_input_succeeds_and_writes_nothing(world: World, call: Call) -> None:
    before = digest(world.conn)
    result = world.conn.execute(world.sql(call.sql)).fetchone()
    after = digest(world.conn)
    assert result is not None and result[0] == call.result, f"{call.function} ({call.what}) returned {result}"
    assert after == before


def test_hostile_input_cases_cover_every_function(world: World) -> None:
    """Every file in db/functions is called above, and each of them exists in the database."""
    files = {p.stem for p in FUNCTIONS_DIR.glob("*.sql")}
    called = {p.values[0].function for p in BAD_CALLS + FINE_CALLS}
    assert called == files
    in_database = {r["proname"] for r in rows(world.conn,
                   "select proname from pg_proc where pronamespace = current_schema()::regnamespace")}
    assert files <= in_database
    # They only notify, or act on the jobs given (an id of no job is none).
    failing_calls = {p.values[0].function for p in BAD_CALLS} | {"notify_watchers", "notify_due", "settle_jobs",
                                                                 "judge_blocked", "serial_turn", "has_waiters",
                                                                 "prune_finished", "finished_types"}
    # Reads without arguments that can be wrong have only hostile-but-valid calls.
    assert files - failing_calls == {"queue_stats", "report_concurrency", "report_double_runs", "check_schedule_cron",
                                     "list_schedules", "schedule_times", "cron_matches", "list_queues",
                                     "list_worker_status", "list_task_types", "count_jobs_by_status", "get_job_result",
                                     "queue_throughput"}


@pytest.mark.parametrize("function, call", [
    ("enqueue_job", "select enqueue_job(%s::text, '{}', 'k')"),
    ("enqueue_job", "select enqueue_job('t', '{}', %s::text)"),
    ("claim_jobs", "select * from claim_jobs(%s::text, 1)"),
    ("mark_failed", "select * from mark_failed(%s::uuid, gen_random_uuid(), %s::text)"),
    ("release_job", "select * from release_job(%s::uuid, gen_random_uuid(), %s::text)"),
    ("mark_succeeded", "select * from mark_succeeded(%s::uuid, gen_random_uuid(), %s::text, null, 'x')"),
    ("register_worker", "select * from register_worker(%s::text, array['listing_flyer'])"),
    ("stop_worker", "select * from stop_worker(%s::text)"),
])
def test_hostile_input_nul_byte_from_a_client_is_refused_and_writes_nothing(
        world: World, function: str, call: str) -> None:
    """A NUL in a text parameter: psycopg refuses to send it (Postgres text cannot hold it)."""
    params = [world.ids["processing"], "a\x00b"] if call.count("%s") == 2 else ["a\x00b"]
    before = digest(world.conn)
    with pytest.raises(psycopg.DataError, match="NUL"):
        world.conn.execute(call, params)
    assert digest(world.conn) == before


def test_hostile_input_a_job_listed_twice_with_results_succeeds_once_with_its_first_result(
    conn: psycopg.Connection,
) -> None:
    """mark_jobs_succeeded given the same (job, token) twice, each with its own result: one success,
    one result (the first given), not a unique violation of job_results_pkey."""
    job = one(conn, "select (r.job).*, r.created from enqueue_job('t', '{}', 'twice') r")
    token = one(conn, "select (r.job).*, r.lease_token from claim_job('w1') r")["lease_token"]
    done = rows(conn, "select (r.job).*, r.already_recorded from mark_jobs_succeeded(array[%s, %s]::uuid[], array[%s, %s]::uuid[], '[2, 3]') r",
                [job["id"], job["id"], token, token])
    assert [(r["id"], r["status"], r["already_recorded"]) for r in done] == [(job["id"], "succeeded", False)]
    assert rows(conn, "select value from job_results") == [{"value": 2}]


HOSTILE_TEXT = [
    INJECTION,
    "Robert'); drop table job_attempts;--",
    "$$ || pg_sleep(10) || $$",
    "%s %L %I %%",
    "\\x00 \\' \\\\",
    "ناشر 📄 flyer ñ 中文 \u202e rtl",
    "e\u0301 (combining) \u200b (zero width)",
    "x" * 100,
    "€" * 100,
]


def test_hostile_text_round_trips_through_every_text_argument(conn: psycopg.Connection) -> None:
    """Hostile but valid text is data: stored and returned exactly, never run as SQL."""
    for n, text in enumerate(HOSTILE_TEXT):
        key = f"hostile-{n}:{INJECTION.replace(' ', '')}"  # keys are visible ASCII: no spaces
        registered = rows(conn, "select name from register_task_types(%s::jsonb)",
                          [Jsonb([{"name": text, "payload_schema": {}}])])
        assert registered == [{"name": text}]
        job = one(conn, "select (r.job).*, r.created from enqueue_job(%s::text, %s::jsonb, %s::text, %s::text) r",
                  [text, Jsonb({text: [text]}), key, text])
        assert (job["type"], job["payload"], job["idempotency_key"], job["queue"]) == (text, {text: [text]}, key, text)
        worker = text[:200]
        claimed = one(conn, "select (r.job).*, r.lease_token from claim_jobs(%s::text, 5, array[%s::text]) r", [worker, text])
        assert (claimed["id"], claimed["locked_by"]) == (job["id"], worker)
        assert [r["job_id"] for r in rows(conn, "select * from heartbeat(%s::uuid[], %s::uuid[])",
                                          [[job["id"]], [claimed["lease_token"]]])] == [job["id"]]
        report = one(conn, "select * from report_concurrency(%s::text)", [worker])
        assert (report["worker_id"], report["attempts_run"]) == (worker, 1)
        error = text * 200  # longer than the 10,000 characters kept
        failed = one(conn, "select (r.job).*, r.already_recorded from mark_failed(%s, %s, %s::text, false) r",
                     [job["id"], claimed["lease_token"], error])
        assert failed["status"] == "dead" and failed["last_error"] == error[:10_000]
        attempt = one(conn, "select * from report_timeline(%s)", [job["id"]])
        assert attempt["error"] == error[:10_000] and attempt["worker_id"] == worker
    assert one(conn, "select count(*) as n from jobs")["n"] == len(HOSTILE_TEXT)
    assert one(conn, "select count(*) as n from job_attempts")["n"] == len(HOSTILE_TEXT)


def test_hostile_text_in_release_reason_is_kept_as_data(conn: psycopg.Connection) -> None:
    job = one(conn, "select (r.job).*, r.created from enqueue_job('t', '{}', 'k') r")
    token = one(conn, "select (r.job).*, r.lease_token from claim_job('w1') r")["lease_token"]
    released = one(conn, "select (r.job).*, r.already_recorded from release_job(%s, %s, %s::text) r", [job["id"], token, INJECTION * 1000])
    assert released["status"] == "pending"
    attempt = one(conn, "select * from job_attempts where job_id = %s", [job["id"]])
    assert attempt["error"] == f"handed back by worker w1: {INJECTION * 1000}"[:10_000]
    assert (attempt["outcome"], attempt["abandon_reason"]) == ("abandoned", "handed_back")
