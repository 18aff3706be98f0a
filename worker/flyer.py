"""Render a printable A4 property-listing flyer (PDF) for the ``listing_flyer`` job."""

from __future__ import annotations

import functools
import io
from pathlib import Path
from xml.sax.saxutils import escape

from pgqw.errors import MissingExtra

try:  # reportlab is the demo extra
    from reportlab.graphics import renderPDF
    from reportlab.graphics.barcode.qr import QrCodeWidget
    from reportlab.graphics.shapes import Drawing
    from reportlab.lib import colors
    from reportlab.lib.enums import TA_CENTER
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import ParagraphStyle
    from reportlab.lib.units import mm
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont
    from reportlab.pdfgen.canvas import Canvas
    from reportlab.platypus import Paragraph
except ModuleNotFoundError as exc:
    if (exc.name or "").partition(".")[0] != "reportlab":
        raise
    raise MissingExtra("demo", "the demo's listing flyer (pgqw.worker.flyer)") from None

from pgqw.listing import check_listing, format_price

FONT_DIR = Path(__file__).parent / "fonts"
REGULAR = "DejaVuSans"
BOLD = "DejaVuSans-Bold"

PAGE_W, PAGE_H = A4
MARGIN = 18 * mm
CONTENT_W = PAGE_W - 2 * MARGIN
INK = colors.HexColor("#1B2631")
BRAND = colors.HexColor("#1F3A5F")
ACCENT = colors.HexColor("#B03A2E")
MUTED = colors.HexColor("#5D6D7E")
RULE = colors.HexColor("#D5D8DC")
PANEL = colors.HexColor("#EEF2F6")


@functools.cache
def _register_fonts() -> None:
    """Register DejaVu Sans (it has ₦, ₵, ₹; the built-in Helvetica does not)."""
    pdfmetrics.registerFont(TTFont(REGULAR, str(FONT_DIR / "DejaVuSans.ttf")))
    pdfmetrics.registerFont(TTFont(BOLD, str(FONT_DIR / "DejaVuSans-Bold.ttf")))


def _para(text: str, font: str, size: float, color: colors.Color, **kw: object) -> Paragraph:
    style = ParagraphStyle(
        "p", fontName=font, fontSize=size, leading=size * 1.2, textColor=color, **kw
    )
    return Paragraph(escape(text), style)


def _draw_top(c: Canvas, para: Paragraph, top: float, width: float = CONTENT_W) -> float:
    """Draw a paragraph with its top edge at ``top``; return its bottom edge."""
    _, h = para.wrapOn(c, width, PAGE_H)
    para.drawOn(c, MARGIN, top - h)
    return top - h


def _fitted_title(c: Canvas, title: str, max_h: float) -> Paragraph:
    """The largest title size (down to 16 pt) whose wrapped text fits ``max_h``."""
    for size in (32, 28, 24, 20, 16):
        para = _para(title, BOLD, size, INK)
        if para.wrapOn(c, CONTENT_W, PAGE_H)[1] <= max_h:
            break
    return para


def _label(c: Canvas, text: str, top: float) -> float:
    c.setFont(BOLD, 9)
    c.setFillColor(MUTED)
    c.drawString(MARGIN, top - 9, text.upper())
    return top - 14


def render_flyer(payload: dict, *, job_id: str, flyer_url: str) -> bytes:
    """Validate ``payload`` (raising InvalidPayload) and return the flyer PDF bytes."""
    check_listing(payload)
    _register_fonts()
    price = format_price(payload["priceMinor"], payload["currency"])
    bedrooms = payload["bedrooms"]

    buf = io.BytesIO()
    c = Canvas(buf, pagesize=A4, invariant=1, pageCompression=1, initialFontName=REGULAR)
    c.setTitle(payload["title"])
    c.setSubject(f"Property listing flyer, job {job_id}")
    c.setCreator("pg-queue-worker")
    c.setAuthor("pg-queue-worker")

    # Heading band.
    band_h = 20 * mm
    top = PAGE_H - MARGIN
    c.setFillColor(BRAND)
    c.roundRect(MARGIN, top - band_h, CONTENT_W, band_h, 3 * mm, stroke=0, fill=1)
    c.setFillColor(colors.white)
    c.setFont(BOLD, 20)
    c.drawString(MARGIN + 7 * mm, top - band_h / 2 - 7, "PROPERTY LISTING")
    c.setFont(REGULAR, 11)
    c.drawRightString(MARGIN + CONTENT_W - 7 * mm, top - band_h / 2 - 4, "For details, scan the code below")
    y = top - band_h - 12 * mm

    # Title, then the price as large as fits one line.
    y = _draw_top(c, _fitted_title(c, payload["title"], 125), y)
    y -= 10 * mm
    size = 48.0
    while size > 20 and pdfmetrics.stringWidth(price, BOLD, size) > CONTENT_W:
        size -= 2
    c.setFont(BOLD, size)
    c.setFillColor(ACCENT)
    c.drawString(MARGIN, y - size * 0.8, price)
    y -= size + 6 * mm

    c.setStrokeColor(RULE)
    c.setLineWidth(1)
    c.line(MARGIN, y, MARGIN + CONTENT_W, y)
    y -= 7 * mm

    # Details.
    y = _label(c, "Address", y)
    y = _draw_top(c, _para(payload["address"], REGULAR, 15, INK), y) - 6 * mm
    y = _label(c, "Bedrooms", y)
    rooms = f"{bedrooms} bedroom" + ("" if bedrooms == 1 else "s")
    _draw_top(c, _para(rooms, REGULAR, 15, INK), y)

    # QR code centred on a panel above the footer, the URL printed under it.
    footer_y = MARGIN
    qr_size = 60 * mm
    pad = 6 * mm
    url = _para(flyer_url, REGULAR, 9, INK, alignment=TA_CENTER)
    _, url_h = url.wrapOn(c, CONTENT_W - 2 * pad, PAGE_H)
    panel_y = footer_y + 9 * mm
    url_top = panel_y + pad + url_h
    qr_y = url_top + 1 * mm
    caption_y = qr_y + qr_size + 4 * mm
    panel_h = caption_y + 12 + pad - panel_y
    c.setFillColor(PANEL)
    c.roundRect(MARGIN, panel_y, CONTENT_W, panel_h, 3 * mm, stroke=0, fill=1)
    url.drawOn(c, MARGIN + pad, url_top - url_h)
    c.setFillColor(colors.white)
    c.rect((PAGE_W - qr_size) / 2, qr_y, qr_size, qr_size, stroke=0, fill=1)
    drawing = Drawing(qr_size, qr_size)
    drawing.add(QrCodeWidget(flyer_url, barLevel="M", barWidth=qr_size, barHeight=qr_size))
    renderPDF.draw(drawing, c, (PAGE_W - qr_size) / 2, qr_y)
    c.setFont(BOLD, 14)
    c.setFillColor(BRAND)
    c.drawCentredString(PAGE_W / 2, caption_y, "Scan for photos and full details")

    # Footer.
    c.setStrokeColor(RULE)
    c.line(MARGIN, footer_y + 5 * mm, MARGIN + CONTENT_W, footer_y + 5 * mm)
    c.setFont(REGULAR, 7)
    c.setFillColor(MUTED)
    c.drawString(MARGIN, footer_y, f"Job {job_id}")
    c.drawRightString(MARGIN + CONTENT_W, footer_y, "Generated by pg-queue-worker")

    c.showPage()
    c.save()
    return buf.getvalue()
