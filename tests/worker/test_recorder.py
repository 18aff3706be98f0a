"""worker/job/recorder.py: results recorded, answered already recorded after a lost reply, or refused."""
from __future__ import annotations

import psycopg
import pytest

from pgqw import db
from pgqw.worker.job.claimer import ClaimRequest, claimer_for
from pgqw.worker.job.completion import Batch
from pgqw.worker.job.recorder import EARLIER_TRY, Failed, Recorder, Refused, Succeeded
from pgqw.worker.job.slots import Running, Slots
from tests.helpers import enqueue, job_row, one, rows
from tests.worker.parts import Direct, LostReply, claimed, log, settings, steal


def _recorder(conn: psycopg.Connection, *, batch: bool = False, lost_reply: bool = False, cap: int = 3,
              claims: dict | None = None):
    """The inline recorder, or the batch completion (batch); claims: the batch's claimer's settings."""
    slots = Slots(cap, clock=lambda: 0.0)
    worker_log, out = log()
    database = (LostReply if lost_reply else Direct)(conn)
    recorder = Recorder(settings(), slots, worker_log, database)
    if not batch:
        return recorder, slots, database, out
    claimer = None
    if claims is not None:
        claimer = claimer_for(claims.pop("batch_claim"))(ClaimRequest("w1"), slots, worker_log, database.once, **claims)
    return Batch(recorder, claimer=claimer), slots, database, out


def test_recorder_success_frees_the_slot_and_logs_it(conn: psycopg.Connection) -> None:
    recorder, slots, _, out = _recorder(conn)
    run, _, _ = slots.take(claimed(conn))
    recorder.record(run, Succeeded(("application/json", {"made": "it"}, None)), 0.5)
    assert job_row(conn, run.job.id)["status"] == "succeeded"
    assert db.get_result(conn, job_id=run.job.id).value == {"made": "it"}
    assert out.lines("success") == [f"{run.tag()} in 0.50s: result application/json  (running 0/3, peak 1)"]
    assert slots.free_count() == 3 and slots.counts["succeeded"] == 1


def test_recorder_success_after_a_lost_reply_is_a_success(conn: psycopg.Connection) -> None:
    recorder, slots, _, out = _recorder(conn, lost_reply=True)
    run, _, _ = slots.take(claimed(conn))
    recorder.record(run, Succeeded(), 0.25)
    assert out.lines("success") == [f"{run.tag()} in 0.25s: {EARLIER_TRY}  (running 0/3, peak 1)"]
    assert out.lines("ignored late result") == [] and out.lines("error") == []
    assert [r["outcome"] for r in rows(conn, "select outcome from job_attempts")] == ["succeeded"]


def test_recorder_result_of_a_job_handed_on_is_ignored(conn: psycopg.Connection) -> None:
    recorder, slots, _, out = _recorder(conn)
    run, _, _ = slots.take(claimed(conn, lease_ms=1))
    steal(conn, run.job)
    recorder.record(run, Succeeded(), 1.0)
    [line] = out.lines("ignored late result")
    assert "is no longer held by its lease" in line and line.endswith("(running 0/3, peak 1)")
    assert job_row(conn, run.job.id)["locked_by"] == "w2" and slots.counts["ignored"] == 1


def test_recorder_batches_json_results_and_records_files_alone(conn: psycopg.Connection) -> None:
    recorder, slots, database, out = _recorder(conn, batch=True)
    json_run, _, _ = slots.take(claimed(conn))
    none_run, _, _ = slots.take(claimed(conn))
    file_run, _, _ = slots.take(claimed(conn))
    recorder.record(json_run, Succeeded(("application/json", [1, 2], None)), 0.1)
    recorder.record(none_run, Succeeded(None), 0.1)
    recorder.record(file_run, Succeeded(("application/pdf", None, b"%PDF-1.4 f")), 0.1)  # one call of its own
    assert recorder.drain(timeout=0) == 2                                                 # one call for both
    assert [op.split(" ")[0] for op in database.ops] == ["mark_succeeded", "mark_jobs_succeeded"]
    assert db.get_result(conn, job_id=json_run.job.id).value == [1, 2]
    assert db.get_result(conn, job_id=none_run.job.id) is None
    assert bytes(db.get_result(conn, job_id=file_run.job.id).data) == b"%PDF-1.4 f"
    assert len(out.lines("success")) == 3


