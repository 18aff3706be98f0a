"""Render a printable one-page property-listing flyer (PDF, A4 or Letter) for the ``listing_flyer`` job.

From the top: a band saying for sale, for rent or property listing; the photo (resampled to 300 dpi of
its printed size, cropped to fill its frame; a drawn placeholder when there is none or it cannot be
read); the title, address and price (with the rent's period); the facts (bedrooms, floor area); the
description; a panel with the agent's name and phone beside a QR code; a footer with the job's id.
The QR code links to listingUrl, or without one to the flyer itself (GET /api/jobs/{id}/flyer), and its
link is printed under it. Everything but the photo is vector (text in DejaVu Sans, embedded, so ₦, ₵,
₹ and m² print), and the output is deterministic: the same payload and photo give the same bytes.
"""

from __future__ import annotations

import functools
import io
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from pgqw.errors import MissingExtra

try:  # reportlab (and Pillow under it) is the demo extra
    from PIL import Image, ImageOps
    from reportlab.graphics import renderPDF
    from reportlab.graphics.barcode.qr import QrCodeWidget
    from reportlab.graphics.shapes import Drawing
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4, LETTER
    from reportlab.lib.styles import ParagraphStyle
    from reportlab.lib.units import mm
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont
    from reportlab.pdfgen.canvas import Canvas
    from reportlab.platypus import Paragraph
except ModuleNotFoundError as exc:
    if (exc.name or "").partition(".")[0] not in ("reportlab", "PIL"):
        raise
    raise MissingExtra("demo", "the demo's listing flyer (pgqw.demo.flyer)") from None

from .listing import check_listing, format_area, format_price
from .photo import image_problem

FONT_DIR = Path(__file__).parent / "fonts"
REGULAR = "DejaVuSans"
BOLD = "DejaVuSans-Bold"

PAGE_SIZES = {"A4": A4, "Letter": LETTER}
DPI = 300  # the photo's resolution on paper
MARGIN = 14 * mm
INK = colors.HexColor("#1B2631")
BRAND = colors.HexColor("#1F3A5F")
ACCENT = colors.HexColor("#B03A2E")
MUTED = colors.HexColor("#5D6D7E")
RULE = colors.HexColor("#D5D8DC")
PANEL = colors.HexColor("#EEF2F6")
TINT = colors.HexColor("#C9D6E3")

BAND_H = 15 * mm
PANEL_H = 50 * mm
QR_SIZE = 36 * mm
FOOTER_H = 7 * mm
GAP = 4 * mm
PHOTO_MIN, PHOTO_MAX = 0.36, 0.8  # the photo's height, as a share of the content width
DESCRIPTION_ROOM = 110  # what the photo leaves the description at least, when it can
URL_SHOWN = 90  # characters of a link printed under its QR code (the code holds all of it)


@functools.cache
def _register_fonts() -> None:
    """Register DejaVu Sans (it has ₦, ₵, ₹ and ²; the built-in Helvetica does not)."""
    pdfmetrics.registerFont(TTFont(REGULAR, str(FONT_DIR / "DejaVuSans.ttf")))
    pdfmetrics.registerFont(TTFont(BOLD, str(FONT_DIR / "DejaVuSans-Bold.ttf")))


def _para(text: str, font: str, size: float, color: Any, leading: float = 1.25, **kw: Any) -> Paragraph:
    style = ParagraphStyle("p", fontName=font, fontSize=size, leading=size * leading, textColor=color, **kw)
    return Paragraph(escape(text).replace("\n", "<br/>"), style)


def _height(c: Canvas, para: Paragraph, width: float) -> float:
    return float(para.wrapOn(c, width, 10_000)[1])


def _fitted(c: Canvas, text: str, font: str, sizes: tuple[float, ...], width: float, max_h: float,
            color: Any) -> Paragraph:
    """The paragraph at the largest of `sizes` whose wrapped text fits `max_h` (else the smallest)."""
    for size in sizes:
        para = _para(text, font, size, color)
        if _height(c, para, width) <= max_h:
            break
    return para


def _fit_line(text: str, font: str, size: float, width: float, smallest: float) -> float:
    while size > smallest and pdfmetrics.stringWidth(text, font, size) > width:
        size -= 1
    return size


