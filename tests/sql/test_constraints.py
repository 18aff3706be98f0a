"""Each CHECK and unique constraint refuses the impossible row it exists for, even from raw SQL."""
from __future__ import annotations

import psycopg
import pytest

from tests.helpers import enqueue, one, rows
from tests.sql.queue_state import snapshot

INSERT = (
    "insert into jobs (type, payload, status, attempts, max_attempts, last_error, idempotency_key,"
    " locked_by, started_at, lease_expires_at, finished_at) values"
)
RESULT = "insert into job_results (job_id, content_type, value, data) select id,"
TASK_TYPE = "insert into task_types (name, payload_schema, queue, code_queue, max_attempts, code_max_attempts,"\
    " backoff_base_ms, code_backoff_max_jitter_ms, lease_ms, code_lease_ms) values"
WORKER = "insert into workers (id, last_seen_at, expires_at) values"
# An attempt row with a lease token's hash, as a claim makes it, so only the constraint under test fails.
ATTEMPT = "insert into job_attempts (lease_token_hash, job_id, attempt, worker_id, started_at"
HASH = "sha256(uuid_send(gen_random_uuid()))"


@pytest.mark.parametrize(
    "statement, constraint",
    [
        (f"{INSERT} ('t', '{{}}', 'waiting', 0, 5, null, 'c1', null, null, null, null)", "jobs_status_check"),
        (f"{INSERT} ('t', '{{}}', 'pending', 6, 5, null, 'c1', null, null, null, null)", "jobs_attempts_range"),
        (f"{INSERT} ('t', '{{}}', 'pending', -1, 5, null, 'c1', null, null, null, null)", "jobs_attempts_range"),
        (f"{INSERT} ('t', '{{}}', 'pending', 0, 0, null, 'c1', null, null, null, null)", "jobs_max_attempts_positive"),
        (f"{INSERT} ('t', '{{}}', 'processing', 1, 5, null, 'c1', null, now(), now(), null)",
         "jobs_processing_is_locked"),
        (f"{INSERT} ('t', '{{}}', 'processing', 1, 5, null, 'c1', 'w1', null, now(), null)",
         "jobs_processing_is_locked"),
        (f"{INSERT} ('t', '{{}}', 'pending', 0, 5, null, 'c1', 'w1', null, null, null)",
         "jobs_locked_only_when_processing"),
        (f"{INSERT} ('t', '{{}}', 'failed', 1, 5, null, 'c1', null, null, null, null)", "jobs_failure_has_error"),
        (f"{INSERT} ('t', '{{}}', 'dead', 5, 5, null, 'c1', null, null, null, now())", "jobs_failure_has_error"),
        (f"{INSERT} ('t', '{{}}', 'succeeded', 1, 5, null, 'c1', null, null, null, null)",
         "jobs_finished_iff_final"),
        (f"{INSERT} ('t', '{{}}', 'succeeded', 0, 5, null, 'c1', null, null, null, now())",
         "jobs_succeeded_was_attempted"),
        (f"{INSERT} ('', '{{}}', 'pending', 0, 5, null, 'c1', null, null, null, null)", "jobs_type_length"),
        (f"{INSERT} ('t', '[1]', 'pending', 0, 5, null, 'c1', null, null, null, null)", "jobs_payload_is_object"),
        (f"{INSERT} ('t', '{{}}', 'pending', 0, 5, null, 'existing', null, null, null, null)",
         "jobs_idempotency_key_key"),
        ("update jobs set attempts = max_attempts + 1", "jobs_attempts_range"),
        (f"{ATTEMPT}) select {HASH}, id, 0, 'w', now() from jobs", "job_attempts_attempt_positive"),
        (f"{ATTEMPT}, outcome) select {HASH}, id, 1, 'w', now(), 'succeeded' from jobs",
         "job_attempts_finished_iff_outcome"),
        (f"{ATTEMPT}, finished_at, outcome) select {HASH}, id, 1, 'w', now(), now(), 'failed' from jobs",
         "job_attempts_failure_has_error"),
        (f"{ATTEMPT}, finished_at, outcome) select {HASH}, id, 1, 'w', now(), now() - interval '1 s', 'succeeded'"
         " from jobs", "job_attempts_finish_after_start"),
        (f"{ATTEMPT}, finished_at, outcome, error) select {HASH}, id, 1, 'w', now(), now(), 'exploded', 'x' from jobs",
         "job_attempts_outcome_check"),
        (f"{ATTEMPT}) values ({HASH}, '00000000-0000-0000-0000-000000000000', 1, 'w', now())",
         "job_attempts_job_id_fkey"),
        (f"{ATTEMPT}, finished_at, outcome, error) select {HASH}, id, 1, 'w', now(), now(), 'abandoned', 'x' from jobs",
         "job_attempts_abandon_reason_check"),
        (f"{ATTEMPT}, abandon_reason) select {HASH}, id, 1, 'w', now(), 'lease_expired' from jobs",
         "job_attempts_abandon_reason_check"),
        # An attempt made now holds its lease token's SHA-256 (32 bytes) while it is open.
        ("insert into job_attempts (job_id, attempt, worker_id, started_at) select id, 1, 'w', now() from jobs",
         "job_attempts_lease_token_hash_sha256"),
        ("insert into job_attempts (job_id, attempt, worker_id, started_at, lease_token_hash)"
         " select id, 1, 'w', now(), uuid_send(gen_random_uuid()) from jobs", "job_attempts_lease_token_hash_sha256"),
        ("insert into job_attempts (job_id, attempt, worker_id, started_at, finished_at, outcome, lease_token_hash)"
         " select id, 1, 'w', now(), now(), 'succeeded', '' from jobs", "job_attempts_lease_token_hash_sha256"),
        (f"{RESULT} 'application/json', null, null from jobs", "job_results_one_kind"),
        (f"{RESULT} 'application/json', '1', '%PDF-1' from jobs", "job_results_one_kind"),
        (f"{RESULT} 'text/plain', '\"hello\"', null from jobs", "job_results_json_is_json"),
        (f"{RESULT} 'pdf', null, '%PDF-1' from jobs", "job_results_content_type_form"),
        (f"{RESULT} 'application/ pdf', null, '%PDF-1' from jobs", "job_results_content_type_form"),
        (f"{RESULT} repeat('a', 200) || '/pdf', null, '%PDF-1' from jobs", "job_results_content_type_form"),
        ("insert into job_results (job_id, content_type, value) "
         "values ('00000000-0000-0000-0000-000000000000', 'application/json', '1')", "job_results_job_id_fkey"),
        (f"{TASK_TYPE} ('', '{{}}', null, null, null, null, null, null, null, null)", "task_types_name_length"),
        (f"{TASK_TYPE} ('   ', '{{}}', null, null, null, null, null, null, null, null)", "task_types_name_length"),
        (f"{TASK_TYPE} (repeat('t', 101), '{{}}', null, null, null, null, null, null, null, null)",
         "task_types_name_length"),
        (f"{TASK_TYPE} ('t', '[]', null, null, null, null, null, null, null, null)", "task_types_schema_is_object"),
        (f"{TASK_TYPE} ('t', '{{}}', '', null, null, null, null, null, null, null)", "task_types_queue_length"),
        (f"{TASK_TYPE} ('t', '{{}}', null, '', null, null, null, null, null, null)", "task_types_queue_length"),
        (f"{TASK_TYPE} ('t', '{{}}', null, null, 0, null, null, null, null, null)", "task_types_max_attempts_range"),
        (f"{TASK_TYPE} ('t', '{{}}', null, null, null, 1001, null, null, null, null)",
         "task_types_max_attempts_range"),
        (f"{TASK_TYPE} ('t', '{{}}', null, null, null, null, -1, null, null, null)", "task_types_backoff_range"),
        (f"{TASK_TYPE} ('t', '{{}}', null, null, null, null, null, -1, null, null)", "task_types_backoff_range"),
        (f"{TASK_TYPE} ('t', '{{}}', null, null, null, null, null, null, 0, null)", "task_types_lease_range"),
        (f"{TASK_TYPE} ('t', '{{}}', null, null, null, null, null, null, null, 0)", "task_types_lease_range"),
        (f"{TASK_TYPE} ('listing_flyer', '{{}}', null, null, null, null, null, null, null, null)",
         "task_types_pkey"),
        (f"{WORKER} ('', now(), now())", "workers_id_length"),
        (f"{WORKER} ('w1', now(), now() - interval '1 s')", "workers_expires_after_seen"),
        ("insert into queue_settings (id) values (false)", "queue_settings_single_row"),
        ("update queue_settings set max_attempts = 0", "queue_settings_max_attempts_range"),
    ],
)
def test_constraint_refuses_impossible_row(conn: psycopg.Connection, statement: str, constraint: str) -> None:
    enqueue(conn, "existing")
    before = snapshot(conn)
    with pytest.raises(psycopg.errors.IntegrityError) as exc:
        conn.execute(statement)
    assert exc.value.diag.constraint_name == constraint
    assert snapshot(conn) == before


