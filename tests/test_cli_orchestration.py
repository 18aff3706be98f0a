"""pgqw retry / cancel by filter, key-limit, workflow and batch: what they print and change, and bad
input as one line on stderr with a non-zero exit."""
from __future__ import annotations

import uuid
from types import SimpleNamespace

import psycopg
import pytest

from pgqw import db
from pgqw.tools_orchestration import workflow_tree
from tests.helpers import LISTING, enqueue, rows
from tests.test_cli import _pgqw


def _dead(conn: psycopg.Connection, queue: str, error: str = "boom") -> db.Job:
    """A job of `queue` that died on its first attempt with `error`."""
    job = enqueue(conn, queue=queue)
    claimed = db.claim_job(conn, worker_id="w-cli", queues=[queue])
    assert claimed is not None and claimed.id == job.id
    return db.mark_failed(conn, job_id=job.id, lease_token=claimed.lease_token, error=error, retryable=False)


def _statuses(conn: psycopg.Connection) -> dict[str, str]:
    return {str(r["id"]): r["status"] for r in rows(conn, "select id, status from jobs")}


def test_cli_retry_filters_retry_only_the_matching_dead_jobs(db_url: str) -> None:
    env = {"DATABASE_URL": db_url}
    with psycopg.connect(db_url, autocommit=True) as conn:
        a1 = _dead(conn, "a", "HTTP 503 from the mail server")
        a2 = _dead(conn, "a", "invalid address")
        b1 = _dead(conn, "b", "http 503 again")
        waiting = enqueue(conn, queue="a")
    done = _pgqw("retry", "--queue", "a", "--until", "1h", env=env)  # they died just now: none
    assert (done.returncode, done.stdout) == (0, "retried 0 dead jobs\n"), done.stderr
    done = _pgqw("retry", "--type", "listing_flyer", "--error", "http 503", "--since", "1h", env=env)
    assert (done.returncode, done.stdout) == (0, "retried 2 dead jobs\n"), done.stderr
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert _statuses(conn) == {str(a1.id): "pending", str(a2.id): "dead", str(b1.id): "pending",
                                   str(waiting.id): "pending"}
    done = _pgqw("retry", "--queue", "a", env=env)
    assert (done.returncode, done.stdout) == (0, "retried 1 dead job\n"), done.stderr
    done = _pgqw("retry", "--all", env=env)
    assert (done.returncode, done.stdout) == (0, "retried 0 dead jobs\n"), done.stderr


def test_cli_retry_one_job_by_its_id_and_refuses_one_not_dead(db_url: str) -> None:
    env = {"DATABASE_URL": db_url}
    with psycopg.connect(db_url, autocommit=True) as conn:
        dead = _dead(conn, "a")
    done = _pgqw("retry", str(dead.id)[:8], env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"job {dead.id} retried: pending, ")
    again = _pgqw("retry", str(dead.id), env=env)
    assert again.returncode == 2 and again.stdout == ""
    [line] = again.stderr.splitlines()
    assert line.startswith("pgqw retry: ") and "Traceback" not in again.stderr