@pytest.mark.parametrize("retryable, max_attempts, event, says", [
    (True, 5, "failed", "; next run "),
    (True, 1, "failed", " → dead"),
    (False, 5, "dead", " (permanent error, not retried)"),
])
def test_recorder_failure_says_what_the_database_decided(conn: psycopg.Connection, retryable: bool,
                                                         max_attempts: int, event: str, says: str) -> None:
    recorder, slots, _, out = _recorder(conn)
    run, _, _ = slots.take(claimed(conn, max_attempts=max_attempts))
    recorder.record(run, Failed("boom", retryable), 0.5)
    [line] = out.lines(event)
    assert line.startswith(f"{run.tag()} in 0.50s: boom{says}") and line.endswith("(running 0/3, peak 1)")
    assert job_row(conn, run.job.id)["last_error"] == "boom"


def test_recorder_failure_after_a_lost_reply_is_recorded_once(conn: psycopg.Connection) -> None:
    recorder, slots, _, out = _recorder(conn, lost_reply=True)
    run, _, _ = slots.take(claimed(conn))
    recorder.record(run, Failed("boom"), 0.5)
    [line] = out.lines("failed")
    assert "next run" in line and EARLIER_TRY in line
    assert [(r["outcome"], r["error"]) for r in rows(conn, "select * from job_attempts")] == [("failed", "boom")]


def test_recorder_failure_recorded_before_a_retry_began_says_so(conn: psycopg.Connection) -> None:
    recorder, slots, _, out = _recorder(conn)
    run, _, _ = slots.take(claimed(conn))
    # The earlier try committed (retry at once), and another worker took the retry before this answer.
    db.mark_failed(conn, job_id=run.job.id, lease_token=run.job.lease_token, error="boom", base_ms=0, max_jitter_ms=0)
    assert db.claim_job(conn, worker_id="w2") is not None
    recorder.record(run, Failed("boom"), 0.5)
    [line] = out.lines("failed")
    assert "retried since (now attempt 2, processing)" in line and out.lines("ignored late result") == []


def test_recorder_refused_outcome_frees_the_slot(conn: psycopg.Connection) -> None:
    recorder, slots, _, out = _recorder(conn)
    run, _, _ = slots.take(claimed(conn, lease_ms=1))
    steal(conn, run.job)
    with pytest.raises(psycopg.Error) as exc:
        db.mark_succeeded(conn, job_id=run.job.id, lease_token=run.job.lease_token)
    assert exc.value.sqlstate == "QL409"
    recorder.record(run, Refused(exc.value), 0.5)
    assert len(out.lines("ignored late result")) == 1 and slots.free_count() == 3


def test_recorder_batch_records_many_successes_in_one_call(conn: psycopg.Connection) -> None:
    recorder, slots, database, out = _recorder(conn, batch=True)
    runs = [slots.take(claimed(conn, lease_ms=lease))[0] for lease in (600_000, 600_000, 1)]
    steal(conn, runs[2].job)
    db.mark_succeeded(conn, job_id=runs[1].job.id, lease_token=runs[1].job.lease_token)  # an earlier call's lost reply
    for run in runs:
        recorder.record(run, Succeeded(), 0.5)
    assert database.ops == [] and slots.free_count() == 0  # waiting for the batch, slots still held
    assert recorder.drain(timeout=0) == 3
    # One call for the batch; the job it did not answer for is asked alone, to say why.
    assert database.ops == ["mark_jobs_succeeded (3 jobs)", f"mark_succeeded {str(runs[2].job.id)[:8]}"]
    success = out.lines("success")
    assert len(success) == 2 and EARLIER_TRY not in success[0] and EARLIER_TRY in success[1]
    assert len(out.lines("ignored late result")) == 1 and slots.free_count() == 3
    assert recorder.drain(timeout=0) == 0


def _claiming_recorder(conn: psycopg.Connection, cap: int, *, batch_claim: bool = True, stopping: bool = False):
    started: list[Running] = []
    recorder, slots, database, out = _recorder(conn, batch=True, cap=cap, claims={
        "batch_claim": batch_claim, "dispatch": started.append, "stopping": lambda: stopping})
    return recorder, slots, database, out, started


