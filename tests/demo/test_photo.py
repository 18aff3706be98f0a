"""The listing's photo fetched from a real HTTP server on loopback (http.server in a thread): what is
used, and every way a photo is left out without an exception."""
from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from pgqw.demo.photo import fetch_photo
from tests.demo.images import picture

JPEG = picture(fmt="JPEG")
PNG = picture(fmt="PNG")
LIMIT = 1_000_000


class Routes(BaseHTTPRequestHandler):
    """GET /good.jpg, /good.png, /moved (to /good.jpg), /missing, /huge (declared too large), /endless (no
    Content-Length, more than the limit), /drip (a byte at a time), /silent (headers never sent), /page
    (text/html), /liar (image/jpeg that is not)."""

    release = threading.Event()

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _send(self, status: int, kind: str, body: bytes, length: int | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        if length is not None:
            self.send_header("Content-Length", str(length))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/good.jpg":
            self._send(200, "image/jpeg", JPEG, len(JPEG))
        elif self.path == "/good.png":
            self._send(200, "image/png; charset=binary", PNG, len(PNG))
        elif self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/good.jpg")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/missing":
            self._send(404, "text/plain", b"no such photo", 13)
        elif self.path == "/huge":
            self._send(200, "image/jpeg", b"", LIMIT + 1)
        elif self.path == "/endless":
            self.close_connection = True
            self.send_response(200)
            self.send_header("Content-Type", "image/jpeg")
            self.end_headers()
            for _ in range(LIMIT // 65536 + 4):
                self.wfile.write(b"\xff" * 65536)
        elif self.path == "/drip":  # a byte at a time, never done
            self.send_response(200)
            self.send_header("Content-Type", "image/jpeg")
            self.send_header("Content-Length", "1000")
            self.end_headers()
            while not self.release.wait(timeout=0.05):
                try:
                    self.wfile.write(b"\xff")
                    self.wfile.flush()
                except OSError:
                    return
        elif self.path == "/silent":
            self.release.wait(timeout=10)  # answers nothing until the test is over
        elif self.path == "/page":
            self._send(200, "text/html", b"<html></html>", 13)
        elif self.path == "/liar":
            self._send(200, "image/jpeg", b"GIF89a not really", 17)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Routes)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        Routes.release.set()
        httpd.shutdown()
        httpd.server_close()


def fetch(url: str, timeout_s: float = 5.0):  # type: ignore[no-untyped-def]
    return fetch_photo(url, timeout_s=timeout_s, max_bytes=LIMIT)


@pytest.mark.parametrize(("path", "body"), [("/good.jpg", JPEG), ("/good.png", PNG), ("/moved", JPEG)])
def test_photo_good_image_is_used(server: str, path: str, body: bytes) -> None:
    got = fetch(server + path)
    assert (got.data, got.problem) == (body, None)


def test_photo_404_is_left_out(server: str) -> None:
    got = fetch(server + "/missing")
    assert got.data is None and got.problem == "HTTP 404 Not Found"


def test_photo_declared_too_large_is_left_out_unread(server: str) -> None:
    got = fetch(server + "/huge")
    assert got.data is None and got.problem == f"{LIMIT + 1} bytes, over the limit of {LIMIT}"


def test_photo_body_past_the_limit_is_cut_off(server: str) -> None:
    got = fetch(server + "/endless")
    assert got.data is None and got.problem == f"more than the limit of {LIMIT} bytes"


def test_photo_server_that_does_not_answer_times_out(server: str) -> None:
    started = time.monotonic()
    got = fetch(server + "/silent", timeout_s=0.3)
    took = time.monotonic() - started
    assert got.data is None and got.problem == "not fetched within 0.3 s"
    assert took < 2.5, took


def test_photo_body_that_trickles_in_times_out(server: str) -> None:
    """The limit is for the whole fetch, not for each read: a byte every 50 ms does not keep it going."""
    started = time.monotonic()
    got = fetch(server + "/drip", timeout_s=0.3)
    assert got.data is None and got.problem == "not fetched within 0.3 s"
    assert time.monotonic() - started < 2.5


@pytest.mark.parametrize(("path", "problem"), [
    ("/page", "content type text/html, not image/jpeg or image/png"),
    ("/liar", "not a readable image (UnidentifiedImageError)"),
])
def test_photo_of_the_wrong_type_is_left_out(server: str, path: str, problem: str) -> None:
    got = fetch(server + path)
    assert got.data is None and got.problem == problem


def test_photo_nobody_listens_for_is_left_out() -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    got = fetch(f"http://127.0.0.1:{port}/x.jpg")
    assert got.data is None and got.problem is not None and got.problem.startswith("cannot fetch it:")


def test_photo_other_schemes_are_not_fetched() -> None:
    assert fetch("file:///etc/passwd").problem == "not an http(s) URL"
