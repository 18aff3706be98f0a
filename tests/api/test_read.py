"""GET /api/jobs/:id, GET /api/jobs (keyset pages), GET /api/stats, GET /api/jobs/:id/attempts."""
from __future__ import annotations

import uuid

import psycopg
import pytest
from flask.testing import FlaskClient

from pgqw import db
from pgqw.app.serialize import encode_cursor
from tests.api import states
from tests.helpers import LISTING


def data(r):  # type: ignore[no-untyped-def]
    assert r.status_code == 200, r.get_json()
    return r.get_json()["data"]


# ---- one job ----

def test_get_job_returns_the_job(client: FlaskClient, conn: psycopg.Connection) -> None:
    job = states.pending(conn, priority=4)
    got = data(client.get(f"/api/jobs/{job.id}"))
    assert got["id"] == str(job.id) and got["status"] == "pending" and got["priority"] == 4
    assert got["payload"] == LISTING and got["queue"] == job.queue
    assert got["nextAttemptAt"] == got["createdAt"]


def test_get_job_shows_each_status_with_its_fields(client: FlaskClient, conn: psycopg.Connection) -> None:
    processing = data(client.get(f"/api/jobs/{states.processing(conn, worker_id='w-7').id}"))
    assert (processing["status"], processing["lockedBy"], processing["attempts"]) == ("processing", "w-7", 1)
    assert processing["startedAt"] and processing["nextAttemptAt"] is None and processing["resultUrl"] is None

    failed = data(client.get(f"/api/jobs/{states.failed(conn, error='printer jam').id}"))
    assert (failed["status"], failed["lastError"], failed["lockedBy"]) == ("failed", "printer jam", None)
    assert failed["nextAttemptAt"] > failed["startedAt"]  # due again in an hour

    dead = data(client.get(f"/api/jobs/{states.dead(conn, errors=('a', 'b')).id}"))
    assert (dead["status"], dead["attempts"], dead["lastError"]) == ("dead", 2, "b")
    assert dead["finishedAt"] and dead["nextAttemptAt"] is None and dead["resultUrl"] is None

    done = states.succeeded(conn)
    succeeded = data(client.get(f"/api/jobs/{done.id}"))
    assert succeeded["status"] == "succeeded" and succeeded["finishedAt"]
    assert succeeded["resultUrl"] == f"/api/jobs/{done.id}/result" and succeeded["nextAttemptAt"] is None


def test_get_job_succeeded_after_a_failed_attempt_keeps_that_error_as_last_error(
    client: FlaskClient, conn: psycopg.Connection
) -> None:
    """lastError is the latest failed attempt's error, whatever happened after it: on a succeeded job
    it is an earlier attempt's (the page shows it muted, as such), and the attempts say which."""
    job = states.processing(conn, worker_id="w-1")
    db.mark_failed(conn, job_id=job.id, lease_token=job.lease_token, error="printer jam", retryable=True,
                   base_ms=0, max_jitter_ms=0)
    again = db.claim_job(conn, worker_id="w-2", queues=[job.queue])
    assert again is not None and again.id == job.id
    db.mark_succeeded(conn, job_id=job.id, lease_token=again.lease_token)
    got = data(client.get(f"/api/jobs/{job.id}"))
    assert (got["status"], got["attempts"], got["lastError"]) == ("succeeded", 2, "printer jam")
    attempts = data(client.get(f"/api/jobs/{job.id}/attempts"))
    assert [(a["outcome"], a["error"]) for a in attempts] == [("failed", "printer jam"), ("succeeded", None)]


def test_get_job_unknown_id_returns_404(shared_client: FlaskClient, unchanged: None) -> None:
    r = shared_client.get(f"/api/jobs/{uuid.uuid4()}")
    assert r.status_code == 404
    assert r.get_json()["error"]["code"] == "job_not_found"


@pytest.mark.parametrize(
    "bad_id",
    ["abc", "1", "00000000-0000-0000-0000-00000000000g", "x" * 5000, "%00", "%F0%9F%8F%A0", "'; drop table jobs;--",
     "4765e09c-7b4c-46ee-90f5-19230a0e8955x", "null"],
)
@pytest.mark.parametrize("suffix", ["", "/attempts", "/flyer", "/result"])
def test_get_job_malformed_id_returns_404(
    shared_client: FlaskClient, unchanged: None, bad_id: str, suffix: str
) -> None:
    r = shared_client.get(f"/api/jobs/{bad_id}{suffix}")
    assert r.status_code == 404
    assert r.get_json()["error"]["code"] == "job_not_found"


