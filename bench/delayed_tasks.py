"""The task type of the delayed-jobs benchmark (bench/delayed.py), loaded by its workers with
PGQW_TASKS=pgqw.demo,bench.delayed_tasks: fails its first attempt (a transient error, so it is retried
after the task type's backoff, queue_settings' by default) and does nothing on the next."""
from __future__ import annotations

from pgqw.tasks import Context, TransientError, task


@task("bench_fail_once")
def bench_fail_once(payload: dict, ctx: Context) -> None:
    if ctx.attempt == 1:
        raise TransientError("first attempt fails on purpose (a retry to start on time)")
