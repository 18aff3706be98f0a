"""The lease token in the worker: the token a claim returned is what every later call for the attempt
presents (heartbeat, success, failure, hand-back), and an attempt whose token no longer holds its job
is found lost and has its result refused, in words that name the lease, not a worker."""
from __future__ import annotations

import dataclasses
import hashlib
import uuid

import psycopg

from pgqw import db
from pgqw.worker.connection.heartbeat import Heartbeat
from pgqw.worker.job.completion import Batch
from pgqw.worker.job.recorder import Failed, Recorder, Succeeded
from pgqw.worker.job.slots import Running, Slots
from pgqw.worker.shutdown import Shutdown
from tests.helpers import job_row, one
from tests.worker.parts import Direct, Recording, claimed, log, settings, steal


def _parts(conn: psycopg.Connection, database: Direct):
    """A heartbeat, a recorder and a shutdown sharing one worker's slots, log and database."""
    slots = Slots(5, clock=lambda: 0.0)
    worker_log, out = log()
    s = settings()
    beat = Heartbeat(s, slots, worker_log, database.once, clock=lambda: 0.0)
    recorder = Recorder(s, slots, worker_log, database)
    shutdown = Shutdown(s, slots, worker_log, database, clock=lambda: 0.0)
    return beat, recorder, shutdown, slots, out


def _tokens(sent: list, function: str) -> dict[uuid.UUID, uuid.UUID]:
    """job id → lease token, of every call of this stored function."""
    found: dict[uuid.UUID, uuid.UUID] = {}
    for name, params in sent:
        if name == function and "job_ids" in params:
            found.update(zip(params["job_ids"], params["tokens"]))
        elif name == function and "ids" in params:
            found.update(zip(params["ids"], params["tokens"]))
        elif name == function:
            found[params["job_id"]] = params["token"]
    return found


def test_lease_token_of_the_running_is_what_heartbeat_recorder_and_shutdown_send(conn: psycopg.Connection) -> None:
    database = Recording(conn)
    beat, recorder, shutdown, slots, _ = _parts(conn, database)
    runs: list[Running] = [slots.take(claimed(conn))[0] for _ in range(4)]
    tokens = {r.job.id: r.job.lease_token for r in runs}
    assert len(set(tokens.values())) == 4 and all(isinstance(t, uuid.UUID) for t in tokens.values())

    assert beat.beat() == []
    assert _tokens(database.sent, "heartbeat") == tokens  # every held job, each with its own token
    succeeded, failed, batched, handed_back = runs
    recorder.record(succeeded, Succeeded(), 0.1)
    recorder.record(failed, Failed("boom"), 0.1)
    shutdown.hand_back(handed_back)
    batch_recorder = Batch(Recorder(settings(), slots, log()[0], database))
    batch_recorder.record(batched, Succeeded(("application/json", [1], None)), 0.1)
    assert batch_recorder.drain(timeout=0) == 1

    assert _tokens(database.sent, "mark_succeeded") == {succeeded.job.id: tokens[succeeded.job.id]}
    assert _tokens(database.sent, "mark_failed") == {failed.job.id: tokens[failed.job.id]}
    assert _tokens(database.sent, "mark_jobs_succeeded") == {batched.job.id: tokens[batched.job.id]}
    assert _tokens(database.sent, "release_job") == {handed_back.job.id: tokens[handed_back.job.id]}
    # Nothing sent names the worker for an attempt: the token alone speaks for it.
    assert all("worker_id" not in params for name, params in database.sent if name != "claim_job")
    assert [job_row(conn, r.job.id)["status"] for r in runs] == ["succeeded", "failed", "succeeded", "pending"]
    # The database keeps only the token's SHA-256, never the token.
    for job_id, token in tokens.items():
        row = one(conn, "select lease_token_hash from job_attempts where job_id = %s and attempt = 1", [job_id])
        assert bytes(row["lease_token_hash"]) == hashlib.sha256(token.bytes).digest()


def test_lease_token_not_returned_by_the_claim_is_lost_and_refused(conn: psycopg.Connection) -> None:
    """A Running with the right job, worker and attempt but not the token its claim returned neither
    extends the lease nor records a result; the claim's own token still does."""
    beat, recorder, shutdown, slots, out = _parts(conn, Direct(conn))
    job = claimed(conn, lease_ms=600_000)
    before = job_row(conn, job.id)
    forged, _, _ = slots.take(dataclasses.replace(job, lease_token=uuid.uuid4()))
    assert beat.beat() == [forged] and forged.lost
    recorder.record(forged, Succeeded(("application/json", {"forged": True}, None)), 0.1)
    [line] = out.lines("ignored late result")
    assert f"this lease token holds no attempt of job {job.id}" in line
    assert job_row(conn, job.id) == before  # still processing, its lease not extended
    assert db.get_result(conn, job_id=job.id) is None
    assert db.mark_succeeded(conn, job_id=job.id, lease_token=job.lease_token).status == "succeeded"


def test_lease_token_of_an_attempt_handed_on_finds_the_job_lost_and_its_success_refused(
        conn: psycopg.Connection) -> None:
    beat, recorder, _, slots, out = _parts(conn, Direct(conn))
    run, _, _ = slots.take(claimed(conn, lease_ms=1))
    thief = steal(conn, run.job)  # swept and claimed again by w2, with a token of its own
    assert thief.lease_token != run.job.lease_token

    assert beat.beat() == [run] and run.lost
    [lost] = out.lines("lost")
    assert lost == (f"{run.tag()}: no longer held by its lease (it expired and a sweep handed the job on); "
                    "its result will be ignored")
    recorder.record(run, Succeeded(("application/json", {"late": True}, None)), 1.0)
    [ignored] = out.lines("ignored late result")
    assert ignored == (f"{run.tag()}: job {run.job.id} attempt 1 is no longer held by its lease; this result is "
                       "ignored  (running 0/5, peak 1)")
    for line in (lost, ignored):
        assert "w1" not in line and "w2" not in line and "worker" not in line
    assert slots.counts["lost"] == 1 and slots.counts["ignored"] == 1 and slots.free_count() == 5

    row = job_row(conn, run.job.id)
    assert (row["status"], row["attempts"], row["locked_by"]) == ("processing", 2, "w2")
    assert db.get_result(conn, job_id=run.job.id) is None
    # The thief's attempt is untouched and still its own to extend and finish.
    assert [lease.job_id for lease in db.heartbeat(conn, leases=[(thief.id, thief.lease_token)])] == [thief.id]
    assert db.mark_succeeded(conn, job_id=thief.id, lease_token=thief.lease_token).attempts == 2