def test_cli_cancel_filters_cancel_the_matching_jobs_of_the_given_statuses(db_url: str) -> None:
    env = {"DATABASE_URL": db_url}
    with psycopg.connect(db_url, autocommit=True) as conn:
        dead = _dead(conn, "y")  # a dead job is not taken by a filter: only an id cancels it
        y1, y2 = enqueue(conn, queue="y"), enqueue(conn, queue="y")
        other = enqueue(conn, queue="z")
        running = enqueue(conn, queue="r")
        assert db.claim_job(conn, worker_id="w-cli", queues=["r"]) is not None
    done = _pgqw("cancel", "--queue", "y", "--status", "failed,blocked", env=env)
    assert (done.returncode, done.stdout) == (0, "cancelled 0 jobs\n"), done.stderr
    done = _pgqw("cancel", "--queue", "y", "--status", "pending", "--status", "failed", env=env)
    assert (done.returncode, done.stdout) == (0, "cancelled 2 jobs\n"), done.stderr
    done = _pgqw("cancel", "--queue", "r", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "cancelled 1 job (a running one is asked to stop, and ends cancelled when its worker stops)\n"
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert _statuses(conn) == {str(y1.id): "cancelled", str(y2.id): "cancelled", str(other.id): "pending",
                                   str(dead.id): "dead", str(running.id): "processing"}
    done = _pgqw("cancel", str(dead.id), env=env)  # a person gives up on a dead job
    assert (done.returncode, done.stdout) == (0, f"job {dead.id} cancelled\n"), done.stderr


def test_cli_cancel_by_workflow_cancels_its_blocked_jobs(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        parent = enqueue(conn)
        child = enqueue(conn, depends_on=[parent.id])
        assert child.status == "blocked"
    done = _pgqw("cancel", "--workflow", str(parent.id), "--status", "blocked", env={"DATABASE_URL": db_url})
    assert (done.returncode, done.stdout) == (0, "cancelled 1 job\n"), done.stderr
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert _statuses(conn) == {str(parent.id): "pending", str(child.id): "cancelled"}


def test_cli_key_limit_sets_and_removes_the_limit_per_key(db_url: str) -> None:
    env = {"DATABASE_URL": db_url}
    done = _pgqw("key-limit", "tenants", "2", "--create", env=env)
    assert (done.returncode, done.stdout) == (
        0, "queue tenants: running, no limit, at most 2 running per concurrency key\n"), done.stderr
    done = _pgqw("key-limit", "tenants", "none", env=env)
    assert (done.returncode, done.stdout) == (0, "queue tenants: running, no limit, no limit per concurrency key\n"), \
        done.stderr
    with psycopg.connect(db_url) as conn:
        assert rows(conn, "select name, max_running, key_max_running from queues") == [
            {"name": "tenants", "max_running": None, "key_max_running": None}]


def test_cli_workflow_prints_the_jobs_as_a_tree_with_their_statuses(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        a = enqueue(conn)
        b = enqueue(conn, depends_on=[a.id])
        c = enqueue(conn, depends_on=[a.id], run_anyway=True)
        d = enqueue(conn, depends_on=[b.id, c.id])
        e = enqueue(conn, depends_on=[b.id])
    s = {j.id: str(j.id)[:8] for j in (a, b, c, d, e)}
    expected = (f"workflow {a.id}: 5 jobs: 4 blocked, 1 pending\n"
                f"{s[a.id]}  listing_flyer  pending\n"
                f"|-- {s[b.id]}  listing_flyer  blocked\n"
                f"|   |-- {s[d.id]}  listing_flyer  blocked  (also after {s[c.id]})\n"
                f"|   `-- {s[e.id]}  listing_flyer  blocked\n"
                f"`-- {s[c.id]}  listing_flyer  blocked  (run anyway)\n")
    for given in (str(a.id), s[a.id], str(d.id)):  # the workflow's id, or any of its jobs' ids
        done = _pgqw("workflow", given, env={"DATABASE_URL": db_url})
        assert (done.returncode, done.stdout) == (0, expected), done.stderr


def test_workflow_tree_names_parents_outside_the_workflow() -> None:
    outside, root, child = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()

    def job(job_id: uuid.UUID, status: str, depends_on: list[uuid.UUID], **more: object) -> SimpleNamespace:
        return SimpleNamespace(id=job_id, type="t", status=status, attempts=1, max_attempts=5, last_error=None,
                               depends_on=depends_on, run_anyway=False, run_anyway_for=[], **more)

    dead = job(child, "cancelled", [root, outside])
    dead.last_error = "parent   was\ncancelled " + "x" * 80
    lines = workflow_tree([job(root, "dead", []), dead])
    assert lines[0] == f"{str(root)[:8]}  t  dead  attempt 1/5"
    assert lines[1].startswith(f"`-- {str(child)[:8]}  t  cancelled: parent was cancelled xxx")
    assert lines[1].endswith(f"...  (after {str(outside)[:8]} (outside this workflow))")


def test_cli_batch_prints_its_counts(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        made = db.enqueue_batch(conn, jobs=[{"type": "listing_flyer", "payload": dict(LISTING),
                                             "idempotency_key": f"b-{n}"} for n in range(3)],
                                callback={"type": "listing_flyer", "payload": dict(LISTING)})
        batch_id = made[0].batch_id
        db.cancel_job(conn, job_id=made[0].id)
    done = _pgqw("batch", str(batch_id), env={"DATABASE_URL": db_url})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"batch {batch_id}: 3 jobs, 1 finished; created ")
    assert lines[0].endswith(", not finished")
    counts = {parts[0]: int(parts[1]) for parts in (line.split() for line in lines[1:]) if parts[-1].isdigit()}
    assert counts == {"blocked": 0, "pending": 2, "processing": 0, "succeeded": 0, "failed": 0, "dead": 0,
                      "cancelled": 1, "expired": 0}
    with psycopg.connect(db_url, autocommit=True) as conn:
        for job in made[1:]:
            db.cancel_job(conn, job_id=job.id)
    done = _pgqw("batch", str(batch_id), env={"DATABASE_URL": db_url})
    assert done.returncode == 0, done.stderr
    assert ", 3 finished; created " in done.stdout and ", finished " in done.stdout.splitlines()[0]
    assert done.stdout.splitlines()[-1].startswith("callback job ")


@pytest.mark.parametrize("args, message", [
    (["retry"], "at least one filter (--type, --queue"),
    (["cancel"], "at least one filter (--type, --queue"),
    (["retry", "--all", "--queue", "a"], "--all takes no filters (got --queue)"),
    (["cancel", "0123abcd", "--queue", "a"], "a job id or filters, not both (got --queue)"),
    (["cancel", "0123abcd", "--all"], "a job id or filters, not both (got --all)"),
    (["cancel", "0123abcd", "--status", "pending"], "a job id or filters, not both (got --status)"),
    (["retry", "--since", "soon"], "must be a time ago"),
    (["retry", "--until", "2026-13-01"], "or an ISO 8601 time"),
    (["retry", "--workflow", "nope"], "must be a UUID"),
    (["cancel", "--batch", "12"], "must be a UUID"),
    (["cancel", "--queue", "a", "--status", "succeeded"], "--status takes blocked, pending, failed, processing"),
    (["cancel", "--queue", "a", "--status", ","], "--status takes"),
    (["cancel", "--since", "1h", "--until", "2h"], "must be before until"),
    (["retry", "0123abcd"], "no job with an id starting 0123abcd"),
    (["key-limit", "q", "0"], "at least 1, or none"),
    (["key-limit", "q", "many"], "at least 1, or none"),
    (["key-limit", "q", "٣"], "at least 1, or none"),
    (["key-limit", "nosuchqueue", "3"], "nosuchqueue"),
    (["key-limit", "q"], "the following arguments are required"),
    (["batch", "not-a-uuid"], "must be a UUID"),
    (["batch", "3c5a2a6e-0000-4000-8000-000000000001"], "batch 3c5a2a6e-0000-4000-8000-000000000001 does not exist"),
    (["workflow", "3c5a2a6e-0000-4000-8000-000000000001"], "workflow 3c5a2a6e-0000-4000-8000-000000000001 has no job"),
    (["workflow", "zz"], "not a job id"),
])
def test_cli_orchestration_bad_input_is_one_line_and_nonzero(args: list[str], message: str, db_url: str) -> None:
    done = _pgqw(*args, env={"DATABASE_URL": db_url})
    assert done.returncode != 0 and done.stdout == ""
    assert "Traceback" not in done.stderr
    assert message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
