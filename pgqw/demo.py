"""The demo's task types, defined the way an application defines its own (pgqw.tasks):

- listing_flyer: renders a property listing's one-page PDF flyer; its result is the PDF, served by
  GET /api/jobs/{id}/flyer and /result. It simulates a slow, flaky renderer (SIM_MIN_LATENCY_MS,
  SIM_MAX_LATENCY_MS, SIM_FAILURE_RATE) so retries and backoff can be watched.
- noop: does nothing; measures the queue itself (benchmarks, latency).

`pgqw worker` loads this module when neither --tasks nor PGQW_TASKS names others. Importing it (to
register its task types) needs only the base install; rendering a flyer needs the demo extra
(reportlab: pip install 'pg-queue-worker[demo]'), which `pgqw worker` checks before it starts.
"""
from __future__ import annotations

import random
import time
import uuid
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from . import config
from .listing import ADDRESS_MAX, BEDROOMS_MAX, CURRENCIES, MAX_PRICE_MINOR, TITLE_MAX
from .tasks import Context, File, TransientError, task

if TYPE_CHECKING:
    Currency = str  # the codes of pgqw.listing.CURRENCIES, checked by the model at run time
else:
    Currency = Literal[tuple(sorted(CURRENCIES))]


class Listing(BaseModel):
    """A property listing: what the flyer shows."""

    model_config = ConfigDict(extra="forbid", strict=True, title="Listing")

    title: Annotated[str, Field(min_length=1, max_length=TITLE_MAX, pattern=r"\S")]
    priceMinor: Annotated[int, Field(ge=0, le=MAX_PRICE_MINOR, description="price in minor units (kobo, cents)")]
    currency: Currency
    address: Annotated[str, Field(min_length=1, max_length=ADDRESS_MAX, pattern=r"\S")]
    bedrooms: Annotated[int, Field(ge=0, le=BEDROOMS_MAX)]


class Nothing(BaseModel):
    model_config = ConfigDict(extra="allow", title="Nothing")


_rng = random.Random()


def render(listing: Listing, job_id: uuid.UUID, settings: config.Settings) -> bytes:
    """The flyer's PDF: the work itself, with no simulated delay or failure."""
    from .worker.flyer import render_flyer  # reportlab (the demo extra): only processes that render

    return render_flyer(listing.model_dump(), job_id=str(job_id), flyer_url=config.flyer_url(settings, job_id))


@task("listing_flyer")
def listing_flyer(payload: Listing, ctx: Context) -> File:
    """Renders the listing's one-page PDF flyer (with a QR code linking to it)."""
    s = config.load()
    time.sleep(_rng.uniform(s.sim_min_latency_ms, s.sim_max_latency_ms) / 1000.0)
    if _rng.random() < s.sim_failure_rate:
        raise TransientError(f"Simulated rendering failure (SIM_FAILURE_RATE={s.sim_failure_rate:g})")
    pdf = render(payload, ctx.job_id, s)
    ctx.log.info("flyer rendered (%d KiB)", len(pdf) // 1024)
    return File(pdf, "application/pdf")


@task("noop")
def noop(payload: Nothing, ctx: Context) -> None:
    """Does nothing: measures the queue itself."""
    return None
