"""An application's own task type: call a webhook, record what it answered.

    pgqw worker --tasks webhook_tasks          # from the folder holding this file

Each call sends the job's id as its Idempotency-Key header, so a receiver can recognise the retry
of a call it already handled (a worker can die after the call but before recording it). A 2xx
answer is the job's result; 4xx (but 408 and 429) will not get better by retrying and ends the job
at once; anything else is retried with backoff.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from pydantic import BaseModel, Field, HttpUrl

from pgqw.tasks import Context, PermanentError, Retry, task


class Webhook(BaseModel):
    url: HttpUrl
    body: dict[str, Any] = Field(default_factory=dict)
    timeout_s: float = Field(default=5.0, gt=0, le=60)


@task("call_webhook", queue="webhooks", max_attempts=6, lease_ms=30_000,
      retry=Retry(base_ms=1_000, max_delay_ms=60_000))
def call_webhook(payload: Webhook, ctx: Context) -> dict[str, Any]:
    """POSTs the body as JSON to the URL; the answer's status and body are the job's result."""
    request = urllib.request.Request(
        str(payload.url), data=json.dumps(payload.body).encode(), method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": str(ctx.job_id),
                 "User-Agent": "pgqw-webhook-example"})
    try:
        with urllib.request.urlopen(request, timeout=payload.timeout_s) as answer:
            status, raw = answer.status, answer.read(64 * 1024)
    except urllib.error.HTTPError as exc:
        if 400 <= exc.code < 500 and exc.code not in (408, 429):
            raise PermanentError(f"the webhook refused the call: HTTP {exc.code}") from None
        raise  # 5xx, 408, 429: retried with backoff
    ctx.log.info("webhook answered %s", status)
    try:
        body: Any = json.loads(raw)
    except ValueError:
        body = raw.decode(errors="replace")
    return {"status": status, "body": body}
