"""pgqw.contrib.django in a tiny Django project (tests/contrib/djangoproject: settings.py, manage.py and the
app `shop`, whose tasks write a Receipt through the ORM): `manage.py migrate`, `pgqw_migrate` and
`pgqw_worker` run as real processes against the real PostgreSQL, each test on a database of its own."""
from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb

from pgqw.launch import Child, child_env, wait_for
from pgqw.migrate import migration_files
from pgqw.worker.log import describe_database
from tests.helpers import SCHEMA

PROJECT = Path(__file__).parent / "djangoproject"
ORM = "shop-orm"  # the application_name of Django's own connections (settings.py's OPTIONS)


def _env(db: str, settings: str | None = None, **extra: str) -> dict[str, str]:
    env = child_env({"PGQW_SCHEMA": SCHEMA, "SHOP_DATABASE": db, **extra})
    env.pop("DJANGO_SETTINGS_MODULE", None)
    if settings is not None:
        env["DJANGO_SETTINGS_MODULE"] = settings
    return env


def manage(db: str, *args: str, settings: str | None = None, **extra: str) -> subprocess.CompletedProcess[str]:
    """`python manage.py ARGS` in the project, to its end."""
    return subprocess.run([sys.executable, "manage.py", *args], check=False, cwd=PROJECT, env=_env(db, settings, **extra),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)


def ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture
def workers() -> Iterator[list[Child]]:
    """`manage.py pgqw_worker` processes a test starts; any still running at its end is stopped."""
    started: list[Child] = []
    yield started
    for child in started:
        if child.alive():
            child.stop()


