"""The API served for real (`pgqw api` with waitress, in a subprocess): the same key sent 100 times at
once makes one job; a chunked body over the limit is refused; a task type registered while it runs is
accepted; SIGTERM ends the server cleanly."""
from __future__ import annotations

import http.client
import json
import threading
import urllib.error
import urllib.request
from typing import Iterator
from urllib.parse import urlsplit

import psycopg
import pytest

from pgqw import db
from tests.api.live import serve_api
from tests.helpers import LISTING, rows

BODY = json.dumps({"type": "listing_flyer", "payload": LISTING}).encode()


@pytest.fixture
def server(db_url: str) -> Iterator[str]:
    with serve_api(db_url, {"API_THREADS": "16"}) as url:
        yield url


def post_job(url: str, key: str, body: bytes = BODY) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{url}/api/jobs", data=body, method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": key},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def all_at_once(n: int, call) -> list:  # type: ignore[no-untyped-def]
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def go(i: int) -> None:
        barrier.wait()
        try:
            results[i] = call(i)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertions
            results[i] = exc

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


def test_100_concurrent_posts_with_the_same_key_make_one_job(server: str, conn: psycopg.Connection) -> None:
    results = all_at_once(100, lambda i: post_job(server, "the-same-key"))
    errors = [r for r in results if not isinstance(r, tuple)]
    assert errors == []
    statuses = sorted(status for status, _ in results)
    assert statuses.count(202) == 1 and statuses.count(200) == 99, statuses
    assert len({body["data"]["id"] for _, body in results}) == 1
    assert rows(conn, "select count(*) as n from jobs")[0]["n"] == 1


def test_100_concurrent_posts_with_different_keys_make_100_jobs(server: str, conn: psycopg.Connection) -> None:
    results = all_at_once(100, lambda i: post_job(server, f"key-{i}"))
    assert [status for status, _ in results] == [202] * 100
    assert len({body["data"]["id"] for _, body in results}) == 100
    assert rows(conn, "select count(*) as n from jobs")[0]["n"] == 100


def test_chunked_body_over_the_limit_returns_413_as_json(server: str, conn: psycopg.Connection) -> None:
    parts = urlsplit(server)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        chunks = (b" " * 8192 for _ in range(10))  # 80 KiB, no Content-Length
        connection.request("POST", "/api/jobs", body=chunks, encode_chunked=True,
                           headers={"Content-Type": "application/json", "Idempotency-Key": "chunked"})
        response = connection.getresponse()
        assert response.status == 413
        assert json.load(response)["error"]["code"] == "payload_too_large"
    finally:
        connection.close()
    assert rows(conn, "select count(*) as n from jobs")[0]["n"] == 0


def test_chunked_body_under_the_limit_is_read(server: str) -> None:
    parts = urlsplit(server)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request("POST", "/api/jobs", body=iter([BODY[:20], BODY[20:]]), encode_chunked=True,
                           headers={"Content-Type": "application/json", "Idempotency-Key": "chunked-ok"})
        assert connection.getresponse().status == 202
    finally:
        connection.close()


def test_served_page_and_openapi(server: str) -> None:
    with urllib.request.urlopen(f"{server}/", timeout=10) as r:
        assert r.status == 200 and "Make a flyer" in r.read().decode()
    with urllib.request.urlopen(f"{server}/api/openapi.json", timeout=10) as r:
        assert json.load(r)["openapi"] == "3.1.0"


def test_served_api_takes_a_task_type_registered_while_it_runs(server: str, conn: psycopg.Connection) -> None:
    """The server holds no code of the type: a registration in the table is enough, without a restart."""
    body = json.dumps({"type": "send_receipt", "payload": {"order": 42}}).encode()
    status, answer = post_job(server, "receipt-42", body)
    assert status == 422
    assert (answer["error"]["code"], answer["error"]["details"]["sqlstate"]) == ("unknown_task_type", "QT422")
    assert answer["error"]["details"]["detail"] == "registered: listing_flyer, noop"
    db.register_task_types(conn, types=[{"name": "send_receipt", "payload_schema": {
        "type": "object", "required": ["order"], "properties": {"order": {"type": "integer"}}}}])
    status, answer = post_job(server, "receipt-42", body)  # a refused request did not use up its key
    assert status == 202 and answer["data"]["type"] == "send_receipt"
    with urllib.request.urlopen(f"{server}/api/openapi.json", timeout=10) as r:
        doc = json.load(r)
    assert {v["properties"]["type"]["const"] for v in doc["components"]["schemas"]["CreateJob"]["oneOf"]} \
        == {"listing_flyer", "noop", "send_receipt"}
    assert doc["components"]["schemas"]["Payload.send_receipt"]["required"] == ["order"]
