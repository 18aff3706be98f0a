"""Django's connections around each attempt, as Django manages them around each request.

Django opens one connection per thread, when the thread first uses the ORM, and relies on the request
signals to close it again: `close_old_connections()` when a request starts and when it ends (closing the
connections that are past CONN_MAX_AGE, that an error left unusable, or whose autocommit was left changed;
with CONN_HEALTH_CHECKS, marking them to be checked at their next use), and `reset_queries()` when it
starts. A worker has no requests, and its executor threads live as long as it does: without this, a thread's
connection would stay open for ever (CONN_MAX_AGE = 0 included), and one the server dropped would fail
every later attempt on that thread.

So the worker that `manage.py pgqw_worker` starts runs each task's handler inside `around_attempt`:
  - a plain handler runs on an executor thread, where the cleanup runs too, before and after it;
  - an `async def` handler runs on the worker's event loop; its ORM calls (the async ORM API, or
    `sync_to_async`) run in a thread of this attempt alone (asgiref's ThreadSensitiveContext, as Django's
    ASGI handler gives each request one), and the cleanup runs in that thread (Django refuses to close a
    connection from the event loop). That thread ends with the attempt, so its connections cannot be
    reused: they are closed after it whatever CONN_MAX_AGE says.
The wrapped handler is a copy in the worker's registry: the task object your module defines, and a direct
call of it, are unchanged.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections, connections, reset_queries

from pgqw.tasks import Registry


def _before() -> None:
    reset_queries()
    close_old_connections()


def _after() -> None:
    close_old_connections()


def _after_async() -> None:
    connections.close_all()


def around_attempt(fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn, run between Django's connection cleanup before and after (see the module's docstring)."""
    if inspect.iscoroutinefunction(fn):
        from asgiref.sync import ThreadSensitiveContext, sync_to_async

        @functools.wraps(fn)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            async with ThreadSensitiveContext():
                await sync_to_async(_before, thread_sensitive=True)()
                try:
                    return await fn(*args, **kwargs)
                finally:
                    await sync_to_async(_after_async, thread_sensitive=True)()

        run_async.__pgqw_django__ = True  # type: ignore[attr-defined]
        return run_async

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        _before()
        try:
            return fn(*args, **kwargs)
        finally:
            _after()

    run.__pgqw_django__ = True  # type: ignore[attr-defined]
    return run


def wrap_registry(registry: Registry) -> Registry:
    """Puts a copy of each task, its handler inside around_attempt, in the registry's place of the task
    (once: a wrapped one is left as it is). Returns the registry."""
    for name, task in list(registry.tasks.items()):
        if not getattr(task.fn, "__pgqw_django__", False):
            registry.tasks[name] = dataclasses.replace(task, fn=around_attempt(task.fn))
    return registry
