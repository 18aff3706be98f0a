"""Without API tokens the API answers only requests that name it: a Host of its own (loopback on its
port, PUBLIC_URL's host, API_ALLOWED_HOSTS) and, when there is an Origin, one of those too. A
cross-site form or a DNS-rebound name gets 403 in the envelope. With tokens nothing changes."""
from __future__ import annotations

import http.client
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient

from pgqw import config
from pgqw.app import close_pool, create_app
from tests.api.conftest import CheckedClient
from tests.api.live import serve_api
from tests.helpers import LISTING

BODY = {"type": "listing_flyer", "payload": LISTING}
TOKEN = "hosts-test-token-0123456789abcdef"


def _code(response: Any) -> str:
    assert response.mimetype == "application/json"
    return response.get_json()["error"]["code"]


MakeApp = Callable[..., FlaskClient]


@pytest.fixture
def make_app(shared_db_url: str) -> Iterator[MakeApp]:
    made: list[Flask] = []

    def _make(**config: Any) -> FlaskClient:
        application = create_app({"TESTING": True, "DATABASE_URL": shared_db_url, **config})
        application.test_client_class = CheckedClient
        made.append(application)
        return application.test_client()

    yield _make
    for application in made:
        close_pool(application)


# ---- Host ----

@pytest.mark.parametrize("host", ["localhost", "LOCALHOST", "localhost.", "127.0.0.1", "127.0.0.1:80",
                                  "127.3.2.1", "[::1]", "[::1]:80", "[0:0:0:0:0:0:0:1]"])
def test_hosts_loopback_names_on_the_listening_port_are_answered(shared_client: FlaskClient, host: str) -> None:
    # The test client's server port is 80, as a request without a port in Host means.
    for path in ("/api/jobs", "/", "/metrics"):
        assert shared_client.get(path, headers={"Host": host}).status_code == 200, path


@pytest.mark.parametrize("host", ["attacker.example", "attacker.example:80", "localhost:3000", "127.0.0.1:8080",
                                  "[::1]:3000", "10.0.0.5", "localhost.attacker.example", "127.0.0.1.nip.io",
                                  "user@localhost", "localhost/x", "", "[::2]", "[nonsense]"])
def test_hosts_a_foreign_host_is_403(shared_client: FlaskClient, unchanged: None, host: str) -> None:
    for path in ("/api/jobs", "/", "/metrics", "/api/nowhere"):
        r = shared_client.get(path, headers={"Host": host})
        assert r.status_code == 403, (path, r.status_code)
        assert _code(r) == "forbidden_host"
    r = shared_client.post("/api/jobs", json=BODY, headers={"Host": host, "Idempotency-Key": "rebound"})
    assert r.status_code == 403 and _code(r) == "forbidden_host"


def test_hosts_the_port_must_be_the_listening_one(shared_app: Flask) -> None:
    client = shared_app.test_client()
    base = {"base_url": "http://127.0.0.1:3000"}
    assert client.get("/api/jobs", headers={"Host": "127.0.0.1:3000"}, **base).status_code == 200
    assert client.get("/api/jobs", headers={"Host": "localhost:3000"}, **base).status_code == 200
    for host in ("127.0.0.1", "127.0.0.1:3001", "localhost:80"):
        r = client.get("/api/jobs", headers={"Host": host}, **base)
        assert r.status_code == 403 and _code(r) == "forbidden_host", host


def test_hosts_public_url_and_api_allowed_hosts_are_answered(make_app: MakeApp) -> None:
    client = make_app(PUBLIC_URL="https://Queue.Example.com/", API_ALLOWED_HOSTS="box.lan, other.lan:8443,[fd00::1]")
    for host in ("queue.example.com", "queue.example.com:8080", "box.lan", "box.lan:3000", "other.lan:8443",
                 "[fd00::1]", "localhost"):
        assert client.get("/api/jobs", headers={"Host": host}).status_code == 200, host
    for host in ("other.lan", "other.lan:8444", "example.com", "attacker.example"):
        assert client.get("/api/jobs", headers={"Host": host}).status_code == 403, host