@pytest.mark.parametrize("batch_claim", [True, False])
def test_recorder_claims_for_the_slots_its_successes_free_in_their_transaction(conn: psycopg.Connection,
                                                                               batch_claim: bool) -> None:
    recorder, slots, database, out, started = _claiming_recorder(conn, 3, batch_claim=batch_claim)
    runs = [slots.take(claimed(conn))[0] for _ in range(2)]     # 2 of 3 slots held
    waiting = [enqueue(conn).id for _ in range(4)]
    for run in runs:
        recorder.record(run, Succeeded(), 0.1)
    assert recorder.drain(timeout=0) == 2
    # The two successes free two slots, the third was free: three jobs claimed, all in one transaction.
    assert database.ops == ["mark_jobs_succeeded (2 jobs)"]
    assert [r.job.id for r in started] == waiting[:3] and slots.free_count() == 0 and len(slots.held()) == 3
    assert {job_row(conn, r.job.id)["status"] for r in runs} == {"succeeded"}
    assert [job_row(conn, i)["status"] for i in waiting] == ["processing"] * 3 + ["pending"]
    assert len(out.lines("success")) == 2 and len(out.lines("start")) == 3
    # The ended attempts' finish and the started ones' start are the same instant: never more than the cap.
    [(finished,)] = {(a["finished_at"],) for a in rows(conn, "select finished_at from job_attempts where outcome is not null")}
    assert {a["started_at"] for a in rows(conn, "select started_at from job_attempts where outcome is null")} == {finished}
    assert one(conn, "select peak_at_once from report_concurrency('w1')")["peak_at_once"] == 3


def test_recorder_claims_only_for_the_slots_its_recorded_successes_free(conn: psycopg.Connection) -> None:
    """The claim in the successes' statement is promised every slot they might free, but takes only what
    the recorded ones free: a success refused in it (its job was asked to cancel) keeps its slot, so the
    worker never holds more than its cap, and that job then ends cancelled on its own."""
    recorder, slots, database, out, started = _claiming_recorder(conn, 2)
    kept, refused = slots.take(claimed(conn))[0], slots.take(claimed(conn))[0]
    waiting = [enqueue(conn).id for _ in range(2)]
    db.cancel_job(conn, job_id=refused.job.id)
    peaks: list[int] = []
    start = recorder.claimer.start
    recorder.claimer.start = lambda job: (start(job), peaks.append(len(slots.held())))[0]
    recorder.record(kept, Succeeded(), 0.1)
    recorder.record(refused, Succeeded(), 0.1)
    assert recorder.drain(timeout=0) == 2
    assert [r.job.id for r in started] == waiting[:1] and peaks == [2]
    assert job_row(conn, kept.job.id)["status"] == "succeeded"
    assert job_row(conn, refused.job.id)["status"] == "cancelled"
    assert [job_row(conn, i)["status"] for i in waiting] == ["processing", "pending"]
    assert database.ops == ["mark_jobs_succeeded (2 jobs)", f"mark_succeeded {str(refused.job.id)[:8]}",
                            f"mark_cancelled {str(refused.job.id)[:8]}"]
    assert len(slots.held()) == 1 and slots.free_count() == 1 and out.lines("error") == []


def test_recorder_claims_nothing_for_its_freed_slots_while_stopping(conn: psycopg.Connection) -> None:
    recorder, slots, database, _, started = _claiming_recorder(conn, 2, stopping=True)
    run, _, _ = slots.take(claimed(conn))
    enqueue(conn)
    recorder.record(run, Succeeded(), 0.1)
    assert recorder.drain(timeout=0) == 1
    assert started == [] and slots.free_count() == 2 and job_row(conn, run.job.id)["status"] == "succeeded"


@pytest.mark.parametrize("batch_claim", [True, False])
def test_recorder_claim_that_fails_undoes_its_successes_too(conn: psycopg.Connection, batch_claim: bool) -> None:
    """The successes and the claim are one transaction (with batch claims one statement): a claim that
    fails leaves the jobs held and processing, and they are recorded one by one; no slot stays reserved."""
    recorder, slots, database, out, started = _claiming_recorder(conn, 2, batch_claim=batch_claim)
    run, _, _ = slots.take(claimed(conn))
    enqueue(conn)
    # A lease of 0 ms is refused by the claim (QV400), after the successes were recorded in its statement.
    recorder.claimer.request = ClaimRequest("w1", lease_ms=0)
    recorder.record(run, Succeeded(), 0.1)
    assert recorder.drain(timeout=0) == 1
    assert out.lines("error")[0].startswith("mark_jobs_succeeded: QV400")
    assert database.ops == ["mark_jobs_succeeded (1 jobs)", f"mark_succeeded {str(run.job.id)[:8]}"]
    assert job_row(conn, run.job.id)["status"] == "succeeded" and started == []
    assert slots.free_count() == 2
