"""The schedule functions (db/functions/*schedule*.sql): bad input refused with its own SQLSTATE and
nothing changed; each slot enqueued once, also when two sessions race for it; catch_up; pause and resume;
code against DBA; and the SQL cron check agreeing with croniter, which the scheduler reads them with."""
from __future__ import annotations

import random
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from croniter import croniter

from pgqw import db
from tests.helpers import one, rows


def schedules(conn: psycopg.Connection) -> list[dict[str, Any]]:
    return rows(conn, "select * from schedules order by name")


def jobs(conn: psycopg.Connection) -> list[dict[str, Any]]:
    return rows(conn, "select type, payload, queue, priority, run_at, idempotency_key from jobs"
                      " order by run_at, idempotency_key")


def now(conn: psycopg.Connection) -> datetime:
    return db.server_now(conn)


def made_hours_ago(conn: psycopg.Connection, name: str, hours: float) -> None:
    """As if the schedule had been made (and nothing enqueued) that long ago: a stop that long."""
    conn.execute("update schedules set slots_after = now() - make_interval(secs => %s), last_slot = null"
                 " where name = %s", [hours * 3600, name])


def hourly_slots(conn: psycopg.Connection, hours: int) -> list[datetime]:
    """The slots of '0 * * * *' of the last `hours` hours, oldest first."""
    top = now(conn).replace(minute=0, second=0, microsecond=0)
    return [top - timedelta(hours=n) for n in range(hours - 1, -1, -1)]


# ---- set_schedule and the others: what they write ----

def test_set_schedule_makes_a_dbas_schedule_and_normalises_the_spaces(conn: psycopg.Connection) -> None:
    s = db.set_schedule(conn, name="nightly", task_type="noop", cron="  0  3 *\t* * ", payload={"n": 1},
                        queue="night", priority=5, catch_up="all")
    assert (s.name, s.task_type, s.cron, s.payload, s.queue, s.priority, s.catch_up, s.paused, s.last_slot,
            s.source) == ("nightly", "noop", "0 3 * * *", {"n": 1}, "night", 5, "all", False, None, "sql")
    assert s.slots_after == s.created_at == s.updated_at


def test_set_schedule_again_replaces_it_keeps_the_pause_and_a_new_cron_starts_from_now(
        conn: psycopg.Connection) -> None:
    db.set_schedule(conn, name="s", task_type="noop", cron="@hourly")
    made_hours_ago(conn, "s", 5)
    db.pause_schedule(conn, name="s")
    same_cron = db.set_schedule(conn, name="s", task_type="listing_flyer", cron="@hourly", payload={"title": "x"})
    assert same_cron.paused and same_cron.task_type == "listing_flyer"
    assert same_cron.slots_after < now(conn) - timedelta(hours=4)  # the same cron: its slots go on
    other = db.set_schedule(conn, name="s", task_type="noop", cron="*/5 * * * *")
    assert other.slots_after >= now(conn) - timedelta(seconds=5) and other.catch_up == "latest"


@pytest.mark.parametrize("kwargs, code", [
    ({"cron": "61 * * * *"}, "QC400"),
    ({"cron": "* * * *"}, "QC400"),
    ({"cron": "0 0 30 2 *"}, "QC400"),
    ({"cron": "@reboot"}, "QC400"),
    ({"cron": ""}, "QC400"),
    ({"task_type": "no_such_type"}, "QT422"),
    ({"name": "a b"}, "QV400"),
    ({"name": "-leading-dash"}, "QV400"),
    ({"name": "x" * 101}, "QV400"),
    ({"queue": " "}, "QV400"),
    ({"catch_up": "most"}, "QV400"),
    ({"payload": {"x": "y" * 70_000}}, "QV413"),
])
def test_set_schedule_bad_input_has_its_own_sqlstate_and_changes_nothing(
        conn: psycopg.Connection, kwargs: dict[str, Any], code: str) -> None:
    db.set_schedule(conn, name="keep", task_type="noop", cron="@daily")
    before = schedules(conn)
    args = {"name": "keep", "task_type": "noop", "cron": "@hourly", **kwargs}
    with pytest.raises(psycopg.Error) as exc:
        db.set_schedule(conn, **args)
    assert exc.value.sqlstate == code, exc.value.diag.message_primary
    assert exc.value.diag.message_primary
    assert schedules(conn) == before


