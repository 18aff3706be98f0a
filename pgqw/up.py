"""pgqw up: the whole system for a newcomer, in one terminal.

Without DATABASE_URL an embedded PostgreSQL keeps its data in .pgdata/ (kept between runs).
Then migrate, the API (served by waitress) and N workers, each a child process in its own
session (pgqw.launch) so that Ctrl+C reaches only this supervisor, which then stops them in order:
workers first with SIGTERM (they finish or hand back their jobs), then the API, then the database.
The "API and page" line comes once the API answers; an API that exits at start (a port in use)
stops the rest and ends the command with one line saying why.

It needs the api extra (the API), the embedded one without DATABASE_URL and the demo one when the
workers run the demo's tasks (`pip install 'pg-queue-worker[all]'` has them all); a missing one is
one line naming it, before anything starts.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Callable

import psycopg
from psycopg.conninfo import make_conninfo

from . import config, db, launch
from .embedded import NEEDS_EXTRA as EMBEDDED_EXTRA
from .embedded import start as start_embedded
from .errors import UsageError, require_extra, require_task_extras
from .migrate import migrate
from .tasks import TaskDefinitionError, register_modules

_WIDTH = 3  # the widest child name (api, w1 … w99); up's own lines use it too
_LOCK = threading.Lock()
START_LIMIT_S = 60.0  # the API must answer within this (it connects to the database first)


def _say(text: str) -> None:
    with _LOCK:
        sys.stdout.write(f"{'up'.ljust(_WIDTH)} | {text}\n")
        sys.stdout.flush()


def _printer(name: str) -> Callable[[str], None]:
    """Prints a child's output lines, each after its name."""
    def show(line: str) -> None:
        text = line.rstrip("\n")
        with _LOCK:
            sys.stdout.write(f"{name.ljust(_WIDTH)} | {text}\n")
            sys.stdout.flush()

    return show


def _role_logins(url: str) -> dict[str, str]:
    """URLs logging in as pgqw_api and pgqw_worker when both roles exist, else {}."""
    roles = ["pgqw_api", "pgqw_worker"]
    with psycopg.connect(url) as conn:
        if db.login_roles(conn, roles) != set(roles):
            return {}
    return {role: make_conninfo(url, user=role) for role in roles}


def cmd_up(args: argparse.Namespace) -> int:
    settings = config.load()
    require_extra("api", otherwise="for the API it starts; 'pg-queue-worker[all]' has every part")
    if not settings.database_url:
        require_extra(*EMBEDDED_EXTRA)
    require_task_extras(settings.task_modules, "or name your own task modules in PGQW_TASKS")
    from pgqw.app.serve import check_exposure

    port = args.port if args.port is not None else settings.port
    check_exposure(args.host, settings)  # before anything starts
    if settings.database_url:
        url = settings.database_url
        _say("database: DATABASE_URL")
    else:
        _say(f"database: embedded PostgreSQL, data in {settings.data_dir}")
        url = start_embedded(settings.data_dir, stop_on_exit=True)
    result = migrate(url, log=lambda m: _say(f"migrate: {m}"), create_roles=settings.create_roles)
    if not result.applied:
        _say("migrate: up to date")
    # The task types, as `pgqw migrate` registers them: the API accepts their jobs before a worker runs.
    with psycopg.connect(url) as conn:
        try:
            registered = register_modules(conn, settings.task_modules)
        except TaskDefinitionError as exc:
            raise UsageError(str(exc)) from None
    _say(f"migrate: registered task types {', '.join(registered.task_types)}")
    api_url, worker_url = url, url
    if not settings.database_url:
        # The embedded server trusts local logins: the API and the workers log in as their own
        # least-privilege roles (db/security), as they should in production. With DATABASE_URL they
        # use that URL as given (its password is for its own user).
        logins = _role_logins(url)
        if logins:
            api_url, worker_url = logins["pgqw_api"], logins["pgqw_worker"]
            _say("logins: the API as pgqw_api, the workers as pgqw_worker")

    names = ["api", *(f"w{i}" for i in range(1, args.workers + 1))]
    global _WIDTH
    _WIDTH = max(len(name) for name in names)
    children: list[launch.Child] = []
    stopping = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        if stopping.is_set():
            _say("second signal: killing everything now")
            for c in children:
                if c.alive():
                    c.process.kill()
            os._exit(130)
        stopping.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    # The operator's settings pass through to the children (inherit_settings): they are the
    # configuration of this whole system.
    shared = {"PORT": str(port)}
    try:
        api = launch.start_api(port, host=args.host, env=shared, database_url=api_url, inherit_settings=True,
                               on_line=_printer("api"))
        children.append(api)
        for name in names[1:]:
            children.append(launch.start_worker(name, env=shared, database_url=worker_url, inherit_settings=True,
                                                on_line=_printer(name)))
        exit_code = _supervise(args, settings, port, api, children, stopping)
    finally:
        _stop(children, settings)
    return exit_code


def _wait_api(api: launch.Child, children: list[launch.Child], stopping: threading.Event) -> str:
    """Until the API answers ("ready"), a child exits ("exited") or a signal comes ("stopping")."""
    def settled() -> str | None:
        if stopping.is_set():
            return "stopping"
        if any(not c.alive() for c in children):
            return "exited"
        try:
            return "ready" if api.ready() else None
        except launch.LaunchError:
            return "exited"

    return launch.wait_for(settled, timeout=START_LIMIT_S, what="the API to answer")


def _supervise(args: argparse.Namespace, settings: config.Settings, port: int, api: launch.Child,
               children: list[launch.Child], stopping: threading.Event) -> int:
    try:
        state = _wait_api(api, children, stopping)
    except TimeoutError:
        raise UsageError(f"the API did not answer at {api.url or launch.local_url(args.host, port)} within "
                         f"{START_LIMIT_S:g}s (its lines above say what it was doing); stopped everything") from None
    if state == "exited" and not api.alive():
        api.wait()  # its last lines printed before ours
        if port and launch.port_in_use(args.host, port):
            raise UsageError(f"the API cannot listen on {args.host}:{port}: the port is in use; pick another "
                             "with --port N or the PORT environment variable")
        raise UsageError(f"the API exited at start with code {api.returncode} (its line above says why)")
    if state == "ready":
        shown = config.public_base_url(settings) if settings.public_url else api.url
        _say(f"API and page: {shown}  ({args.workers} worker{'s' if args.workers != 1 else ''}; "
             "Ctrl+C stops everything)")
    exit_code = 0
    while not stopping.is_set():
        for c in children:
            if not c.alive():
                c.wait()
                _say(f"{c.name} exited with code {c.returncode}; stopping the rest")
                exit_code = 1
                stopping.set()
                break
        stopping.wait(0.2)
    return exit_code


def _stop(children: list[launch.Child], settings: config.Settings) -> None:
    if any(c.alive() for c in children):
        _say("stopping workers, then the API")
    grace = settings.shutdown_grace_ms / 1000 + 5

    def killing(c: launch.Child) -> None:
        _say(f"{c.name} did not stop in {grace:.0f}s: killing it (the sweep recovers its jobs)")

    launch.stop_all([c for c in children if c.kind == "worker"], timeout=grace, on_kill=killing)
    launch.stop_all([c for c in children if c.kind == "api"], timeout=grace, on_kill=killing)
    _say("stopped" + ("" if settings.database_url else "; the embedded database stops with this process"))
