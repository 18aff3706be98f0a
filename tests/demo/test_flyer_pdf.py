"""The flyer's PDF read back (pypdf): every field of the payload is printed, for the five required
fields and for a full payload; A4 and Letter pages; the photo embedded at 300 dpi, a placeholder
when it cannot be used; and the listing_flyer job succeeding through a bad photo."""
from __future__ import annotations

import io
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import psycopg
import pytest
from pypdf import PdfReader

from pgqw.demo.flyer import render_flyer
from pgqw.demo.listing import EXAMPLE_LISTING, FULL_EXAMPLE_LISTING
from tests.demo.images import picture

JOB_ID = "0d9c5a3e-2f4b-4c61-9a57-3c1e8f0b7d21"
FLYER_URL = f"https://queue.example.com/api/jobs/{JOB_ID}/flyer"
PHOTO = picture(1600, 1000)


def render(payload: dict[str, Any], photo: bytes | None = None) -> bytes:
    return render_flyer(payload, job_id=JOB_ID, flyer_url=FLYER_URL, photo=photo)


def text_of(pdf: bytes) -> str:
    """All page text, whitespace collapsed so line wrapping does not matter."""
    reader = PdfReader(io.BytesIO(pdf))
    return " ".join(" ".join(p.extract_text() for p in reader.pages).split())


def images_of(pdf: bytes) -> list[Any]:
    return list(PdfReader(io.BytesIO(pdf)).pages[0].images)


def page_size(pdf: bytes) -> tuple[int, int]:
    reader = PdfReader(io.BytesIO(pdf))
    assert len(reader.pages) == 1
    box = reader.pages[0].mediabox
    return round(float(box.width)), round(float(box.height))


def test_flyer_of_the_five_required_fields_prints_each() -> None:
    text = text_of(render(EXAMPLE_LISTING))
    for shown in ("3-bedroom apartment in Yaba", "₦2,700,000", "12 Herbert Macaulay Way, Yaba, Lagos",
                  "3 bedrooms", "PROPERTY LISTING", FLYER_URL, "Scan to keep this flyer on your phone", JOB_ID):
        assert shown in text, shown
    assert "FOR SALE" not in text and "FOR RENT" not in text and "CONTACT" not in text


def test_flyer_of_a_full_payload_prints_each_field() -> None:
    pdf = render(FULL_EXAMPLE_LISTING, PHOTO)
    text = text_of(pdf)
    full = FULL_EXAMPLE_LISTING
    for shown in (full["title"], "₦3,500,000", "/ year", full["address"], "3 bedrooms", "FOR RENT", "For rent",
                  " ".join(full["description"].split()), "145 m²", full["agentName"], full["agentPhone"],
                  full["listingUrl"], "Scan for photos and full details", JOB_ID):
        assert shown in text, shown
    assert FLYER_URL not in text  # the code links to the listing's page, not to the flyer
    assert len(images_of(pdf)) == 1
    assert page_size(pdf) == (595, 842)


def test_flyer_prints_sale_and_square_feet() -> None:
    payload = {**EXAMPLE_LISTING, "listingType": "sale", "floorArea": 1250.5, "floorAreaUnit": "sqft"}
    text = text_of(render(payload))
    assert "FOR SALE" in text and "For sale" in text and "1,250.5 sq ft" in text and "/ " not in text


@pytest.mark.parametrize(("size", "points"), [("A4", (595, 842)), ("Letter", (612, 792))])
def test_flyer_page_size_is_the_payloads(size: str, points: tuple[int, int]) -> None:
    assert page_size(render({**FULL_EXAMPLE_LISTING, "pageSize": size}, PHOTO)) == points
    assert page_size(render({**EXAMPLE_LISTING, "pageSize": size})) == points


def test_flyer_default_page_is_a4() -> None:
    assert page_size(render(EXAMPLE_LISTING)) == (595, 842)


@pytest.mark.parametrize("size", ["A4", "Letter"])
def test_flyer_photo_is_embedded_at_300_dpi(size: str) -> None:
    """The image's pixels over the width it is drawn at (the content width: the page less 2 × 14 mm)."""
    pdf = render({**FULL_EXAMPLE_LISTING, "pageSize": size}, PHOTO)
    [image] = images_of(pdf)
    width_pt = page_size(pdf)[0] - 2 * 14 * 72 / 25.4
    assert abs(image.image.width / (width_pt / 72) - 300) < 1
    assert image.image.format == "JPEG"