def test_set_schedule_cron_error_names_the_field(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as exc:
        db.set_schedule(conn, name="s", task_type="noop", cron="0 25 * * *")
    assert exc.value.sqlstate == "QC400"
    assert "field 2 (hour)" in exc.value.diag.message_primary and "0 to 23" in exc.value.diag.message_primary


@pytest.mark.parametrize("function", ["pause_schedule", "resume_schedule", "delete_schedule"])
def test_unknown_schedule_is_qr404_and_changes_nothing(conn: psycopg.Connection, function: str) -> None:
    db.set_schedule(conn, name="other", task_type="noop", cron="@daily")
    before = schedules(conn)
    with pytest.raises(psycopg.Error) as exc:
        getattr(db, function)(conn, name="ghost")
    assert exc.value.sqlstate == "QR404"
    assert schedules(conn) == before


def test_pause_resume_and_delete(conn: psycopg.Connection) -> None:
    db.set_schedule(conn, name="s", task_type="noop", cron="@hourly")
    made_hours_ago(conn, "s", 3)
    assert db.pause_schedule(conn, name="s").paused
    assert db.pause_schedule(conn, name="s").paused  # idempotent
    # Paused: the slots are refused without a change, not kept for later.
    assert db.enqueue_schedule_slots(conn, name="s", slots=hourly_slots(conn, 2)) == []
    assert jobs(conn) == []
    resumed = db.resume_schedule(conn, name="s")
    assert not resumed.paused and resumed.slots_after >= now(conn) - timedelta(seconds=5)
    # The slots that passed while paused are skipped, whatever catch_up says.
    assert db.enqueue_schedule_slots(conn, name="s", slots=hourly_slots(conn, 2)) == []
    again = db.resume_schedule(conn, name="s")  # resuming a running schedule changes nothing
    assert (again.slots_after, again.updated_at) == (resumed.slots_after, resumed.updated_at)
    assert db.delete_schedule(conn, name="s").name == "s"
    assert schedules(conn) == []


# ---- enqueue_schedule_slots: catch_up, exactly once, refusals ----

@pytest.mark.parametrize("catch_up, expected", [("latest", [0]), ("all", [3, 2, 1, 0]), ("none", [])])
def test_after_a_stop_catch_up_decides_which_missed_slots_get_a_job(
        conn: psycopg.Connection, catch_up: str, expected: list[int]) -> None:
    db.set_schedule(conn, name="s", task_type="noop", cron="0 * * * *", payload={"k": 1}, queue="cron",
                    catch_up=catch_up)
    made_hours_ago(conn, "s", 5.5)
    # Four missed hours, all after the stop began; the latest began at least an hour ago, so it is late
    # whatever the clock says (the hour now would be on time in its first minute).
    slots = hourly_slots(conn, 5)[:-1]
    made = db.enqueue_schedule_slots(conn, name="s", slots=slots)
    top = slots[-1]
    assert [m.slot for m in made] == [top - timedelta(hours=n) for n in sorted(expected, reverse=True)]
    assert all(m.created for m in made)
    assert [(j["type"], j["payload"], j["queue"], j["run_at"]) for j in jobs(conn)] == [
        ("noop", {"k": 1}, "cron", m.slot) for m in made]
    s = db.get_schedule(conn, name="s")
    assert s is not None
    assert s.last_slot == (top if expected else None)
    assert s.slots_after == top  # every slot up to the latest is done, enqueued or skipped
    assert db.enqueue_schedule_slots(conn, name="s", slots=slots) == []  # and never again


def test_catch_up_none_still_enqueues_a_slot_that_is_on_time(conn: psycopg.Connection) -> None:
    db.set_schedule(conn, name="s", task_type="noop", cron="* * * * *", catch_up="none")
    made_hours_ago(conn, "s", 1)
    t = now(conn).replace(second=0, microsecond=0)  # the minute that began at most a minute ago: on time
    made = db.enqueue_schedule_slots(conn, name="s", slots=[t - timedelta(minutes=5), t])
    assert [m.slot for m in made] == [t]


def test_slot_key_is_the_schedule_and_the_slot_in_utc(conn: psycopg.Connection) -> None:
    db.set_schedule(conn, name="report.daily", task_type="noop", cron="0 0 * * *")
    made_hours_ago(conn, "report.daily", 48)
    slot = datetime(2000, 1, 1, tzinfo=timezone.utc) + (now(conn) - datetime(2000, 1, 1, tzinfo=timezone.utc)) // \
        timedelta(days=1) * timedelta(days=1)
    db.enqueue_schedule_slots(conn, name="report.daily", slots=[slot])
    assert [j["idempotency_key"] for j in jobs(conn)] == [
        f"schedule:report.daily@{slot.strftime('%Y-%m-%dT%H:%M:%S')}.000Z"]


def test_a_slot_whose_job_exists_is_not_enqueued_twice_even_when_last_slot_moves_back(
        conn: psycopg.Connection) -> None:
    db.set_schedule(conn, name="s", task_type="noop", cron="0 * * * *", catch_up="all")
    made_hours_ago(conn, "s", 2.5)
    slots = hourly_slots(conn, 2)
    first = db.enqueue_schedule_slots(conn, name="s", slots=slots)
    # A DBA moves the schedule back and changes its payload: the slots' keys still hold their jobs.
    made_hours_ago(conn, "s", 2.5)
    db.set_schedule(conn, name="s", task_type="noop", cron="0 * * * *", payload={"changed": True}, catch_up="all")
    again = db.enqueue_schedule_slots(conn, name="s", slots=slots)
    assert [(m.job_id, m.created) for m in again] == [(m.job_id, False) for m in first]
    assert len(jobs(conn)) == 2


def test_two_sessions_racing_for_the_same_slots_enqueue_each_once(connect) -> None:  # type: ignore[no-untyped-def]
    setup = connect()
    db.set_schedule(setup, name="race", task_type="noop", cron="0 * * * *", catch_up="all")
    made_hours_ago(setup, "race", 5.5)
    slots = hourly_slots(setup, 5)
    sessions = [connect(), connect()]
    barrier = threading.Barrier(len(sessions))
    answers: list[list[db.ScheduledJob]] = [[] for _ in sessions]

    def run(n: int) -> None:
        with sessions[n].transaction():
            barrier.wait()  # both sessions inside a transaction, then both call at once
            answers[n] = db.enqueue_schedule_slots(sessions[n], name="race", slots=slots)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(sessions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    made = sorted((answers[0] + answers[1]), key=lambda m: m.slot)
    assert [m.slot for m in made] == slots  # one session enqueued them all, the other found them done
    assert one(setup, "select count(*) as n from jobs")["n"] == 5


def test_the_database_refuses_a_second_job_for_a_slot_key(conn: psycopg.Connection) -> None:
    """The unique key is the last line: even a hand-made insert cannot give a slot a second job."""
    db.set_schedule(conn, name="s", task_type="noop", cron="0 * * * *")
    made_hours_ago(conn, "s", 1.5)
    slot = hourly_slots(conn, 1)[0]
    (made,) = db.enqueue_schedule_slots(conn, name="s", slots=[slot])
    key = one(conn, "select idempotency_key from jobs where id = %s", [made.job_id])["idempotency_key"]
    with pytest.raises(psycopg.errors.UniqueViolation):
        conn.execute("insert into jobs (type, idempotency_key, max_attempts) values ('noop', %s, 1)", [key])


@pytest.mark.parametrize("slots, code", [
    ("future", "QV400"),
    ("many", "QV400"),
    ("null", "QV400"),
])
def test_enqueue_schedule_slots_refuses_bad_slots_and_changes_nothing(
        conn: psycopg.Connection, slots: str, code: str) -> None:
    db.set_schedule(conn, name="s", task_type="noop", cron="* * * * *", catch_up="all")
    made_hours_ago(conn, "s", 5)
    before = schedules(conn)
    t = now(conn)
    given = {"future": [t - timedelta(minutes=1), t + timedelta(minutes=1)],
             "many": [t - timedelta(minutes=n) for n in range(1, 102)],
             "null": [t - timedelta(minutes=1), None]}[slots]
    with pytest.raises(psycopg.Error) as exc:
        db.enqueue_schedule_slots(conn, name="s", slots=given)  # type: ignore[arg-type]
    assert exc.value.sqlstate == code
    assert schedules(conn) == before and jobs(conn) == []


def test_enqueue_schedule_slots_of_an_unknown_schedule_is_qr404(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as exc:
        db.enqueue_schedule_slots(conn, name="ghost", slots=[now(conn) - timedelta(minutes=1)])
    assert exc.value.sqlstate == "QR404"


# ---- register_schedules: the code's schedules, and a DBA's last word ----

def code(name: str, cron: str = "@hourly", **extra: Any) -> dict[str, Any]:
    return {"name": name, "task_type": "noop", "cron": cron, **extra}


def test_register_schedules_upserts_the_codes_keeps_a_dbas_pause_and_a_dbas_schedule(
        conn: psycopg.Connection) -> None:
    db.register_schedules(conn, task_types=["noop"], schedules=[code("a"), code("b", payload={"x": 1})])
    db.pause_schedule(conn, name="a")
    db.set_schedule(conn, name="b", task_type="noop", cron="@daily")  # the DBA takes b over
    done = db.register_schedules(conn, task_types=["noop"],
                                 schedules=[code("a", "*/5 * * * *", catch_up="none"), code("b")])
    got = {s.name: s for s in done}
    assert (got["a"].cron, got["a"].catch_up, got["a"].paused, got["a"].source) == ("*/5 * * * *", "none", True, "code")
    assert (got["b"].cron, got["b"].source) == ("@daily", "sql")
    # Handed back: deleted, the next registration makes it again from the code.
    db.delete_schedule(conn, name="b")
    db.register_schedules(conn, task_types=["noop"], schedules=[code("a", "*/5 * * * *"), code("b")])
    assert db.get_schedule(conn, name="b").source == "code"  # type: ignore[union-attr]


def test_register_schedules_deletes_only_its_types_code_schedules_the_code_dropped(conn: psycopg.Connection) -> None:
    db.register_task_types(conn, types=[{"name": "other", "payload_schema": {}}])
    db.register_schedules(conn, task_types=["noop"], schedules=[code("gone"), code("kept")])
    db.register_schedules(conn, task_types=["other"], schedules=[{**code("theirs"), "task_type": "other"}])
    db.set_schedule(conn, name="dbas", task_type="noop", cron="@daily")
    db.register_schedules(conn, task_types=["noop"], schedules=[code("kept")])
    assert [s["name"] for s in schedules(conn)] == ["dbas", "kept", "theirs"]


def test_register_schedules_refuses_a_bad_definition_and_changes_nothing(conn: psycopg.Connection) -> None:
    db.register_schedules(conn, task_types=["noop"], schedules=[code("a")])
    before = schedules(conn)
    for bad, sqlstate in [([code("a"), code("b", "0 0 L * *")], "QC400"),
                          ([code("a"), {**code("b"), "task_type": "ghost"}], "QV400"),
                          ([code("a"), code("a")], "QV400"),
                          ([code("a b")], "QV400")]:
        with pytest.raises(psycopg.Error) as exc:
            db.register_schedules(conn, task_types=["noop"], schedules=bad)
        assert exc.value.sqlstate == sqlstate
        assert schedules(conn) == before
    with pytest.raises(psycopg.Error) as exc:
        db.register_schedules(conn, task_types=["ghost"], schedules=[{**code("g"), "task_type": "ghost"}])
    assert exc.value.sqlstate == "QT422"


# ---- the SQL check and croniter agree ----

# Read the same by both.
VALID = [
    "* * * * *", "*/5 * * * *", "0 0 * * *", "30 2 1 1 *", "0 9-17 * * mon-fri", "0 0 * * MON", "0 0 1 jan,jul *",
    "5-10/2 * * * *", "5/10 * * * *", "1,2,3 * * * *", "1-5,*/7 * * * *", "0 0 * * 0", "0 0 * * 7", "0 0 * * 5-7",
    "0 0 * * sun-sat", "0 0 29 2 *", "0 0 31 * *", "0 0 31 2 1", "*/60 * * * *", "0 */24 * * *", "0 0 */31 * *",
    "0 0 * */12 *", "0 0 * * */7", "59 23 31 12 *", " */5  * *\t* * ",
    "@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually", "@HOURLY", " @daily ",
]
# Refused by both.
INVALID = [
    "", " ", "* * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * 32 * *", "* * * 0 *", "* * * 13 *",
    "* * * * 8", "*/0 * * * *", "5-10/0 * * * *", "a * * * *", "1,,2 * * * *", ",1 * * * *", "1- * * * *",
    "-1 * * * *", "*/5-10 * * * *", "0 0 * * monday", "@reboot", "@every 5m", "+1 * * * *", "1.5 * * * *",
    "H * * * *", "? * * * *", "0 0 * * 5L", "2/3-4 * * * *",
]
# croniter takes these; the SQL check refuses them on purpose (its extensions, or a reading that surprises).
STRICTER = [
    "* * * * * *", "* * * * * * *", "0 0 L * *", "0 0 * * 5#2", "0 0 ? * *", "0 0 1W * *", "001 * * * *",
    "10-5 * * * *", "0 0 * mar-jan *", "59-59 * * * *", "0 0 * feb-feb *", "30-30/5 * * * *", "*/61 * * * *", "0 0 1-31/40 * *",
    "0 0 31 2 *", "0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 * * 1/2",
]


def sql_verdicts(conn: psycopg.Connection, expressions: list[str]) -> dict[str, str | None]:
    found = rows(conn, "select e, check_schedule_cron(e) as problem from unnest(%s::text[]) e", [expressions])
    return {r["e"]: r["problem"] for r in found}


def readable(expression: str) -> bool:
    """croniter reads it, and finds a next and a previous slot (stored with single spaces)."""
    stored = " ".join(expression.split())
    if not croniter.is_valid(stored):
        return False
    try:
        it = croniter(stored, datetime(2026, 1, 1, tzinfo=timezone.utc))
        it.get_next(datetime)
        it.get_prev(datetime)
    except (ValueError, KeyError):
        return False
    return True


def test_cron_check_and_croniter_agree_on_the_corpus(conn: psycopg.Connection) -> None:
    verdicts = sql_verdicts(conn, VALID + INVALID + STRICTER)
    assert {e: verdicts[e] for e in VALID if verdicts[e] is not None} == {}
    assert [e for e in VALID if not readable(e)] == []
    assert [e for e in INVALID if verdicts[e] is None] == []
    assert [e for e in INVALID if readable(e)] == []
    assert [e for e in STRICTER if verdicts[e] is None] == []
    assert [e for e in STRICTER if not croniter.is_valid(e)] == []


FULL = [set(range(0, 60)), set(range(0, 24)), set(range(1, 32)), set(range(1, 13)), set(range(0, 7))]


def expanded(expression: str) -> list[set[int]]:
    """croniter's reading of each field, '*' as every value."""
    fields = croniter(" ".join(expression.split())).expanded
    return [FULL[i] if "*" in f else {int(v) % 7 if i == 4 else int(v) for v in f} for i, f in enumerate(fields)]


def reference(expression: str) -> list[set[int]]:
    """What the five fields mean (cron(8)): the test's own reading, to hold croniter's against."""
    low, high = [0, 0, 1, 1, 0], [59, 23, 31, 12, 7]
    names = {3: ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"],
             4: ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]}
    out = []
    for i, field in enumerate(expression.lower().split()):
        values: set[int] = set()
        for item in field.split(","):
            part, _, step = item.partition("/")

            def value(text: str) -> int:
                return names[i].index(text) + (1 if i == 3 else 0) if text.isalpha() else int(text)
            if part == "*":
                a, b = low[i], high[i]
            elif "-" in part:
                a, b = (value(x) for x in part.split("-"))
            else:
                a = value(part)
                b = high[i] if step else a
            values |= set(range(a, b + 1, int(step or 1)))
        out.append({v % 7 for v in values} if i == 4 else values)
    return out


def test_every_expression_the_check_accepts_croniter_reads_as_cron_means(conn: psycopg.Connection) -> None:
    """Random expressions from cron's alphabet: whatever the SQL check lets through, croniter reads, and
    reads field for field as cron(8) defines it."""
    rng = random.Random(20261201)
    atoms = [["*", "0", "5", "7", "30", "59"], ["*", "0", "1", "12", "23"], ["*", "1", "7", "15", "29", "30", "31"],
             ["*", "1", "2", "6", "12", "jan", "feb", "dec"], ["*", "0", "1", "5", "6", "7", "sun", "mon", "fri", "sat"]]

    def item(i: int) -> str:
        text = rng.choice(atoms[i])
        if rng.random() < 0.35:
            text += "-" + rng.choice(atoms[i][1:])
        if rng.random() < 0.3:
            text += "/" + rng.choice(["1", "2", "3", "5", "7", "15", "0"])
        return text

    def field(i: int) -> str:
        return ",".join(item(i) for _ in range(rng.choice([1, 1, 1, 2, 3])))

    candidates = [" ".join(field(i) for i in range(5)) for _ in range(4000)]
    verdicts = sql_verdicts(conn, candidates)
    accepted = [e for e in candidates if verdicts[e] is None]
    assert len(accepted) > 200  # the sample reaches the accepted side
    assert [e for e in accepted if not readable(e)] == []
    assert [e for e in accepted if expanded(e) != reference(e)] == []


def test_roles_worker_schedules_and_api_pauses_through_the_functions_alone(db_url: str, conn: psycopg.Connection) -> None:
    from psycopg.conninfo import make_conninfo

    with psycopg.connect(make_conninfo(db_url, user="pgqw_worker"), autocommit=True) as worker:
        # The deploy defines the code's schedules; a worker login may not (it could make any job so).
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            db.register_schedules(worker, task_types=["noop"], schedules=[code("w", "0 * * * *")])
        db.register_schedules(conn, task_types=["noop"], schedules=[code("w", "0 * * * *")])
        made_hours_ago(conn, "w", 1.5)
        assert [s.name for s in db.schedule_times(worker)] == ["w"]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            db.list_schedules(worker)  # the payloads are not the worker's to read
        (made,) = db.enqueue_schedule_slots(worker, name="w", slots=hourly_slots(conn, 1))
        assert made.created
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            worker.execute("select * from schedules")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            db.pause_schedule(worker, name="w")
    with psycopg.connect(make_conninfo(db_url, user="pgqw_api"), autocommit=True) as api:
        assert db.pause_schedule(api, name="w").paused and not db.resume_schedule(api, name="w").paused
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            db.set_schedule(api, name="x", task_type="noop", cron="@daily")
