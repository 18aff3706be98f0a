"""`pgqw burst N`: N listing_flyer jobs sent at once through the API (each with its own idempotency
key), and a summary of what each request got. The CLI delegates here."""
from __future__ import annotations

import argparse
import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .. import config
from .listing import EXAMPLE_LISTING


@dataclass
class Sent:
    key: str
    status: int
    job_id: str | None
    error: str | None


def _api_token() -> str | None:
    """The first of API_TOKENS, so burst works against an API that asks for a token."""
    found = config.read("api_tokens")
    return found[0] if found else None


def post_job(base_url: str, key: str, payload: dict | None = None, timeout: float = 30.0) -> Sent:
    """One POST /api/jobs; never raises for an HTTP or network failure, it reports it."""
    body = json.dumps({"type": "listing_flyer", "payload": payload or EXAMPLE_LISTING}).encode()
    headers = {"Content-Type": "application/json", "Idempotency-Key": key}
    token = _api_token()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(f"{base_url}/api/jobs", data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            data = json.loads(response.read())
            return Sent(key, response.status, data["data"]["id"], None)
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read())["error"]["message"]
        except Exception:  # noqa: BLE001 - any unreadable body
            message = exc.reason
        return Sent(key, exc.code, None, str(message))
    except (urllib.error.URLError, OSError) as exc:
        return Sent(key, 0, None, str(getattr(exc, "reason", exc)))


def burst(base_url: str, n: int, *, prefix: str | None = None, progress: bool = True) -> list[Sent]:
    """Sends n jobs at once (distinct idempotency keys) and returns what each request got."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    prefix = prefix or f"burst-{int(time.time() * 1000)}"
    bar = Progress(TextColumn("sending"), BarColumn(), MofNCompleteColumn(), console=Console(stderr=True),
                   disable=not progress, transient=False)
    lock = threading.Lock()

    with bar:
        task = bar.add_task("burst", total=n)

        def one(i: int) -> Sent:
            sent = post_job(base_url, f"{prefix}-{i}")
            with lock:
                bar.advance(task)
            return sent

        with ThreadPoolExecutor(max_workers=min(n, 50)) as pool:
            results = list(pool.map(one, range(n)))
    return results


def _base_url(args: argparse.Namespace, settings: config.Settings) -> str:
    return (args.url or config.public_base_url(settings)).rstrip("/")


def cmd_burst(args: argparse.Namespace) -> int:
    settings = config.load()
    base = _base_url(args, settings)
    started = time.monotonic()
    results = burst(base, args.n)
    took = time.monotonic() - started
    codes = Counter(r.status for r in results)
    unreachable = codes.pop(0, 0)
    print(f"sent {args.n} jobs to {base} in {took:.2f}s")
    for code, count in sorted(codes.items()):
        print(f"  HTTP {code}: {count}")
    if unreachable:
        first = next(r.error for r in results if r.status == 0)
        print(f"  not reached: {unreachable} ({first})")
    errors = [r for r in results if r.error and r.status]
    for r in errors[:5]:
        print(f"  {r.key}: {r.status} {r.error}")
    ids = [r.job_id for r in results if r.job_id]
    if ids:
        print(f"  first job: {ids[0]}  (pgqw report timeline {ids[0]})")
    return 0 if codes.get(202, 0) + codes.get(200, 0) == args.n else 1