def _shortened(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ----------------------------------------------------------------------------- the photo

def _photo_image(photo: bytes, w: float, h: float) -> ImageReader | None:
    """The photo cropped to fill w × h points and resampled to DPI, as a JPEG; None when unreadable."""
    if image_problem(photo):
        return None
    try:
        with Image.open(io.BytesIO(photo)) as opened:
            image = ImageOps.exif_transpose(opened)
            if image.mode in ("RGBA", "LA", "P"):
                image = image.convert("RGBA")
                flat = Image.new("RGB", image.size, "white")
                flat.paste(image, mask=image.getchannel("A"))
                image = flat
            image = image.convert("RGB")
            size = (round(w / 72 * DPI), round(h / 72 * DPI))
            image = ImageOps.fit(image, size, Image.Resampling.LANCZOS)
            out = io.BytesIO()
            image.save(out, "JPEG", quality=88, optimize=True, dpi=(DPI, DPI))
    except Exception:  # noqa: BLE001 - a photo that cannot be drawn is only a placeholder
        return None
    return ImageReader(io.BytesIO(out.getvalue()))


def _placeholder(c: Canvas, x: float, y: float, w: float, h: float) -> None:
    """A tinted frame with a line drawing of a house: where the photo would be."""
    c.setFillColor(PANEL)
    c.rect(x, y, w, h, stroke=0, fill=1)
    s = min(w, h) * 0.32  # the house's width
    cx, base = x + w / 2, y + h / 2 - s * 0.42
    c.setStrokeColor(TINT)
    c.setLineWidth(max(2.0, s / 22))
    c.setLineJoin(1)
    body = c.beginPath()
    body.moveTo(cx - s / 2, base + s * 0.55)
    body.lineTo(cx, base + s * 0.95)
    body.lineTo(cx + s / 2, base + s * 0.55)
    c.drawPath(body, stroke=1, fill=0)
    c.rect(cx - s * 0.38, base, s * 0.76, s * 0.62, stroke=1, fill=0)
    c.rect(cx - s * 0.09, base, s * 0.18, s * 0.32, stroke=1, fill=0)
    c.rect(cx - s * 0.29, base + s * 0.34, s * 0.13, s * 0.13, stroke=1, fill=0)
    c.rect(cx + s * 0.16, base + s * 0.34, s * 0.13, s * 0.13, stroke=1, fill=0)


# ----------------------------------------------------------------------------- the page

def _facts(payload: dict[str, Any]) -> list[tuple[str, str]]:
    bedrooms = payload["bedrooms"]
    found = [("BEDROOMS", f"{bedrooms} bedroom" + ("" if bedrooms == 1 else "s"))]
    if "floorArea" in payload:
        found.append(("FLOOR AREA", format_area(payload["floorArea"], payload["floorAreaUnit"])))
    if "listingType" in payload:
        found.append(("LISTING", "For rent" if payload["listingType"] == "rent" else "For sale"))
    return found


def _qr(c: Canvas, url: str, x: float, y: float, size: float) -> None:
    c.setFillColor(colors.white)
    c.rect(x - 2 * mm, y - 2 * mm, size + 4 * mm, size + 4 * mm, stroke=0, fill=1)
    widget = QrCodeWidget(url, barLevel="M", barWidth=size, barHeight=size)
    drawing = Drawing(size, size)
    drawing.add(widget)
    renderPDF.draw(drawing, c, x, y)


def render_flyer(payload: dict[str, Any], *, job_id: str, flyer_url: str, photo: bytes | None = None) -> bytes:
    """Validate ``payload`` (raising InvalidPayload) and return the flyer's PDF bytes. ``photo``: the
    listing's photo (JPEG or PNG bytes) or None; one that cannot be read is drawn as the placeholder."""
    payload = check_listing(payload).model_dump(exclude_none=True)
    _register_fonts()
    page_w, page_h = PAGE_SIZES[payload["pageSize"]]
    content_w = page_w - 2 * MARGIN
    left = MARGIN

    buf = io.BytesIO()
    c = Canvas(buf, pagesize=(page_w, page_h), invariant=1, pageCompression=1, initialFontName=REGULAR)
    c.setTitle(payload["title"])
    c.setSubject(f"Property listing flyer, job {job_id}")
    c.setCreator("pg-queue-worker")
    c.setAuthor(payload.get("agentName", "pg-queue-worker"))

    # What the text needs, measured first: the photo takes what is left, within its bounds.
    title = _fitted(c, payload["title"], BOLD, (26, 23, 20, 17), content_w, 70, INK)
    address = _fitted(c, payload["address"], REGULAR, (13, 11.5, 10), content_w, 40, MUTED)
    price = format_price(payload["priceMinor"], payload["currency"])
    period = f" / {payload['pricePeriod']}" if "pricePeriod" in payload else ""
    facts = _facts(payload)
    fixed = BAND_H + GAP + _height(c, title, content_w) + 2 + _height(c, address, content_w) + GAP + 40 \
        + GAP + 34 + GAP + PANEL_H + FOOTER_H
    top, bottom = page_h - MARGIN, MARGIN
    room = top - bottom - fixed
    leave = DESCRIPTION_ROOM if "description" in payload else 0
    photo_h = max(PHOTO_MIN * content_w, min(PHOTO_MAX * content_w, room - leave))
    description = None
    if "description" in payload:  # at the largest size that fits beside the photo; cut short if none does
        text, space = payload["description"], room - photo_h - GAP
        description = _fitted(c, text, REGULAR, (11.5, 10.5, 9.5, 8.5), content_w, space, INK)
        while _height(c, description, content_w) > space and len(text) > 40:
            text = text[: int(len(text) * 0.9)].rsplit(" ", 1)[0] + "…"
            description = _para(text, REGULAR, 8.5, INK)
        photo_h = max(PHOTO_MIN * content_w,
                      min(PHOTO_MAX * content_w, room - _height(c, description, content_w) - GAP))

    # The band.
    y = top
    c.setFillColor(BRAND)
    c.rect(left, y - BAND_H, content_w, BAND_H, stroke=0, fill=1)
    c.setFillColor(colors.white)
    badge = {"sale": "FOR SALE", "rent": "FOR RENT"}.get(payload.get("listingType", ""), "PROPERTY LISTING")
    c.setFont(BOLD, 19)
    c.drawString(left + 6 * mm, y - BAND_H / 2 - 6.5, badge)
    if "listingUrl" in payload:
        c.setFont(REGULAR, 10)
        c.drawRightString(left + content_w - 6 * mm, y - BAND_H / 2 - 3.5, "Photos and details: scan the code")
    y -= BAND_H

    # The photo, flush under the band.
    image = _photo_image(photo, content_w, photo_h) if photo else None
    if image is not None:
        c.drawImage(image, left, y - photo_h, content_w, photo_h)
    else:
        _placeholder(c, left, y - photo_h, content_w, photo_h)
    y -= photo_h + GAP

    # Title, address, price.
    h = _height(c, title, content_w)
    title.drawOn(c, left, y - h)
    y -= h + 2
    h = _height(c, address, content_w)
    address.drawOn(c, left, y - h)
    y -= h + GAP
    size = _fit_line(price, BOLD, 34, content_w - pdfmetrics.stringWidth(period, REGULAR, 17), 16)
    c.setFillColor(ACCENT)
    c.setFont(BOLD, size)
    c.drawString(left, y - size * 0.95, price)
    if period:
        c.setFillColor(MUTED)
        c.setFont(REGULAR, size * 0.5)
        c.drawString(left + pdfmetrics.stringWidth(price, BOLD, size) + 2, y - size * 0.95, period)
    y -= 40 + GAP

    # The facts, in cells.
    cell_w = (content_w - 2 * 3 * mm) / 3
    for i, (label, value) in enumerate(facts):
        x = left + i * (cell_w + 3 * mm)
        c.setFillColor(PANEL)
        c.roundRect(x, y - 34, cell_w, 34, 2 * mm, stroke=0, fill=1)
        c.setFillColor(MUTED)
        c.setFont(BOLD, 7.5)
        c.drawString(x + 3 * mm, y - 11, label)
        c.setFillColor(INK)
        c.setFont(BOLD, _fit_line(value, BOLD, 14, cell_w - 6 * mm, 9))
        c.drawString(x + 3 * mm, y - 27, value)
    y -= 34 + GAP

    # The description.
    if description is not None:
        h = _height(c, description, content_w)
        description.drawOn(c, left, y - h)

    # The contact panel: the agent at left, the QR code at right.
    panel_y = bottom + FOOTER_H
    c.setFillColor(PANEL)
    c.roundRect(left, panel_y, content_w, PANEL_H, 3 * mm, stroke=0, fill=1)
    pad = 6 * mm
    qr_x = left + content_w - pad - QR_SIZE
    qr_y = panel_y + (PANEL_H - QR_SIZE) / 2 + 3
    link = payload.get("listingUrl", flyer_url)
    _qr(c, link, qr_x, qr_y, QR_SIZE)
    text_w = qr_x - left - 2 * pad
    caption = "Scan for photos and full details" if "listingUrl" in payload else "Scan to keep this flyer on your phone"
    shown_link = _para(_shortened(link, URL_SHOWN), REGULAR, 7.5, MUTED)
    ty = panel_y + PANEL_H - pad
    if "agentName" in payload or "agentPhone" in payload:
        c.setFillColor(MUTED)
        c.setFont(BOLD, 8)
        c.drawString(left + pad, ty - 8, "CONTACT")
        ty -= 14
        if "agentName" in payload:
            name = _fitted(c, payload["agentName"], BOLD, (16, 14, 12, 10), text_w, 40, BRAND)
            h = _height(c, name, text_w)
            name.drawOn(c, left + pad, ty - h)
            ty -= h + 2
        if "agentPhone" in payload:
            c.setFillColor(INK)
            c.setFont(BOLD, 15)
            c.drawString(left + pad, ty - 15, payload["agentPhone"])
        cap = _para(caption, REGULAR, 9.5, INK)
        _height(c, cap, text_w)  # wrapped, so it can be drawn
        link_h = _height(c, shown_link, text_w)
        cap.drawOn(c, left + pad, panel_y + pad + link_h + 2)
        shown_link.drawOn(c, left + pad, panel_y + pad)
    else:  # no agent: the code is what the panel offers
        cap = _para(caption, BOLD, 15, BRAND)
        h = _height(c, cap, text_w)
        cap.drawOn(c, left + pad, ty - h)
        ty -= h + 3
        h = _height(c, shown_link, text_w)
        shown_link.drawOn(c, left + pad, ty - h)

    # The footer.
    c.setFont(REGULAR, 7)
    c.setFillColor(MUTED)
    c.drawString(left, bottom, f"Job {job_id}")
    c.drawRightString(left + content_w, bottom, "Generated by pg-queue-worker")

    c.showPage()
    c.save()
    return buf.getvalue()
