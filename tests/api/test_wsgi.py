"""Served by another WSGI server: `waitress-serve --call pgqw.app:create_app` from the installed package
(not from the repository's folder), and the guard that then stands in for `pgqw api`'s refusal to
listen beyond loopback without tokens: with no API_TOKENS the app answers only peers on this machine
(403 forbidden_peer otherwise), whatever address the server listens on."""
from __future__ import annotations

import http.client
import os
import queue
import re
import shutil
import socket
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest
from flask import Flask
from flask.testing import FlaskClient

from pgqw.app import close_pool, create_app
from pgqw.app.auth import local_peer
from tests.api.conftest import CheckedClient
from tests.helpers import cannot_run

TOKEN = "wsgi-test-token-0123456789abcdef"
WAITRESS = Path(sys.executable).with_name("waitress-serve")


def _code(response: Any) -> str:
    return response.get_json()["error"]["code"]


# ---- the peer guard, in the app ----

@pytest.mark.parametrize("peer", ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1", "localhost", "", None])
def test_wsgi_local_peers_are_this_machine(peer: str | None) -> None:
    assert local_peer(peer)


@pytest.mark.parametrize("peer", ["192.0.2.7", "10.0.0.5", "0.0.0.0", "2001:db8::1", "::ffff:192.0.2.7",
                                  "fe80::1%eth0"])
def test_wsgi_other_peers_are_not(peer: str) -> None:
    assert not local_peer(peer)


@pytest.fixture
def make_client(shared_db_url: str) -> Iterator[Any]:
    made: list[Flask] = []

    def _make(**config: Any) -> FlaskClient:
        application = create_app({"TESTING": True, "DATABASE_URL": shared_db_url, **config})
        application.test_client_class = CheckedClient
        made.append(application)
        return application.test_client()

    yield _make
    for application in made:
        close_pool(application)


def test_wsgi_without_tokens_another_machine_gets_403_on_every_path(make_client: Any, unchanged: None) -> None:
    client = make_client(API_TOKENS="", API_READ_TOKENS="")
    remote = {"REMOTE_ADDR": "192.0.2.7"}
    for path in ("/api/jobs", "/", "/metrics", "/static/app.js", "/api/no-such-route"):
        r = client.get(path, environ_base=remote, headers={"Host": "localhost"})  # a loopback Host is no pass
        assert r.status_code == 403 and _code(r) == "forbidden_peer", path
    r = client.post("/api/jobs", environ_base=remote, json={}, headers={"Idempotency-Key": "k"})
    assert r.status_code == 403 and _code(r) == "forbidden_peer"
    assert client.get("/api/jobs", environ_base={"REMOTE_ADDR": "127.0.0.1"}).status_code == 200


def test_wsgi_with_tokens_another_machine_is_answered_by_its_token(make_client: Any, unchanged: None) -> None:
    client = make_client(API_TOKENS=TOKEN)
    remote = {"REMOTE_ADDR": "192.0.2.7"}
    r = client.get("/api/jobs", environ_base=remote, headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200
    r = client.get("/api/jobs", environ_base=remote)
    assert r.status_code == 401 and _code(r) == "unauthorized"
    assert client.get("/", environ_base=remote).status_code == 200  # the page needs no token


# ---- a real waitress-serve ----

def _own_address() -> str:
    """An address of this machine that is not loopback. Without one the test is skipped (failed when
    CI is set, as the other tests that need the machine's network do)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing address
            address: str | None = s.getsockname()[0]
    except OSError:
        address = None
    if address is None or local_peer(address):
        cannot_run("this machine has no address but loopback: no other peer to try")
    return address


@contextmanager
def waitress_serve(db_url: str, cwd: Path, env: dict[str, str] | None = None) -> Iterator[int]:
    """`waitress-serve --listen=0.0.0.0:0 --call pgqw.app:create_app` in cwd; yields its port."""
    if not WAITRESS.exists() and shutil.which("waitress-serve") is None:
        pytest.fail("waitress-serve is missing (it comes with waitress, a dependency)")
    command = str(WAITRESS) if WAITRESS.exists() else "waitress-serve"
    inherited = {k: v for k, v in os.environ.items() if k not in ("API_TOKENS", "API_READ_TOKENS")}
    environ = {**inherited, "DATABASE_URL": db_url, **(env or {})}
    proc = subprocess.Popen([command, "--listen=0.0.0.0:0", "--threads=2", "--call", "pgqw.app:create_app"],
                            cwd=cwd, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str | None] = queue.Queue()
    seen: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    try:
        while True:
            try:
                line = lines.get(timeout=30)
            except queue.Empty:
                raise AssertionError(f"waitress-serve did not start in 30 s:\n{''.join(seen)}") from None
            if line is None:
                raise AssertionError(f"waitress-serve ended ({proc.wait()}):\n{''.join(seen)}")
            seen.append(line)
            m = re.search(r"Serving on http://0\.0\.0\.0:(\d+)", line)
            if m:
                break
        yield int(m.group(1))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _get(address: str, port: int, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(address, port, timeout=30)
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_wsgi_waitress_serve_the_installed_package_without_tokens(db_url: str, tmp_path: Path) -> None:
    # From a folder of its own: the module is the installed pgqw.app, not the repository's app/.
    with waitress_serve(db_url, tmp_path) as port:
        own = f"127.0.0.1:{port}"
        status, body = _get("127.0.0.1", port, "/api/stats", {"Host": own})
        assert status == 200 and b'"data"' in body
        assert _get("127.0.0.1", port, "/", {"Host": own})[0] == 200
        address = _own_address()
        # Listening on every address, a peer that is not loopback is refused, even naming loopback.
        status, body = _get(address, port, "/api/stats", {"Host": own})
        assert status == 403 and b'"forbidden_peer"' in body
        assert _get(address, port, "/", {"Host": own})[0] == 403


def test_wsgi_waitress_serve_with_tokens_answers_other_peers_by_token(db_url: str, tmp_path: Path) -> None:
    address = _own_address()
    with waitress_serve(db_url, tmp_path, {"API_TOKENS": TOKEN}) as port:
        host = f"{address}:{port}"
        status, body = _get(address, port, "/api/stats", {"Host": host, "Authorization": f"Bearer {TOKEN}"})
        assert status == 200 and b'"data"' in body
        status, body = _get(address, port, "/api/stats", {"Host": host})
        assert status == 401 and b'"unauthorized"' in body
