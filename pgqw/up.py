"""pgqw up: the whole system for a newcomer, in one terminal.

Without DATABASE_URL an embedded PostgreSQL keeps its data in .pgdata/ (kept between runs).
Then migrate, the API (served by waitress) and N workers, each a child process in its own
session so that Ctrl+C reaches only this supervisor, which then stops them in order: workers
first with SIGTERM (they finish or hand back their jobs), then the API, then the database.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import psycopg
from psycopg.conninfo import make_conninfo

from . import config, db
from .embedded import start as start_embedded
from .migrate import migrate


@dataclass
class Child:
    name: str
    process: subprocess.Popen


def _pump(child: Child, width: int, lock: threading.Lock) -> None:
    assert child.process.stdout is not None
    for line in child.process.stdout:
        with lock:
            sys.stdout.write(f"{child.name.ljust(width)} | {line}")
            sys.stdout.flush()


_WIDTH = 3  # the widest child name (api, w1 … w99); up's own lines use it too


def _say(text: str) -> None:
    sys.stdout.write(f"{'up'.ljust(_WIDTH)} | {text}\n")
    sys.stdout.flush()


def _browse_url(host: str, port: int) -> str:
    """Where a person on this machine opens the page: a wildcard address is reached on loopback."""
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _role_logins(url: str) -> dict[str, str]:
    """URLs logging in as pgqw_api and pgqw_worker when both roles exist, else {}."""
    roles = ["pgqw_api", "pgqw_worker"]
    with psycopg.connect(url) as conn:
        if db.login_roles(conn, roles) != set(roles):
            return {}
    return {role: make_conninfo(url, user=role) for role in roles}


def cmd_up(args: argparse.Namespace) -> int:
    from pgqw.app.serve import check_exposure

    settings = config.load()
    port = args.port if args.port is not None else settings.port
    check_exposure(args.host, settings)  # before anything starts
    env = dict(os.environ)
    if settings.database_url:
        url = settings.database_url
        _say("database: DATABASE_URL")
    else:
        _say(f"database: embedded PostgreSQL, data in {settings.data_dir}")
        url = start_embedded(settings.data_dir, stop_on_exit=True)
        env["DATABASE_URL"] = url
    result = migrate(url, log=lambda m: _say(f"migrate: {m}"), create_roles=settings.create_roles)
    if not result.applied:
        _say("migrate: up to date")
    env["PORT"] = str(port)
    env.setdefault("PYTHONUNBUFFERED", "1")
    api_env, worker_env = env, env
    if not settings.database_url:
        # The embedded server trusts local logins: the API and the workers log in as their own
        # least-privilege roles (db/security), as they should in production. With DATABASE_URL they
        # use that URL as given (its password is for its own user).
        logins = _role_logins(url)
        if logins:
            api_env = {**env, "DATABASE_URL": logins["pgqw_api"]}
            worker_env = {**env, "DATABASE_URL": logins["pgqw_worker"]}
            _say("logins: the API as pgqw_api, the workers as pgqw_worker")

    commands = [("api", [sys.executable, "-m", "pgqw.cli", "api", "--port", str(port), "--host", args.host],
                 api_env)]
    for i in range(1, args.workers + 1):
        commands.append((f"w{i}", [sys.executable, "-m", "pgqw.cli", "worker", "--id", f"w{i}"], worker_env))
    global _WIDTH
    width = _WIDTH = max(len(name) for name, _, _ in commands)

    children: list[Child] = []
    lock = threading.Lock()
    stopping = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        if stopping.is_set():
            _say("second signal: killing everything now")
            for c in children:
                if c.process.poll() is None:
                    c.process.kill()
            os._exit(130)
        stopping.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    for name, command, child_env in commands:
        process = subprocess.Popen(
            command, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )
        child = Child(name, process)
        children.append(child)
        threading.Thread(target=_pump, args=(child, width, lock), daemon=True).start()
    _say(f"API and page: {config.public_base_url(settings) if settings.public_url else _browse_url(args.host, port)}"
         f"  ({args.workers} worker{'s' if args.workers != 1 else ''}; Ctrl+C stops everything)")

    exit_code = 0
    while not stopping.is_set():
        for c in children:
            if c.process.poll() is not None:
                _say(f"{c.name} exited with code {c.process.returncode}; stopping the rest")
                exit_code = 1
                stopping.set()
                break
        stopping.wait(0.2)

    _say("stopping workers, then the API")
    grace = settings.shutdown_grace_ms / 1000 + 5
    workers = [c for c in children if c.name != "api"]
    api = [c for c in children if c.name == "api"]
    for group in (workers, api):
        for c in group:
            if c.process.poll() is None:
                c.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for c in group:
            try:
                c.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _say(f"{c.name} did not stop in {grace:.0f}s: killing it (the sweep recovers its jobs)")
                c.process.kill()
                c.process.wait()
    time.sleep(0.1)  # let the log pumps print the last lines
    _say("stopped" + ("" if settings.database_url else "; the embedded database stops with this process"))
    return exit_code