def test_constraint_one_attempt_row_per_number(conn: psycopg.Connection) -> None:
    enqueue(conn)
    conn.execute("select (r.job).*, r.lease_token from claim_job('w1') r")
    with pytest.raises(psycopg.errors.UniqueViolation) as exc:
        conn.execute("insert into job_attempts (job_id, attempt, worker_id, started_at, lease_token_hash)"
                     " select job_id, attempt, 'w2', now(), lease_token_hash from job_attempts")
    assert exc.value.diag.constraint_name == "job_attempts_job_id_attempt_key"


def test_constraint_one_result_per_job(conn: psycopg.Connection) -> None:
    """The flyers table's primary key became job_results': one result per job, of whatever kind."""
    enqueue(conn)
    conn.execute("insert into job_results (job_id, content_type, data)"
                 " select id, 'application/pdf', '%PDF-1' from jobs")
    before = snapshot(conn)
    for other in ("'application/pdf', null, '%PDF-2'", "'application/json', '{}', null"):
        with pytest.raises(psycopg.errors.UniqueViolation) as exc:
            conn.execute(f"insert into job_results (job_id, content_type, value, data) select id, {other} from jobs")
        assert exc.value.diag.constraint_name == "job_results_pkey"
    assert snapshot(conn) == before


def test_constraint_a_jobs_result_goes_with_it(conn: psycopg.Connection) -> None:
    job = enqueue(conn)
    conn.execute("insert into job_results (job_id, content_type, value) values (%s, 'application/json', '1')",
                 [job.id])
    conn.execute("delete from jobs where id = %s", [job.id])
    assert rows(conn, "select * from job_results") == []