def test_hosts_api_allowed_hosts_from_the_environment(make_app: MakeApp, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("API_ALLOWED_HOSTS", "box.lan:3000, pi.local")
    assert config.load().api_allowed_hosts == ("box.lan:3000", "pi.local")
    client = make_app()
    assert client.get("/api/jobs", headers={"Host": "pi.local:9"}).status_code == 200
    assert client.get("/api/jobs", headers={"Host": "box.lan:3000"}).status_code == 200
    assert client.get("/api/jobs", headers={"Host": "box.lan:3001"}).status_code == 403


@pytest.mark.parametrize("entry", ["*", "a b", "user@host", "http://", "host:99999"])
def test_hosts_a_bad_api_allowed_hosts_entry_stops_the_start(shared_db_url: str, entry: str) -> None:
    with pytest.raises(config.ConfigError, match="API_ALLOWED_HOSTS"):
        create_app({"TESTING": True, "DATABASE_URL": shared_db_url, "API_ALLOWED_HOSTS": entry})


# ---- Origin ----

@pytest.mark.parametrize("origin", ["http://localhost", "http://127.0.0.1", "http://127.0.0.1:80", "http://[::1]",
                                    "HTTP://LOCALHOST"])
def test_hosts_a_same_origin_request_is_answered(shared_client: FlaskClient, origin: str) -> None:
    # What the page's own fetches send (a browser adds Origin to same-origin POSTs).
    assert shared_client.get("/api/jobs", headers={"Origin": origin}).status_code == 200
    r = shared_client.post("/api/jobs", json=BODY,
                           headers={"Origin": origin, "Idempotency-Key": f"same-origin-{origin}"})
    assert r.status_code in (200, 202)


@pytest.mark.parametrize("origin", ["http://attacker.example", "https://attacker.example", "null",
                                    "http://localhost:8080", "https://localhost", "http://127.0.0.1:3000",
                                    "file://", "http://localhost/", "http://user@localhost", "garbage"])
def test_hosts_a_foreign_origin_is_403(shared_client: FlaskClient, unchanged: None, origin: str) -> None:
    # A cross-site form: a simple request, no preflight, the browser sends it with its Origin.
    r = shared_client.post("/api/jobs", data="type=listing_flyer", content_type="application/x-www-form-urlencoded",
                           headers={"Origin": origin, "Idempotency-Key": "csrf"})
    assert r.status_code == 403 and _code(r) == "forbidden_origin"
    r = shared_client.get("/api/jobs", headers={"Origin": origin})
    assert r.status_code == 403 and _code(r) == "forbidden_origin"


def test_hosts_public_url_is_an_allowed_origin(make_app: MakeApp) -> None:
    client = make_app(PUBLIC_URL="https://queue.example.com")
    assert client.get("/api/jobs", headers={"Host": "queue.example.com",
                                            "Origin": "https://queue.example.com"}).status_code == 200
    r = client.get("/api/jobs", headers={"Host": "queue.example.com", "Origin": "https://example.com"})
    assert r.status_code == 403 and _code(r) == "forbidden_origin"


# ---- with tokens: as before ----

def test_hosts_with_tokens_host_and_origin_are_not_checked(make_app: MakeApp) -> None:
    client = make_app(API_TOKENS=TOKEN)
    headers = {"Host": "attacker.example", "Origin": "http://attacker.example"}
    assert client.get("/api/jobs", headers={**headers, "Authorization": f"Bearer {TOKEN}"}).status_code == 200
    r = client.get("/api/jobs", headers=headers)
    assert r.status_code == 401 and _code(r) == "unauthorized"
    assert client.get("/", headers=headers).status_code == 200


# ---- a real `pgqw api` ----

def _get(url: str, path: str, headers: dict[str, str]) -> tuple[int, str, bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.putrequest("GET", path, skip_host=True)
        for name, value in headers.items():
            conn.putheader(name, value)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        conn.close()


def test_hosts_pgqw_api_refuses_a_rebound_name_and_a_foreign_origin(db_url: str, conn: psycopg.Connection) -> None:
    with serve_api(db_url) as url:
        own = urlsplit(url).netloc  # 127.0.0.1:PORT
        port = urlsplit(url).port
        assert _get(url, "/api/jobs", {"Host": own})[0] == 200
        assert _get(url, "/api/jobs", {"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"})[0] == 200
        assert _get(url, "/", {"Host": own, "Origin": f"http://{own}"})[0] == 200
        status, kind, body = _get(url, "/api/jobs", {"Host": f"attacker.example:{port}"})
        assert (status, kind) == (403, "application/json") and b'"forbidden_host"' in body
        status, kind, body = _get(url, "/api/jobs", {"Host": own, "Origin": "http://attacker.example"})
        assert (status, kind) == (403, "application/json") and b'"forbidden_origin"' in body
