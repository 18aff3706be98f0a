"""The demo's settings, declared the way pgqw.config declares the queue's (each field one setting: its
environment variable (PGQW_ + the name declared, which stays an alias), default, bounds and a line for
the docs, whose table in docs/demo.md is written by docs/tools/make_settings_doc.py), and the flyer's
link."""
from __future__ import annotations

from dataclasses import dataclass

from .. import config

DEMO = "demo"  # docs/demo.md, Settings


@dataclass(frozen=True)
class DemoSettings:
    # Simulated faults of the flyer work, so retries and backoff can be watched.
    sim_min_latency_ms: int = config.integer(
        "SIM_MIN_LATENCY_MS", 2000, minimum=0, tables=(DEMO,), doc="`listing_flyer`: the shortest simulated work")
    sim_max_latency_ms: int = config.integer(
        "SIM_MAX_LATENCY_MS", 4000, minimum=0, tables=(DEMO,),
        doc="`listing_flyer`: the longest simulated work (not below `PGQW_SIM_MIN_LATENCY_MS`)")
    sim_failure_rate: float = config.number(
        "SIM_FAILURE_RATE", 0.2, low=0.0, high=1.0, tables=(DEMO,),
        doc="`listing_flyer`: the chance an attempt fails (transient), 0 to 1; `1` makes every attempt fail, `0` none")
    # The listing's photo (photoUrl), fetched by the worker that renders the flyer.
    photo_timeout_ms: int = config.integer(
        "FLYER_PHOTO_TIMEOUT_MS", 5000, minimum=1, maximum=60_000, tables=(DEMO,),
        doc="a photo not fetched whole within this is left out (the flyer shows a placeholder)")
    photo_max_bytes: int = config.integer(
        "FLYER_PHOTO_MAX_BYTES", 15 * 1024 * 1024, minimum=1, maximum=100 * 1024 * 1024, tables=(DEMO,),
        doc="a photo larger than this is left out (the flyer shows a placeholder)")


SETTINGS: tuple[config.Setting, ...] = config.declared(DemoSettings)


def load() -> DemoSettings:
    """The demo's settings from the environment; ConfigError names a bad variable."""
    s = config.load_declared(DemoSettings)
    if s.sim_max_latency_ms < s.sim_min_latency_ms:
        by_field = {setting.field: setting for setting in SETTINGS}
        raise config.ConfigError(
            f"{by_field['sim_max_latency_ms'].variable()} ({s.sim_max_latency_ms}) must not be below "
            f"{by_field['sim_min_latency_ms'].variable()} ({s.sim_min_latency_ms})"
        )
    return s


def flyer_url(settings: config.Settings, job_id: object) -> str:
    """Where a flyer is served: GET /api/jobs/{id}/flyer under PUBLIC_URL (its QR code when the listing
    names no listingUrl)."""
    return f"{config.public_base_url(settings)}/api/jobs/{job_id}/flyer"