def test_get_job_accepts_any_uuid_spelling(client: FlaskClient, conn: psycopg.Connection) -> None:
    job = states.pending(conn)
    assert data(client.get(f"/api/jobs/{str(job.id).upper()}"))["id"] == str(job.id)
    assert data(client.get(f"/api/jobs/{job.id.hex}"))["id"] == str(job.id)


def test_head_of_a_job_answers_without_a_body(client: FlaskClient, conn: psycopg.Connection) -> None:
    r = client.head(f"/api/jobs/{states.pending(conn).id}")
    assert r.status_code == 200 and r.data == b""


# ---- the list ----

def ids(page: dict) -> list[str]:
    return [j["id"] for j in page["jobs"]]


def test_list_jobs_newest_first_with_every_field(client: FlaskClient, conn: psycopg.Connection) -> None:
    made = [states.pending(conn) for _ in range(3)]
    page = data(client.get("/api/jobs"))
    assert ids(page) == [str(j.id) for j in reversed(made)]
    assert page["nextCursor"] is None


def test_list_jobs_by_status(client: FlaskClient, conn: psycopg.Connection) -> None:
    states.pending(conn)
    dead = [states.dead(conn) for _ in range(2)]
    states.succeeded(conn)
    page = data(client.get("/api/jobs?status=dead"))
    assert ids(page) == [str(j.id) for j in reversed(dead)]
    assert {j["status"] for j in page["jobs"]} == {"dead"}
    assert data(client.get("/api/jobs?status=processing"))["jobs"] == []


def test_list_jobs_keyset_pages_visit_every_job_once_in_order(client: FlaskClient, conn: psycopg.Connection) -> None:
    """Jobs made in one transaction share created_at; the id breaks the tie, so none is skipped or repeated."""
    with conn.transaction():
        made = [states.pending(conn) for _ in range(5)]
    made += [states.pending(conn) for _ in range(2)]
    assert len({j.created_at for j in made[:5]}) == 1
    expected = [str(j.id) for j in sorted(made, key=lambda j: (j.created_at, j.id), reverse=True)]
    seen, cursor, pages = [], None, 0
    while True:
        page = data(client.get("/api/jobs", query_string={"limit": 2, **({"cursor": cursor} if cursor else {})}))
        seen += ids(page)
        pages += 1
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == expected
    assert pages == 4


def test_list_jobs_has_no_cap_on_what_can_be_browsed(client: FlaskClient, conn: psycopg.Connection) -> None:
    with conn.transaction():
        for n in range(250):
            db.enqueue_job(conn, type="listing_flyer", payload=LISTING, idempotency_key=f"bulk-{n}")
    seen: list[str] = []
    cursor = None
    while True:
        page = data(client.get("/api/jobs", query_string={"limit": 100, **({"cursor": cursor} if cursor else {})}))
        seen += ids(page)
        cursor = page["nextCursor"]
        if not cursor:
            break
    assert len(seen) == len(set(seen)) == 250


def test_list_jobs_last_full_page_has_no_next_cursor(client: FlaskClient, conn: psycopg.Connection) -> None:
    for _ in range(4):
        states.pending(conn)
    first = data(client.get("/api/jobs?limit=2"))
    second = data(client.get(f"/api/jobs?limit=2&cursor={first['nextCursor']}"))
    assert len(second["jobs"]) == 2 and second["nextCursor"] is None


def test_list_jobs_default_limit_is_20(client: FlaskClient, conn: psycopg.Connection) -> None:
    with conn.transaction():
        for _ in range(21):
            states.pending(conn)
    page = data(client.get("/api/jobs"))
    assert len(page["jobs"]) == 20 and page["nextCursor"]


def test_list_jobs_cursor_from_a_job_that_no_longer_exists_still_works(
    client: FlaskClient, conn: psycopg.Connection
) -> None:
    """The cursor is a position (created_at, id), not a row: it survives the row's deletion."""
    older = states.pending(conn)
    gone = states.pending(conn)
    cursor = encode_cursor((gone.created_at, gone.id))
    conn.execute("delete from jobs where id = %s", [gone.id])
    assert ids(data(client.get(f"/api/jobs?cursor={cursor}"))) == [str(older.id)]


