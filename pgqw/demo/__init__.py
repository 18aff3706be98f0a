"""The demo's task types, defined the way an application defines its own (pgqw.tasks):

- listing_flyer: renders a property listing's one-page PDF flyer (flyer.py; the payload is listing.py's
  Listing); its result is the PDF, served by GET /api/jobs/{id}/flyer and /result. It simulates a slow,
  flaky renderer (SIM_MIN_LATENCY_MS, SIM_MAX_LATENCY_MS, SIM_FAILURE_RATE: settings.py) so retries and
  backoff can be watched, and fetches the listing's photo (photo.py) when it names one.
- noop: does nothing; measures the queue itself (benchmarks, latency).

`pgqw worker` loads this module when neither --tasks nor PGQW_TASKS names others. Importing it (to
register its task types) needs only the base install; rendering a flyer needs the demo extra
(reportlab: pip install 'pg-queue-worker[demo]'), which `pgqw worker` checks before it starts (EXTRAS).
`pgqw burst` (burst.py) and `pgqw check-idempotency` (idempotency.py) are the demo's commands.
"""
from __future__ import annotations

import random
import time
import uuid

from pydantic import BaseModel, ConfigDict

from .. import config
from ..tasks import Context, File, TransientError, task
from . import settings as demo_settings
from .listing import Listing

# The extras this module's tasks need, and what for (pgqw.errors.require_task_extras reads it).
EXTRAS = {"demo": "the demo's tasks (pgqw.demo)"}

demo_settings.load()  # a bad SIM_* or FLYER_PHOTO_* stops whatever loads the demo, at its start


class Nothing(BaseModel):
    model_config = ConfigDict(extra="allow", title="Nothing")


_rng = random.Random()


def render(listing: Listing, job_id: uuid.UUID, settings: config.Settings, photo: bytes | None = None) -> bytes:
    """The flyer's PDF: the work itself, with no simulated delay or failure and no fetch (`photo`: the
    image's bytes, else a placeholder)."""
    from .flyer import render_flyer  # reportlab (the demo extra): only processes that render

    return render_flyer(listing.model_dump(exclude_none=True), job_id=str(job_id),
                        flyer_url=demo_settings.flyer_url(settings, job_id), photo=photo)


@task("listing_flyer")
def listing_flyer(payload: Listing, ctx: Context) -> File:
    """Renders the listing's one-page PDF flyer (its photo, and a QR code to listingUrl or to the flyer)."""
    s = demo_settings.load()
    time.sleep(_rng.uniform(s.sim_min_latency_ms, s.sim_max_latency_ms) / 1000.0)
    if _rng.random() < s.sim_failure_rate:
        raise TransientError(f"Simulated rendering failure (SIM_FAILURE_RATE={s.sim_failure_rate:g})")
    photo = None
    if payload.photoUrl:
        from .photo import fetch_photo

        fetched = fetch_photo(payload.photoUrl, timeout_s=s.photo_timeout_ms / 1000, max_bytes=s.photo_max_bytes)
        if fetched.problem:
            ctx.log.warning("photo left out (a placeholder instead): %s", fetched.problem)
        photo = fetched.data
    pdf = render(payload, ctx.job_id, config.load(), photo)
    ctx.log.info("flyer rendered (%d KiB)", len(pdf) // 1024)
    return File(pdf, "application/pdf")


@task("noop")
def noop(payload: Nothing, ctx: Context) -> None:
    """Does nothing: measures the queue itself."""
    return None


def init_app(app: object) -> None:
    """Called by the API's create_app for a task module it loads: adds the demo's route and its
    console form (pgqw.demo.web)."""
    from .web import init_app as init  # flask (the api extra): only the API process

    init(app)
