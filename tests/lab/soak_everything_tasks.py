"""The task of the soak with everything on (tests/lab/soak_everything.py), in a module of its own: only the
soak's workers import it (`pgqw worker --tasks tests.lab.soak_everything_tasks`), so the test process's own
task registry stays as the test suite expects."""
from __future__ import annotations

import time

from pydantic import BaseModel

from pgqw.tasks import Context, Retry, task

TYPE = "soak_work"


class Work(BaseModel):
    n: int
    mode: str = "ok"     # ok | flaky (fails its first attempt) | dead (fails while attempt <= 2)
    ms: int = 30


class SoakFailure(Exception):
    """The handler's planned failure."""


@task(TYPE, max_attempts=5, lease_ms=3000, retry=Retry(base_ms=100, max_delay_ms=500, max_jitter_ms=50))
def soak_work(payload: Work, ctx: Context) -> dict:
    """Sleeps payload.ms, checking for a cancel; fails as payload.mode says."""
    end = time.monotonic() + payload.ms / 1000
    while time.monotonic() < end:
        if ctx.cancel_requested():
            break
        time.sleep(0.01)
    if payload.mode == "flaky" and ctx.attempt == 1:
        raise SoakFailure("flaky: first attempt fails")
    if payload.mode == "dead" and ctx.attempt <= 2:
        raise SoakFailure("dead until retried")
    return {"n": payload.n}


