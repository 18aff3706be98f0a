"""Requests `pgqw api` (waitress) cannot read as HTTP are answered in the API's JSON error envelope
with a 4xx, never waitress' plain text or a 5xx. Raw sockets against a real process."""
from __future__ import annotations

import json
import socket
from typing import Iterator
from urllib.parse import urlsplit

import pytest

from tests.api.live import serve_api

MAX_BODY = 1 << 20  # what `pgqw api` lets waitress read: max(16 * MAX_BODY_BYTES, 1 MiB), MAX_BODY_BYTES 64 KiB


@pytest.fixture(scope="module")
def api(shared_db_url: str) -> Iterator[tuple[str, int]]:
    with serve_api(shared_db_url, {"MAX_BODY_BYTES": str(64 * 1024)}) as url:
        parts = urlsplit(url)
        assert parts.hostname and parts.port
        yield parts.hostname, parts.port


def exchange(api: tuple[str, int], request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Sends request bytes, reads the answer to the end (the server closes after a framing error)."""
    with socket.create_connection(api, timeout=30) as s:
        s.sendall(request)
        s.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := s.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return status, headers, body[: int(headers.get("content-length", len(body)))]


def _host(api: tuple[str, int]) -> bytes:
    return f"Host: {api[0]}:{api[1]}\r\n".encode()


MALFORMED = {
    "duplicated_content_length": b"POST /api/jobs HTTP/1.1\r\n{host}Content-Type: application/json\r\n"
                                 b"Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
    "transfer_encoding_xchunked": b"POST /api/jobs HTTP/1.1\r\n{host}Transfer-Encoding: xchunked\r\n\r\n"
                                  b"2\r\n{}\r\n0\r\n\r\n",
    "transfer_encoding_gzip": b"POST /api/jobs HTTP/1.1\r\n{host}Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    "content_length_not_a_number": b"POST /api/jobs HTTP/1.1\r\n{host}Content-Length: 2x\r\n\r\n{}",
    "content_length_negative": b"POST /api/jobs HTTP/1.1\r\n{host}Content-Length: -1\r\n\r\n{}",
    "bad_chunk_size": b"POST /api/jobs HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    "chunk_not_terminated": b"POST /api/jobs HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n",
    "space_before_colon": b"GET /api/jobs HTTP/1.1\r\n{host}X-Bad : 1\r\n\r\n",
    "bare_lf_in_header": b"GET /api/jobs HTTP/1.1\r\n{host}X-A: 1\nX-B: 2\r\n\r\n",
    "malformed_method": b"G(T /api/jobs HTTP/1.1\r\n{host}\r\n",
    "malformed_request_line": b"GET\r\n{host}\r\n",
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_framing_errors_are_a_400_in_the_json_envelope(api: tuple[str, int], name: str) -> None:
    status, headers, body = exchange(api, MALFORMED[name].replace(b"{host}", _host(api)))
    assert status == 400, (status, body)
    assert headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert set(error) == {"code", "message"} and error["code"] == "invalid_framing" and error["message"]


def test_framing_a_chunked_body_over_the_limit_is_a_413_in_the_json_envelope(api: tuple[str, int]) -> None:
    # One chunk that claims 2 MiB; exactly as many body bytes as the limit are sent, so none is left
    # unread when the server answers and closes.
    size_line = b"200000\r\n"
    request = (b"POST /api/jobs HTTP/1.1\r\n" + _host(api) + b"Content-Type: application/json\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n" + size_line + b" " * (MAX_BODY - len(size_line)))
    status, headers, body = exchange(api, request)
    assert status == 413
    assert headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert set(error) == {"code", "message"} and error["code"] == "payload_too_large"


def test_framing_a_content_length_over_the_limit_is_a_413_in_the_json_envelope(api: tuple[str, int]) -> None:
    request = b"POST /api/jobs HTTP/1.1\r\n" + _host(api) + f"Content-Length: {MAX_BODY}\r\n\r\n".encode()
    status, headers, body = exchange(api, request)
    assert status == 413 and headers["content-type"] == "application/json"
    assert json.loads(body)["error"]["code"] == "payload_too_large"


def test_framing_headers_too_large_are_a_4xx_in_the_json_envelope(api: tuple[str, int]) -> None:
    # Exactly waitress' max_request_header_size (256 KiB) of unfinished headers, none left unread.
    start = b"GET /api/jobs HTTP/1.1\r\n" + _host(api) + b"X-Big: "
    request = start + b"a" * (256 * 1024 - len(start))
    status, headers, body = exchange(api, request)
    assert status == 431 and headers["content-type"] == "application/json"
    assert set(json.loads(body)["error"]) == {"code", "message"}


def test_framing_a_well_formed_request_is_still_answered(api: tuple[str, int]) -> None:
    status, headers, body = exchange(api, b"GET /api/jobs HTTP/1.1\r\n" + _host(api) + b"Connection: close\r\n\r\n")
    assert status == 200 and headers["content-type"] == "application/json"
    assert "data" in json.loads(body)