@pytest.mark.parametrize("photo", [None, b"", b"not an image", picture(fmt="PNG")[:200]],
                         ids=["none", "empty", "garbage", "truncated"])
def test_flyer_without_a_usable_photo_draws_the_placeholder(photo: bytes | None) -> None:
    pdf = render(FULL_EXAMPLE_LISTING, photo)
    assert images_of(pdf) == []  # the placeholder is drawn, not an image
    assert FULL_EXAMPLE_LISTING["title"] in text_of(pdf)


def test_flyer_takes_a_png_with_transparency() -> None:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGBA", (900, 600), (200, 30, 30, 128)).save(out, "PNG")
    assert len(images_of(render(FULL_EXAMPLE_LISTING, out.getvalue()))) == 1


def test_flyer_is_deterministic() -> None:
    assert render(FULL_EXAMPLE_LISTING, PHOTO) == render(FULL_EXAMPLE_LISTING, PHOTO)


def test_flyer_of_the_longest_valid_fields_is_one_page_with_everything_in_order() -> None:
    payload = {
        "title": ("Spacious five bedroom duplex " * 8)[:200], "priceMinor": 10**15, "currency": "GHS",
        "address": ("Plot 1234, Admiralty Way, Lekki Phase 1, Lagos. " * 7)[:300], "bedrooms": 100,
        "listingType": "rent", "pricePeriod": "month", "description": ("Light rooms and a garden. " * 40)[:1000],
        "floorArea": 999999.99, "floorAreaUnit": "sqft", "agentName": ("Oluwaseun Adebayo-Williams " * 4)[:100],
        "agentPhone": "+234 (0) 803-555-0142 1234 5678 9012", "listingUrl": "https://x.example/" + "p" * 1980,
        "pageSize": "Letter",
    }
    pdf = render(payload, PHOTO)
    text = text_of(pdf)
    assert page_size(pdf) == (612, 792)
    assert "GH₵10,000,000,000,000" in text and "/ month" in text and "999,999.99 sq ft" in text
    heights: dict[str, float] = {}

    def visit(found: str, cm: Any, tm: Any, font: Any, size: Any) -> None:
        if found.strip():
            heights.setdefault(found.strip(), tm[4] * cm[1] + tm[5] * cm[3] + cm[5])

    PdfReader(io.BytesIO(pdf)).pages[0].extract_text(visitor_text=visit)
    # Top to bottom without overlap: the price, the facts, the contact panel, the footer.
    assert heights["GH₵10,000,000,000,000"] > heights["100 bedrooms"] > heights["CONTACT"] > heights[f"Job {JOB_ID}"]


# ---- the job: a bad photo never fails it ----

class Photos(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        ok = self.path == "/house.jpg"
        body = PHOTO if ok else b"gone"
        self.send_response(200 if ok else 404)
        self.send_header("Content-Type", "image/jpeg" if ok else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def photos() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Photos)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize(("path", "images"), [("/house.jpg", 1), ("/missing.jpg", 0)], ids=["good", "404"])
def test_listing_flyer_job_succeeds_with_its_photo_or_a_placeholder(
        conn: psycopg.Connection, photos: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        path: str, images: int) -> None:
    from pgqw import client, testing
    from pgqw.demo import listing_flyer

    for env, value in {"SIM_MIN_LATENCY_MS": "0", "SIM_MAX_LATENCY_MS": "0", "SIM_FAILURE_RATE": "0"}.items():
        monkeypatch.setenv(env, value)
    job = listing_flyer.enqueue(conn, {**FULL_EXAMPLE_LISTING, "photoUrl": photos + path})
    [ran] = testing.run_jobs(conn, tasks=[listing_flyer])
    assert ran.outcome == "succeeded", ran.error
    result = client.result(conn, job.id)
    assert result.content_type == "application/pdf" and len(images_of(result.data)) == images
    if not images:
        assert "photo left out (a placeholder instead): HTTP 404 Not Found" in caplog.text
