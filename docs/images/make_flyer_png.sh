#!/bin/sh
# Regenerate docs/images/flyer-page1.png (the full example listing, with a photo) and
# docs/images/flyer-minimal.png (the five required fields alone), page 1 of each flyer at 100 dpi:
#   PYTHON=/path/to/venv/bin/python docs/images/make_flyer_png.sh
# It renders pgqw.demo.listing's FULL_EXAMPLE_LISTING and EXAMPLE_LISTING with
# pgqw.demo.flyer.render_flyer (the photo is a drawing made here with Pillow, fetched by the
# worker's own code from a loopback server), then runs for each
#   pdftoppm -png -r 100 -singlefile flyer.pdf docs/images/NAME
# Needs the demo extra for PYTHON and pdftoppm (Debian: apt-get install poppler-utils).
set -eu
cd "$(dirname "$0")/../.."
DIR="${TMPDIR:-/tmp}"
PYTHONPATH=. "${PYTHON:-python3}" - "$DIR/flyer-full.pdf" "$DIR/flyer-minimal.pdf" <<'PY'
import io
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from PIL import Image, ImageDraw, ImageFilter

from pgqw.demo.flyer import render_flyer
from pgqw.demo.listing import EXAMPLE_LISTING, FULL_EXAMPLE_LISTING
from pgqw.demo.photo import fetch_photo


def drawing(w: int = 2400, h: int = 1600) -> bytes:
    """A sunny street-side view of a three-storey block of flats, as a JPEG."""
    img = Image.new("RGB", (w, h))
    d = ImageDraw.Draw(img)
    for y in range(h):  # the sky, lighter towards the horizon
        t = y / h
        d.line([(0, y), (w, y)], fill=(int(90 + 110 * t), int(150 + 80 * t), int(215 + 30 * t)))
    d.ellipse([w * 0.80, h * 0.08, w * 0.90, h * 0.08 + w * 0.10], fill=(255, 236, 170))
    d.rectangle([0, h * 0.78, w, h], fill=(96, 150, 80))                   # the lawn
    d.polygon([(w * 0.42, h), (w * 0.47, h * 0.78), (w * 0.53, h * 0.78), (w * 0.58, h)], fill=(205, 196, 178))
    x0, x1, top, base = w * 0.22, w * 0.78, h * 0.22, h * 0.80               # the block
    d.rectangle([x0, top, x1, base], fill=(238, 226, 204))
    d.rectangle([x0 - 20, top - 40, x1 + 20, top], fill=(120, 72, 52))      # the roof's edge
    for floor in range(3):
        fy = top + 60 + floor * (base - top - 120) / 3
        for col in range(6):
            fx = x0 + 60 + col * (x1 - x0 - 120) / 6
            d.rectangle([fx + 20, fy + 20, fx + 150, fy + 190], fill=(70, 110, 150))
            d.line([(fx + 85, fy + 20), (fx + 85, fy + 190)], fill=(238, 226, 204), width=8)
        d.rectangle([x0, fy + 215, x1, fy + 232], fill=(200, 186, 160))     # a balcony rail
    d.rectangle([w * 0.47, base - 260, w * 0.53, base], fill=(110, 72, 44))  # the door
    for cx in (w * 0.10, w * 0.90):                                          # two trees
        d.rectangle([cx - 25, h * 0.58, cx + 25, h * 0.82], fill=(100, 70, 45))
        d.ellipse([cx - 190, h * 0.30, cx + 190, h * 0.66], fill=(58, 120, 62))
    out = io.BytesIO()
    img.filter(ImageFilter.GaussianBlur(1.2)).save(out, "JPEG", quality=90)
    return out.getvalue()


PHOTO = drawing()


class Serve(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "image/jpeg")
        self.send_header("Content-Length", str(len(PHOTO)))
        self.end_headers()
        self.wfile.write(PHOTO)


server = ThreadingHTTPServer(("127.0.0.1", 0), Serve)
threading.Thread(target=server.serve_forever, daemon=True).start()
photo = fetch_photo(f"http://127.0.0.1:{server.server_address[1]}/yaba.jpg", timeout_s=5, max_bytes=15 << 20)
server.shutdown()
assert photo.data is not None, photo.problem

job_id = "0d9c5a3e-2f4b-4c61-9a57-3c1e8f0b7d21"
flyer_url = f"https://queue.example.com/api/jobs/{job_id}/flyer"
full = render_flyer(FULL_EXAMPLE_LISTING, job_id=job_id, flyer_url=flyer_url, photo=photo.data)
minimal = render_flyer(EXAMPLE_LISTING, job_id=job_id, flyer_url=flyer_url)
open(sys.argv[1], "wb").write(full)
open(sys.argv[2], "wb").write(minimal)
PY
pdftoppm -png -r 100 -singlefile "$DIR/flyer-full.pdf" docs/images/flyer-page1
pdftoppm -png -r 100 -singlefile "$DIR/flyer-minimal.pdf" docs/images/flyer-minimal
