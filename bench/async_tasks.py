"""The task type of the async drain (`python -m bench.worker_ab --async-handlers`), loaded by its
workers with PGQW_TASKS=pgqw.demo,bench.async_tasks: the demo's no-op as an `async def` handler, to
measure the worker's path for coroutines against the executor threads' path for plain handlers."""
from __future__ import annotations

from pgqw.tasks import Context, task

NOOP_ASYNC = "noop_async"


@task(NOOP_ASYNC)
async def noop_async(payload: dict, ctx: Context) -> None:
    """Does nothing, on the worker's event loop."""
    return None
