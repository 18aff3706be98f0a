#!/bin/sh
# Regenerate docs/images/flyer-page1.png (page 1 of the example flyer at 100 dpi):
#   PYTHON=/path/to/venv/bin/python docs/images/make_flyer_png.sh
# It renders the example payload with worker.flyer.render_flyer, then runs
#   pdftoppm -png -r 100 -singlefile flyer.pdf docs/images/flyer-page1
# Needs reportlab for PYTHON and pdftoppm (Debian: apt-get install poppler-utils).
set -eu
cd "$(dirname "$0")/../.."
PDF="${TMPDIR:-/tmp}/flyer-example.pdf"
PYTHONPATH=. "${PYTHON:-python3}" - "$PDF" <<'PY'
import sys
from worker.flyer import render_flyer

payload = {"title": "3-bedroom apartment in Yaba", "priceMinor": 270000000, "currency": "NGN",
           "address": "12 Herbert Macaulay Way, Yaba, Lagos", "bedrooms": 3}
job_id = "0d9c5a3e-2f4b-4c61-9a57-3c1e8f0b7d21"
pdf = render_flyer(payload, job_id=job_id, flyer_url=f"https://example.com/flyers/{job_id}")
open(sys.argv[1], "wb").write(pdf)
PY
pdftoppm -png -r 100 -singlefile "$PDF" docs/images/flyer-page1
