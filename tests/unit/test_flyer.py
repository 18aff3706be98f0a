"""Flyer PDF rendering (no database)."""

import io

import pytest
from pypdf import PdfReader

from pgqw.demo.flyer import render_flyer
from pgqw.demo.listing import InvalidPayload

EXAMPLE = {
    "title": "3-bedroom apartment in Yaba",
    "priceMinor": 270000000,
    "currency": "NGN",
    "address": "12 Herbert Macaulay Way, Yaba, Lagos",
    "bedrooms": 3,
}
JOB_ID = "0d9c5a3e-2f4b-4c61-9a57-3c1e8f0b7d21"
URL = f"https://example.com/flyers/{JOB_ID}"


def render(payload=EXAMPLE):
    return render_flyer(payload, job_id=JOB_ID, flyer_url=URL)


def text_of(pdf: bytes) -> str:
    """All page text, whitespace collapsed so line wrapping does not matter."""
    reader = PdfReader(io.BytesIO(pdf))
    return " ".join(" ".join(p.extract_text() for p in reader.pages).split())


def test_render_flyer_contains_listing_text():
    text = text_of(render())
    assert "3-bedroom apartment in Yaba" in text
    assert "₦2,700,000" in text
    assert "12 Herbert Macaulay Way, Yaba, Lagos" in text
    assert "3 bedrooms" in text
    assert URL in text
    assert JOB_ID in text


def test_render_flyer_is_one_a4_page():
    reader = PdfReader(io.BytesIO(render()))
    assert len(reader.pages) == 1
    box = reader.pages[0].mediabox
    assert (round(float(box.width)), round(float(box.height))) == (595, 842)


def test_render_flyer_embeds_font_with_naira_sign():
    reader = PdfReader(io.BytesIO(render()))
    fonts = reader.pages[0]["/Resources"]["/Font"].values()
    names = {f.get_object()["/BaseFont"] for f in fonts}
    assert any(n.endswith("+DejaVuSans-Bold") for n in names)


def test_render_flyer_is_deterministic_and_small():
    pdf = render()
    assert pdf.startswith(b"%PDF-")
    assert pdf == render()
    assert len(pdf) < 80_000


def test_render_flyer_escapes_markup_in_text():
    payload = {**EXAMPLE, "title": "Flat <b>& garden</b>", "address": "1 A&B Road <x>"}
    text = text_of(render(payload))
    assert "Flat <b>& garden</b>" in text
    assert "1 A&B Road <x>" in text


def text_heights(pdf: bytes) -> dict[str, float]:
    """Baseline height (pt from the page bottom) of each text run on page 1."""
    heights: dict[str, float] = {}

    def visit(text, cm, tm, font, size):
        if text.strip():
            heights[text.strip()] = tm[4] * cm[1] + tm[5] * cm[3] + cm[5]

    PdfReader(io.BytesIO(pdf)).pages[0].extract_text(visitor_text=visit)
    return heights


def test_render_flyer_fits_longest_valid_fields():
    payload = {
        "title": ("Spacious five bedroom duplex " * 8)[:200],
        "priceMinor": 10**15,
        "currency": "GHS",
        "address": ("Plot 1234, Admiralty Way, Lekki Phase 1, Lagos. " * 7)[:300],
        "bedrooms": 1,
    }
    pdf = render(payload)
    text = text_of(pdf)
    assert "GH₵10,000,000,000,000" in text
    assert "1 bedroom" in text
    heights = text_heights(pdf)
    # The details end above the QR panel's caption: nothing overlaps.
    assert heights["1 bedroom"] > heights["Scan to keep this flyer on your phone"] + 20


def test_render_flyer_rejects_invalid_payload_naming_fields():
    bad = {**EXAMPLE, "priceMinor": -1, "currency": "XXX"}
    del bad["address"]
    with pytest.raises(InvalidPayload) as exc:
        render(bad)
    assert [e["field"] for e in exc.value.errors] == ["priceMinor", "currency", "address"]


def test_render_flyer_rejects_non_object_payload():
    with pytest.raises(InvalidPayload) as exc:
        render_flyer(["not", "a", "dict"], job_id=JOB_ID, flyer_url=URL)  # type: ignore[arg-type]
    assert exc.value.errors[0]["field"] == "payload"
