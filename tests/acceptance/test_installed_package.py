"""The package as a user gets it: built into a wheel and an sdist, installed into a new virtual
environment in a temporary folder away from the repository, then `pgqw migrate`, `pgqw api` and
`pgqw worker` from that environment take one job from a fresh database to its flyer.

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


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The wheel and the sdist, built from the checkout as `python -m build` does for a release."""
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(ROOT)], cwd=out)
    return {"wheel": next(out.glob("*.whl")), "sdist": next(out.glob("*.tar.gz"))}


@pytest.fixture(scope="module")
def installed(built: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment in a temporary folder with the wheel installed; its bin folder."""
    home = tmp_path_factory.mktemp("user-home")
    _run([sys.executable, "-m", "venv", str(home / "venv")], cwd=home)
    _run([str(home / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet", str(built["wheel"])], cwd=home)
    return home / "venv" / "bin"


def test_wheel_installs_one_import_name_and_carries_the_sql(built: dict[str, Path]) -> None:
    names = zipfile.ZipFile(built["wheel"]).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"pgqw"}, top
    for needed in ("pgqw/sql/migrations/0001_core.sql", "pgqw/sql/functions/claim_job.sql",
                   "pgqw/sql/security/roles.sql", "pgqw/sql/security/grants.sql",
                   "pgqw/app/static/app.js", "pgqw/app/templates/index.html", "pgqw/worker/fonts/DejaVuSans.ttf"):
        assert needed in names, needed
    assert not [n for n in names if n.startswith(("pgqw/lab", "tests/", "bench/"))]


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
