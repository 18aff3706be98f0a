"""The listing's photo, fetched by the worker that renders its flyer (stdlib urllib).

fetch_photo never raises: whatever goes wrong (a refused or unanswered connection, an HTTP error, a
body over the size limit, a type other than image/jpeg or image/png, bytes that are no such image,
the time limit passed) comes back as a Photo without data and with the reason, and the flyer draws a
placeholder. The time limit covers the whole fetch (connect, headers and body), not each read.
"""
from __future__ import annotations

import io
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import urlsplit

CONTENT_TYPES = {"image/jpeg": "JPEG", "image/png": "PNG"}  # what is kept, and the formats its body may be
MAX_PIXELS = 50_000_000  # a larger image is refused before it is decoded (a decompression bomb)
CHUNK = 64 * 1024


@dataclass(frozen=True)
class Photo:
    data: bytes | None          # the image's bytes, when it can be used
    problem: str | None = None  # why not, when it cannot


class _HttpOnly(urllib.request.HTTPRedirectHandler):
    """Redirects are followed to http(s) addresses only."""

    def redirect_request(self, req: Any, fp: IO[bytes], code: int, msg: str, headers: Any,
                         newurl: str) -> urllib.request.Request | None:
        if urlsplit(newurl).scheme not in ("http", "https"):
            raise urllib.error.HTTPError(newurl, code, "redirect to a non-http(s) address", headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_opener = urllib.request.build_opener(_HttpOnly)


def fetch_photo(url: str, *, timeout_s: float, max_bytes: int) -> Photo:
    """GET url within timeout_s seconds in all; the body when it is a JPEG or PNG of at most max_bytes."""
    if urlsplit(url).scheme not in ("http", "https"):
        return Photo(None, "not an http(s) URL")
    deadline = time.monotonic() + timeout_s
    request = urllib.request.Request(url, headers={"Accept": "image/jpeg, image/png",
                                                   "User-Agent": "pg-queue-worker flyer"})
    try:
        with _opener.open(request, timeout=timeout_s) as response:
            kind = response.headers.get_content_type()
            if kind not in CONTENT_TYPES:
                return Photo(None, f"content type {kind}, not image/jpeg or image/png")
            length = response.headers.get("Content-Length")
            if length and length.isdigit() and int(length) > max_bytes:
                return Photo(None, f"{int(length)} bytes, over the limit of {max_bytes}")
            body = bytearray()
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                _set_timeout(response, left)
                chunk = response.read1(min(CHUNK, max_bytes + 1 - len(body)))  # what has come, not a full CHUNK
                if not chunk:
                    break
                body += chunk
                if len(body) > max_bytes:
                    return Photo(None, f"more than the limit of {max_bytes} bytes")
    except urllib.error.HTTPError as exc:
        return Photo(None, f"HTTP {exc.code} {exc.reason}")
    except TimeoutError:
        return Photo(None, f"not fetched within {timeout_s:g} s")
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            return Photo(None, f"not fetched within {timeout_s:g} s")
        return Photo(None, f"cannot fetch it: {exc.reason}")
    except (OSError, ValueError) as exc:  # a connection reset, a malformed answer or address
        return Photo(None, f"cannot fetch it: {type(exc).__name__}: {exc}")
    problem = image_problem(bytes(body))
    return Photo(None, problem) if problem else Photo(bytes(body))


def _set_timeout(response: Any, seconds: float) -> None:
    """Each read waits at most what is left of the fetch's time."""
    sock = getattr(getattr(getattr(response, "fp", None), "raw", None), "_sock", None)
    if sock is not None:
        sock.settimeout(max(seconds, 0.001))


def image_problem(data: bytes) -> str | None:
    """Why these bytes are no usable JPEG or PNG (None: they are one): Pillow reads the header and checks
    the whole file, and refuses more than MAX_PIXELS before decoding any."""
    try:
        from PIL import Image
    except ModuleNotFoundError:
        return "Pillow (the demo extra) is not installed"
    try:
        with Image.open(io.BytesIO(data)) as image:
            if image.format not in CONTENT_TYPES.values():
                return f"the body is {image.format}, not a JPEG or PNG"
            if image.width * image.height > MAX_PIXELS:
                return f"{image.width}x{image.height} pixels, over {MAX_PIXELS}"
            image.verify()
    except Exception as exc:  # noqa: BLE001 - any unreadable image is only a missing photo
        return f"not a readable image ({type(exc).__name__})"
    return None
