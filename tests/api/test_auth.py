"""Bearer-token authentication (app/auth.py): required on every /api route once tokens are configured,
read-only tokens refused for writes, tokens compared in constant time and never logged, and
`pgqw api` / `pgqw up` refusing to listen beyond loopback with no token configured."""
from __future__ import annotations

import hmac
import json
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Iterator

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient

from pgqw.app import auth, close_pool, create_app
from tests.api.conftest import CheckedClient
from tests.api.live import Process
from tests.api.openapi_check import OPENAPI
from tests.helpers import LISTING, enqueue
from tests.lab import ROOT

WRITE = "write-token-0123456789abcdef"
WRITE_2 = "second-write-token-fedcba9876543210"
READ = "read-only-token-0123456789abcdef"
BODY = {"type": "listing_flyer", "payload": LISTING}


@pytest.fixture
def secured(db_url: str) -> Iterator[Flask]:
    app = create_app({"TESTING": True, "DATABASE_URL": db_url,
                      "API_TOKENS": f"{WRITE},{WRITE_2}", "API_READ_TOKENS": READ})
    app.test_client_class = CheckedClient
    yield app
    close_pool(app)


@pytest.fixture
def c(secured: Flask) -> FlaskClient:
    return secured.test_client()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def job_count(db_url: str) -> int:
    with psycopg.connect(db_url) as conn:
        return conn.execute("select count(*) from jobs").fetchone()[0]


ROUTE_ID = "6f1c2d1e-8a7b-4c3d-9e0f-1a2b3c4d5e6f"
ROUTES = [
    ("GET", "/api/jobs"),
    ("POST", "/api/jobs"),
    ("GET", "/api/jobs/6f1c2d1e-8a7b-4c3d-9e0f-1a2b3c4d5e6f"),
    ("GET", "/api/jobs/6f1c2d1e-8a7b-4c3d-9e0f-1a2b3c4d5e6f/attempts"),
    ("POST", "/api/jobs/6f1c2d1e-8a7b-4c3d-9e0f-1a2b3c4d5e6f/retry"),
    ("POST", "/api/jobs/6f1c2d1e-8a7b-4c3d-9e0f-1a2b3c4d5e6f/cancel"),
    ("GET", "/api/jobs/6f1c2d1e-8a7b-4c3d-9e0f-1a2b3c4d5e6f/flyer"),
    ("GET", "/api/jobs/6f1c2d1e-8a7b-4c3d-9e0f-1a2b3c4d5e6f/result"),
    ("GET", "/api/task-types"),
    ("GET", "/api/stats"),
    ("GET", "/api/workers"),
    ("GET", "/api/throughput"),
    ("GET", "/api/queues"),
    # A queue named like the job id above, so the documented path's {id} matches.
    ("POST", "/api/queues/6f1c2d1e-8a7b-4c3d-9e0f-1a2b3c4d5e6f/pause"),
    ("POST", "/api/queues/6f1c2d1e-8a7b-4c3d-9e0f-1a2b3c4d5e6f/resume"),
    ("PUT", "/api/queues/6f1c2d1e-8a7b-4c3d-9e0f-1a2b3c4d5e6f/limit"),
    ("POST", "/api/queues/6f1c2d1e-8a7b-4c3d-9e0f-1a2b3c4d5e6f/limit"),
    ("GET", "/api/schedules"),
    # A schedule named like the job id above, likewise.
    ("POST", "/api/schedules/6f1c2d1e-8a7b-4c3d-9e0f-1a2b3c4d5e6f/pause"),
    ("POST", "/api/schedules/6f1c2d1e-8a7b-4c3d-9e0f-1a2b3c4d5e6f/resume"),
    ("PUT", "/api/queues/6f1c2d1e-8a7b-4c3d-9e0f-1a2b3c4d5e6f/rate"),
    ("POST", "/api/queues/6f1c2d1e-8a7b-4c3d-9e0f-1a2b3c4d5e6f/rate"),
    ("GET", "/api/openapi.json"),
    ("GET", "/api/workflows/6f1c2d1e-8a7b-4c3d-9e0f-1a2b3c4d5e6f"),
    ("POST", "/api/batches"),
    ("GET", "/api/batches/6f1c2d1e-8a7b-4c3d-9e0f-1a2b3c4d5e6f"),
    ("POST", "/api/jobs/bulk/retry"),
    ("POST", "/api/jobs/bulk/cancel"),
    ("PUT", "/api/queues/6f1c2d1e-8a7b-4c3d-9e0f-1a2b3c4d5e6f/key-limit"),
    ("POST", "/api/queues/6f1c2d1e-8a7b-4c3d-9e0f-1a2b3c4d5e6f/key-limit"),
]