def test_constraint_the_schema_has_no_demo_object(conn: psycopg.Connection) -> None:
    """A flyer is a listing_flyer job's PDF result, in job_results like any result: the demo's flyers
    view is gone (0018), and nothing in the schema names it."""
    assert one(conn, "select to_regclass('flyers') as v") == {"v": None}
    assert rows(conn, "select p.proname from pg_proc p where p.pronamespace = current_schema()::regnamespace"
                      " and p.prosrc ~* 'flyers'") == []


def test_constraint_claim_cannot_pass_max_attempts(conn: psycopg.Connection) -> None:
    """A row forced back to pending with no tries left is neither claimed past its maximum nor
    allowed to block the queue: claim skips it and takes the next job."""
    job = enqueue(conn, max_attempts=1)
    conn.execute("select (r.job).*, r.lease_token from claim_job('w1') r")
    conn.execute("update jobs set status = 'pending', locked_by = null, lease_expires_at = null where id = %s",
                 [job.id])
    other = enqueue(conn)
    assert rows(conn, "select (r.job).id from claim_job('w2') r") == [{"id": other.id}]
    with pytest.raises(psycopg.errors.CheckViolation) as exc:
        conn.execute("update jobs set attempts = attempts + 1 where id = %s", [job.id])
    assert exc.value.diag.constraint_name == "jobs_attempts_range"


def test_constraint_lease_token_hash_is_not_validated_for_attempts_made_before_it(conn: psycopg.Connection) -> None:
    """Attempts made before lease tokens have no hash: the constraint is NOT VALID (old rows are not
    checked), an ended attempt may have none, and an open one without a hash can still be ended (by
    the sweep), since a check holds for every row an update writes."""
    assert rows(conn, "select convalidated from pg_constraint where conname = 'job_attempts_lease_token_hash_sha256'") \
        == [{"convalidated": False}]
    job = enqueue(conn)
    definition = one(conn, "select pg_get_constraintdef(oid) as d from pg_constraint"
                           " where conname = 'job_attempts_lease_token_hash_sha256'")["d"]
    assert definition.endswith("NOT VALID")
    # An attempt as 0004 made it: the constraint set aside (as it was not there yet) to write it.
    conn.execute("alter table job_attempts drop constraint job_attempts_lease_token_hash_sha256")
    conn.execute("update jobs set status = 'processing', attempts = 1, started_at = now(), locked_by = 'w-old',"
                 " lease_expires_at = now() - interval '1 minute' where id = %s", [job.id])
    conn.execute("insert into job_attempts (job_id, attempt, worker_id, started_at) values (%s, 1, 'w-old', now())",
                 [job.id])
    conn.execute(f"alter table job_attempts add constraint job_attempts_lease_token_hash_sha256 {definition}")
    assert [s["status"] for s in rows(conn, "select * from sweep_stuck_at(now())")] == ["pending"]
    assert rows(conn, "select outcome, lease_token_hash from job_attempts") == [
        {"outcome": "abandoned", "lease_token_hash": None}]
