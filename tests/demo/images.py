"""Pictures made on the spot for the demo's tests: a JPEG or PNG of a given size (Pillow)."""
from __future__ import annotations

import io

from PIL import Image, ImageDraw


def picture(width: int = 1200, height: int = 800, fmt: str = "JPEG") -> bytes:
    """A small scene (sky, lawn, a house) as JPEG or PNG bytes."""
    image = Image.new("RGB", (width, height), "#87b5e0")
    draw = ImageDraw.Draw(image)
    draw.rectangle([0, height * 0.68, width, height], fill="#5d9b4a")
    draw.polygon([(width * 0.25, height * 0.42), (width * 0.5, height * 0.16), (width * 0.75, height * 0.42)],
                 fill="#8e3b2f")
    draw.rectangle([width * 0.28, height * 0.42, width * 0.72, height * 0.74], fill="#efe6d2")
    out = io.BytesIO()
    image.save(out, fmt)
    return out.getvalue()