def start_worker(workers: list[Child], db: str, *args: str, **extra: str) -> Child:
    process = subprocess.Popen([sys.executable, "manage.py", "pgqw_worker", *args], cwd=PROJECT,
                               env=_env(db, **extra), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
    child = Child("pgqw_worker", "worker", process, None)
    workers.append(child)
    return child.wait_ready(timeout=60)


@pytest.fixture
def shop_db(empty_db_url: str) -> str:
    """An empty database after `manage.py migrate` (Django's tables, the shop's, the queue) and
    `manage.py pgqw_migrate` (the shop's task types registered)."""
    ok(manage(empty_db_url, "migrate"))
    ok(manage(empty_db_url, "pgqw_migrate"))
    return empty_db_url


def enqueue(conn: psycopg.Connection, task_type: str, payload: dict) -> uuid.UUID:
    row = conn.execute(f"select (e.job).id from {SCHEMA}.enqueue_job(p_type => %s, p_payload => %s,"
                       " p_idempotency_key => %s) e",
                       [task_type, Jsonb(payload), f"test-{uuid.uuid4()}"]).fetchone()
    assert row is not None
    return row[0]


def finished(conn: psycopg.Connection, job_id: uuid.UUID, worker: Child, timeout: float = 30) -> dict:
    """The job once it reached a final state (polled with a deadline), with its result."""
    def final() -> dict | None:
        row = conn.execute(f"select j.status, j.attempts, j.last_error, r.value from {SCHEMA}.jobs j"
                           f" left join {SCHEMA}.job_results r on r.job_id = j.id where j.id = %s", [job_id]).fetchone()
        if row is None or row[0] not in ("succeeded", "dead", "cancelled"):
            return None
        return {"status": row[0], "attempts": row[1], "last_error": row[2], "result": row[3]}

    found = wait_for(final, timeout=timeout, what=lambda: f"job {job_id} to finish:\n{worker.tail()}")
    assert found is not None
    return found


def orm_backends(conn: psycopg.Connection) -> list[int]:
    """The backend pids of Django's own connections to this database."""
    return [r[0] for r in conn.execute("select pid from pg_stat_activity where datname = current_database()"
                                       " and application_name = %s", [ORM])]


def stop_cleanly(worker: Child) -> None:
    code = worker.stop()
    assert (code, worker.killed) == (0, False), worker.tail()


# ----------------------------------------------------------------------------- the conninfo


def test_conninfo_from_settings_takes_name_user_password_host_port_and_libpq_options() -> None:
    from pgqw.contrib.django.conf import conninfo_from_settings

    found = conninfo_from_settings({
        "ENGINE": "django.db.backends.postgresql", "NAME": "shop", "USER": "app", "PASSWORD": "s3 cr'et",
        "HOST": "db.example", "PORT": 6432,
        "OPTIONS": {"sslmode": "require", "application_name": "shop-web", "options": "-c search_path=shop",
                    # Django's and its driver's own: not libpq keywords, left out
                    "isolation_level": 3, "assume_role": "shop_owner", "pool": True, "server_side_binding": True,
                    "cursor_factory": object()},
    })
    assert conninfo_to_dict(found) == {
        "dbname": "shop", "user": "app", "password": "s3 cr'et", "host": "db.example", "port": "6432",
        "sslmode": "require", "application_name": "shop-web", "options": "-c search_path=shop"}


def test_conninfo_from_settings_needs_a_name_or_a_service() -> None:
    from django.core.management.base import CommandError

    from pgqw.contrib.django.conf import conninfo_from_settings

    assert conninfo_to_dict(conninfo_from_settings({"NAME": "", "OPTIONS": {"service": "shop"}})) == {"service": "shop"}
    with pytest.raises(CommandError, match=r"DATABASES\['default'\] has no NAME"):
        conninfo_from_settings({"NAME": "", "USER": "app"})


# ----------------------------------------------------------------------------- migrate


def test_manage_migrate_creates_django_tables_and_the_queue_schema(empty_db_url: str) -> None:
    done = ok(manage(empty_db_url, "migrate"))
    assert "Applying pgqw.0001_queue_schema... OK" in done.stdout
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        tables = conn.execute("select to_regclass('public.django_migrations') is not null,"
                              " to_regclass('public.shop_receipt') is not null,"
                              f" to_regclass('{SCHEMA}.jobs') is not null, to_regclass('public.jobs') is null").fetchone()
        assert tables == (True, True, True, True)
        ledger = [r[0] for r in conn.execute(f"select name from {SCHEMA}.migrations order by version")]
        assert ledger == [path.name for _version, path in migration_files()]
        assert conn.execute("select count(*) from django_migrations where app = 'pgqw' and name = '0001_queue_schema'"
                            ).fetchone() == (1,)


def test_pgqw_migrate_after_migrate_applies_nothing_and_registers_the_task_types(empty_db_url: str) -> None:
    ok(manage(empty_db_url, "migrate"))
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        ledger = conn.execute(f"select version, name, checksum, applied_at from {SCHEMA}.migrations order by 1").fetchall()
        done = ok(manage(empty_db_url, "pgqw_migrate"))
        assert f"migrations up to date ({len(ledger)} applied before)" in done.stdout
        assert "registered task types: shop_receipt, shop_receipt_async (from shop.tasks)" in done.stdout
        assert conn.execute(f"select version, name, checksum, applied_at from {SCHEMA}.migrations order by 1"
                            ).fetchall() == ledger
        assert [r[0] for r in conn.execute(f"select name from {SCHEMA}.task_types where name like 'shop%' order by 1")
                ] == ["shop_receipt", "shop_receipt_async"]


def test_manage_migrate_again_brings_the_queue_up_to_date(empty_db_url: str) -> None:
    ok(manage(empty_db_url, "migrate"))
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        row = conn.execute("select p.oid::regprocedure::text from pg_proc p"
                           " where p.proname = 'queue_stats' and p.pronamespace = %s::regnamespace", [SCHEMA]).fetchone()
        assert row is not None
        (function,) = row
        conn.execute(f"drop function {function}")  # as an older release, without this function, would have left it
        done = ok(manage(empty_db_url, "migrate"))
        assert "No migrations to apply." in done.stdout
        assert conn.execute("select to_regprocedure(%s) is not null", [function]).fetchone() == (True,)


# ----------------------------------------------------------------------------- the worker


def test_pgqw_worker_runs_jobs_whose_handlers_write_through_the_orm(shop_db: str, workers: list[Child]) -> None:
    with psycopg.connect(shop_db, autocommit=True) as conn:
        sync_job = enqueue(conn, "shop_receipt", {"number": "A-1"})
        async_job = enqueue(conn, "shop_receipt_async", {"number": "A-2"})
        worker = start_worker(workers, shop_db, "--id", "shop-w1", "--concurrency", "2")
        assert "pgqw_worker: task modules shop.tasks (from the tasks module of each installed app)" in worker.output()
        for job in (sync_job, async_job):
            assert finished(conn, job, worker)["status"] == "succeeded", worker.tail()
        assert conn.execute("select number, job_id, via from shop_receipt order by number").fetchall() == [
            ("A-1", sync_job, "sync"), ("A-2", async_job, "async")]
        assert {r[0] for r in conn.execute(f"select worker_id from {SCHEMA}.job_attempts where job_id = any(%s)",
                                           [[sync_job, async_job]])} == {"shop-w1"}
        stop_cleanly(worker)


def test_pgqw_worker_closes_django_connections_after_each_attempt(shop_db: str, workers: list[Child]) -> None:
    with psycopg.connect(shop_db, autocommit=True) as conn:
        worker = start_worker(workers, shop_db, "--concurrency", "2")
        jobs = [enqueue(conn, "shop_receipt", {"number": "B-1"}), enqueue(conn, "shop_receipt_async", {"number": "B-2"})]
        results = [finished(conn, job, worker) for job in jobs]
        assert [r["status"] for r in results] == ["succeeded", "succeeded"], worker.tail()
        # Each handler used a Django connection of its own (CONN_MAX_AGE = 0), now closed; the worker's own
        # connections (named by pgqw) stay.
        assert all(isinstance(r["result"]["backend_pid"], int) for r in results)
        wait_for(lambda: not orm_backends(conn), timeout=10,
                 what=lambda: f"Django's connections to close: {orm_backends(conn)}")
        assert worker.alive()
        assert conn.execute("select count(*) > 0 from pg_stat_activity where datname = current_database()"
                            " and application_name like 'pgqw-worker %'").fetchone() == (True,)
        stop_cleanly(worker)


def test_pgqw_worker_replaces_a_broken_persistent_connection_before_the_next_attempt(
        shop_db: str, workers: list[Child]) -> None:
    with psycopg.connect(shop_db, autocommit=True) as conn:
        # One executor thread, whose persistent connection (CONN_MAX_AGE None) every sync job uses.
        worker = start_worker(workers, shop_db, "--concurrency", "1",
                              SHOP_CONN_MAX_AGE="none", SHOP_CONN_HEALTH_CHECKS="1")
        first = finished(conn, enqueue(conn, "shop_receipt", {"number": "C-1"}), worker)
        assert first["status"] == "succeeded", worker.tail()
        pid = first["result"]["backend_pid"]
        assert orm_backends(conn) == [pid]  # kept open between attempts, as CONN_MAX_AGE asks
        conn.execute("select pg_terminate_backend(%s)", [pid])  # the server drops it (a restart, a failover)
        wait_for(lambda: not orm_backends(conn), timeout=10, what="the terminated backend to go")
        second = finished(conn, enqueue(conn, "shop_receipt", {"number": "C-2"}), worker)
        assert (second["status"], second["attempts"]) == ("succeeded", 1), (second, worker.tail())
        assert second["result"]["backend_pid"] != pid
        stop_cleanly(worker)


# ----------------------------------------------------------------------------- options and mistakes


def test_pgqw_worker_help_lists_the_options_of_pgqw_worker(empty_db_url: str) -> None:
    from pgqw.contrib.django.options import pgqw_actions

    done = ok(manage(empty_db_url, "pgqw_worker", "--help"))
    text = " ".join(done.stdout.split())
    for action in pgqw_actions("worker"):
        assert max(action.option_strings, key=len) in text
    assert "default: settings.PGQW_TASKS, else the environment's PGQW_TASKS, else the tasks module of each" in text


def test_pgqw_worker_option_is_checked_as_pgqw_worker_checks_it(empty_db_url: str) -> None:
    done = manage(empty_db_url, "pgqw_worker", "--concurrency", "0")
    assert done.returncode != 0
    assert "argument --concurrency" in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("settings, command", [
    ("settings_sqlite", "pgqw_worker"),
    ("settings_sqlite", "pgqw_migrate"),
    ("settings_sqlite", "migrate"),
    ("settings_nodatabase", "pgqw_worker"),
])
def test_command_without_a_postgresql_database_is_a_one_line_command_error(settings: str, command: str) -> None:
    done = manage("dbname=unused", command, settings=settings)
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("CommandError: DATABASES['default'] is not PostgreSQL (ENGINE django.db.backends."), lines
    assert "PGQW_DATABASE_URL" in lines[0]


@pytest.mark.parametrize("args, extra", [
    (["--tasks", "shop.nosuch"], {}),
    ([], {"SHOP_PGQW_TASKS": "shop.nosuch"}),  # settings.PGQW_TASKS, before the installed apps' tasks modules
], ids=["--tasks", "PGQW_TASKS setting"])
def test_pgqw_worker_with_a_missing_task_module_is_a_one_line_command_error(args: list[str],
                                                                            extra: dict[str, str]) -> None:
    done = manage("dbname=unused", "pgqw_worker", *args, **extra)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "CommandError: cannot import task module 'shop.nosuch': No module named 'shop.nosuch'"], done.stderr


def test_pgqw_worker_reads_the_database_from_pgqw_database_url(shop_db: str, workers: list[Child]) -> None:
    # DATABASES names a database that does not exist; PGQW_DATABASE_URL (settings) names the real one.
    worker = start_worker(workers, "dbname=pgqw_no_such_database host=127.0.0.1",
                          SHOP_PGQW_DATABASE_URL=shop_db)
    assert f"database {describe_database(shop_db)}" in worker.output(), worker.tail()
    stop_cleanly(worker)