@pytest.mark.parametrize(
    "query, bad",
    [
        ("status=done", ["status"]),
        ("status=DEAD", ["status"]),
        ("limit=0", ["limit"]),
        ("limit=101", ["limit"]),
        ("limit=-1", ["limit"]),
        ("limit=ten", ["limit"]),
        ("limit=1.5", ["limit"]),
        ("limit=%EF%BC%95", ["limit"]),  # a fullwidth digit five
        ("limit=" + "9" * 5000, ["limit"]),
        ("cursor=nonsense", ["cursor"]),
        ("cursor=" + "A" * 300, ["cursor"]),
        ("cursor=MjAyNXxub3QtYS11dWlk", ["cursor"]),  # "2025|not-a-uuid"
        ("cursor=bm8gc2VwYXJhdG9y", ["cursor"]),  # "no separator"
        # "2025-01-01T00:00:00|00000000-0000-0000-0000-000000000000": a time without a zone
        ("cursor=MjAyNS0wMS0wMVQwMDowMDowMHwwMDAwMDAwMC0wMDAwLTAwMDAtMDAwMC0wMDAwMDAwMDAwMDA", ["cursor"]),
        ("cursor=%FF%FE", ["cursor"]),
        ("page=2", ["page"]),
        ("status=x&limit=0&cursor=y", ["status", "limit", "cursor"]),
    ],
)
def test_list_jobs_bad_query_returns_400_naming_each_parameter(
    shared_client: FlaskClient, unchanged: None, query: str, bad: list[str]
) -> None:
    r = shared_client.get(f"/api/jobs?{query}")
    assert r.status_code == 400
    error = r.get_json()["error"]
    assert error["code"] == "invalid_query"
    assert [d["field"] for d in error["details"]] == bad


def test_list_jobs_empty_parameters_mean_no_filter(client: FlaskClient, conn: psycopg.Connection) -> None:
    job = states.pending(conn)
    assert ids(data(client.get("/api/jobs?status=&cursor="))) == [str(job.id)]


# ---- counts ----

def test_stats_counts_every_status(client: FlaskClient, conn: psycopg.Connection) -> None:
    assert data(client.get("/api/stats")) == {
        "counts": {"blocked": 0, "pending": 0, "processing": 0, "succeeded": 0, "failed": 0, "dead": 0,
                   "cancelled": 0, "expired": 0},
        "total": 0,
    }
    states.pending(conn)
    states.pending(conn)
    states.processing(conn)
    states.failed(conn)
    states.dead(conn)
    states.succeeded(conn)
    assert data(client.get("/api/stats")) == {
        "counts": {"blocked": 0, "pending": 2, "processing": 1, "succeeded": 1, "failed": 1, "dead": 1,
                   "cancelled": 0, "expired": 0},
        "total": 6,
    }


# ---- attempts ----

def test_attempts_lists_every_attempt_with_worker_times_outcome_and_error(
    client: FlaskClient, conn: psycopg.Connection
) -> None:
    job = states.dead(conn, errors=("renderer timed out", "font missing"))
    attempts = data(client.get(f"/api/jobs/{job.id}/attempts"))
    assert [(a["attempt"], a["workerId"], a["outcome"], a["error"]) for a in attempts] == [
        (1, "worker-1", "failed", "renderer timed out"),
        (2, "worker-2", "failed", "font missing"),
    ]
    for a in attempts:
        assert a["startedAt"] <= a["finishedAt"]


def test_attempts_of_a_running_and_a_succeeded_job(client: FlaskClient, conn: psycopg.Connection) -> None:
    running = data(client.get(f"/api/jobs/{states.processing(conn, worker_id='w-run').id}/attempts"))
    assert [(a["workerId"], a["outcome"], a["finishedAt"], a["error"]) for a in running] == [
        ("w-run", None, None, None)]
    done = data(client.get(f"/api/jobs/{states.succeeded(conn).id}/attempts"))
    assert [(a["outcome"], a["error"]) for a in done] == [("succeeded", None)]


def test_attempts_of_a_job_never_tried_is_an_empty_list(client: FlaskClient, conn: psycopg.Connection) -> None:
    assert data(client.get(f"/api/jobs/{states.pending(conn).id}/attempts")) == []


def test_attempts_of_an_unknown_job_returns_404(shared_client: FlaskClient, unchanged: None) -> None:
    r = shared_client.get(f"/api/jobs/{uuid.uuid4()}/attempts")
    assert r.status_code == 404 and r.get_json()["error"]["code"] == "job_not_found"