def test_auth_routes_list_every_documented_operation() -> None:
    documented = {(method.upper(), path) for path, item in OPENAPI["paths"].items() for method in item}
    assert {(method, path.replace(ROUTE_ID, "{id}")) for method, path in ROUTES} == documented


@pytest.mark.parametrize("method,path", ROUTES)
def test_auth_every_api_route_needs_a_token(c: FlaskClient, method: str, path: str) -> None:
    r = c.open(path, method=method, json=BODY, headers={"Idempotency-Key": "k-auth-1"})
    assert r.status_code == 401
    assert r.get_json()["error"]["code"] == "unauthorized"
    assert r.headers["WWW-Authenticate"] == 'Bearer realm="pgqw"'


def test_auth_unknown_api_path_is_401_not_404(c: FlaskClient) -> None:
    # Without a token nothing under /api answers, not even "no such route".
    r = c.get("/api/no-such-thing")
    assert r.status_code == 401
    assert c.get("/api/no-such-thing", headers=bearer(WRITE)).status_code == 404


@pytest.mark.parametrize("header,code,challenge", [
    (f"Bearer {WRITE}x", "invalid_token", 'error="invalid_token"'),
    ("Bearer wrong-token-0123456789abcdef", "invalid_token", 'error="invalid_token"'),
    (f"Basic {WRITE}", "unauthorized", 'error="invalid_request"'),
    ("Bearer ", "unauthorized", 'error="invalid_request"'),
    (WRITE, "unauthorized", 'error="invalid_request"'),
])
def test_auth_bad_credentials_are_401_with_the_reason(c: FlaskClient, db_url: str, header: str, code: str,
                                                       challenge: str) -> None:
    r = c.post("/api/jobs", json=BODY, headers={"Idempotency-Key": "k-auth-2", "Authorization": header})
    assert r.status_code == 401
    assert r.get_json()["error"]["code"] == code
    assert challenge in r.headers["WWW-Authenticate"]
    assert job_count(db_url) == 0


@pytest.mark.parametrize("token", [WRITE, WRITE_2])
def test_auth_write_tokens_enqueue_and_read(c: FlaskClient, token: str) -> None:
    r = c.post("/api/jobs", json=BODY, headers={"Idempotency-Key": f"k-{token[:6]}", **bearer(token)})
    assert r.status_code == 202
    job_id = r.get_json()["data"]["id"]
    assert c.get(f"/api/jobs/{job_id}", headers=bearer(token)).status_code == 200
    # The scheme name is case-insensitive (RFC 7235).
    assert c.get("/api/stats", headers={"Authorization": f"bearer {token}"}).status_code == 200


def test_auth_read_token_reads_but_cannot_write(c: FlaskClient, db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        job = enqueue(conn)
        conn.execute("update jobs set status = 'dead', attempts = max_attempts, finished_at = now(), last_error = 'boom' "
                     "where id = %s", [job.id])
    assert c.get("/api/jobs", headers=bearer(READ)).status_code == 200
    assert c.get(f"/api/jobs/{job.id}/attempts", headers=bearer(READ)).status_code == 200
    assert c.get("/api/task-types", headers=bearer(READ)).status_code == 200

    r = c.post("/api/jobs", json=BODY, headers={"Idempotency-Key": "k-read", **bearer(READ)})
    assert r.status_code == 403
    assert r.get_json()["error"]["code"] == "forbidden"
    assert 'error="insufficient_scope"' in r.headers["WWW-Authenticate"]
    r = c.post(f"/api/jobs/{job.id}/retry", headers=bearer(READ))
    assert r.status_code == 403
    assert job_count(db_url) == 1
    with psycopg.connect(db_url) as conn:
        assert conn.execute("select status from jobs where id = %s", [job.id]).fetchone()[0] == "dead"


def test_auth_page_is_served_without_a_token(c: FlaskClient) -> None:
    # The page itself holds no data; it asks for the token when /api answers 401.
    r = c.get("/")
    assert r.status_code == 200
    assert b'id="auth-bar"' in r.data


def test_auth_openapi_document_declares_the_bearer_scheme(c: FlaskClient, client: FlaskClient) -> None:
    secured_doc = c.get("/api/openapi.json", headers=bearer(READ)).get_json()
    assert secured_doc["security"] == [{"bearerAuth": []}]
    assert secured_doc["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    assert "security" not in client.get("/api/openapi.json").get_json()  # no tokens configured: open


def test_auth_open_without_tokens(client: FlaskClient) -> None:
    assert client.get("/api/stats").status_code == 200


def test_auth_compares_against_every_token_whatever_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    # Constant time: the first token matching must not end the loop early, or the time taken would tell
    # which position matched. Count the comparisons made for a match on the first token.
    tokens = auth.Tokens.of((WRITE, WRITE_2), (READ,))
    calls: list[int] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append(len(a) + len(b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", counting)
    assert tokens.scope(WRITE) == "write"
    assert tokens.scope(READ) == "read"
    assert tokens.scope("x") is None
    assert len(calls) == 9  # three tokens compared for each of the three lookups
    assert set(calls) == {64}  # always two SHA-256 digests: the token's length does not show
    assert WRITE.encode() not in b"".join(tokens.write + tokens.read)  # only digests are kept


def test_auth_short_token_is_refused_at_start_without_echoing_it(db_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pgqw.cli", "api", "--port", "0"], cwd=ROOT, capture_output=True, text=True,
        env={"PATH": "/usr/bin:/bin", "DATABASE_URL": db_url, "API_TOKENS": f"{WRITE},tiny-secret"},
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "API_TOKENS: token 2 is shorter than 16 characters" in done.stderr
    assert "tiny-secret" not in done.stderr + done.stdout


@pytest.mark.parametrize("command", [["api", "--port", "0"], ["up", "--workers", "1", "--port", "0"]])
@pytest.mark.parametrize("host", ["0.0.0.0", "::", ""])
def test_auth_beyond_loopback_without_token_refuses_to_start(db_url: str, command: list[str], host: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pgqw.cli", *command, "--host", host], cwd=ROOT, capture_output=True,
        text=True, env={"PATH": "/usr/bin:/bin", "DATABASE_URL": db_url}, timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "refusing to listen on" in done.stderr and "API_TOKENS" in done.stderr
    assert done.stderr.strip().count("\n") == 0
    assert "Traceback" not in done.stderr
    with psycopg.connect(db_url) as conn:  # nothing ran: `up` did not even migrate again or start workers
        assert conn.execute("select count(*) from pg_stat_activity where application_name like 'pgqw-worker%%' "
                            "and datname = current_database()").fetchone()[0] == 0


def _get(url: str, token: str | None = None) -> int:
    request = urllib.request.Request(url, headers=bearer(token) if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_auth_served_on_all_addresses_with_a_token_and_no_token_in_the_logs(db_url: str) -> None:
    wrong = "attacker-guess-0123456789abcdef"
    server = Process(["api", "--port", "0", "--host", "0.0.0.0"],
                     {"DATABASE_URL": db_url, "API_TOKENS": WRITE, "API_READ_TOKENS": READ})
    try:
        port = server.wait_for(r"serving on http://0\.0\.0\.0:(\d+)/").group(1)
        base = f"http://127.0.0.1:{port}"
        assert _get(f"{base}/api/stats") == 401
        assert _get(f"{base}/api/stats", wrong) == 401
        assert _get(f"{base}/api/stats", READ) == 200
        request = urllib.request.Request(
            f"{base}/api/jobs", data=b"{not json", method="POST",
            headers={"Content-Type": "application/json", "Idempotency-Key": "k-log", **bearer(WRITE)})
        try:
            urllib.request.urlopen(request, timeout=10)
        except urllib.error.HTTPError as exc:
            assert exc.code == 400
        request = urllib.request.Request(
            f"{base}/api/jobs", data=json.dumps(BODY).encode(), method="POST",
            headers={"Content-Type": "application/json", "Idempotency-Key": "k-log-2", **bearer(WRITE)})
        with urllib.request.urlopen(request, timeout=10) as r:
            assert r.status == 202
    finally:
        code = server.stop()
    assert code == 0, server.output()
    output = server.output()
    for secret in (WRITE, READ, wrong):
        assert secret not in output
