"""Starts `pgqw worker` and `pgqw api` as child processes: the one way `pgqw up`, the lab, the
tests and the benchmark all do it.

A child is `python -m pgqw.cli worker|api …` (this interpreter, so the code of this install), in a
session of its own (a Ctrl+C in the terminal reaches the parent only, which stops its children in
order), optionally under a command prefix (`ip netns exec NAME`). Its environment is the parent's
without any pgqw setting unless asked (child_env), plus the settings given. Its output (stdout and
stderr together) goes to a log file, or through a pipe read by a thread that keeps the last lines
and hands each one to a callback.

Ready means: a worker logged "worker started" (it reached the database and will claim);
the API answers GET / (the page, which answers with or without API_TOKENS). stop() sends SIGTERM,
waits, then kills.
"""
from __future__ import annotations

import errno
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

from pgqw import config

T = TypeVar("T")

# Every environment variable pgqw reads as a setting (declared in pgqw.config): each setting's PGQW_
# name and its alias. A child started with inherit_settings=False gets none of them from the parent's
# environment: only those its starter passes. PGQW_SCHEMA (inherited=True) always goes along: every
# process of one queue uses one schema.
SETTINGS: tuple[str, ...] = tuple(name for s in config.SETTINGS if not s.inherited for name in s.names)
_DATABASE_URL = config.by_field("database_url")
# Each name of a setting, with all the names of that setting. A name not here (a task module's own
# setting, declared the same way) is taken to have the names pgqw.config.env_names gives it.
_NAMES: dict[str, tuple[str, ...]] = {name: s.names for s in config.SETTINGS for name in s.names}

WORKER_READY = "worker started"
SERVING = re.compile(r"serving on (http://\S+)")   # `pgqw api`'s first line, with the port it listens on
KEEP_LINES = 10_000                                 # lines a piped child keeps for output()


class LaunchError(RuntimeError):
    """A child exited before it was ready; the message ends with the last lines of its output."""


# ----------------------------------------------------------------------------- small helpers

def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the system's pick)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    """True when binding host:port fails because something already has it."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError):
        return False
    for family, kind, proto, _name, address in infos:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as waitress does
            try:
                s.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return True
    return False


def wait_for(condition: Callable[[], T | None], *, timeout: float, interval: float = 0.05,
             what: str | Callable[[], str] = "condition") -> T:
    """Polls condition() until it returns something truthy, and returns that; raises TimeoutError
    naming `what` (a text, or a function making one at the time) after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what() if callable(what) else what}")
        time.sleep(interval)


def local_url(host: str, port: int) -> str:
    """The base URL a client on this machine uses: a wildcard address is reached on loopback."""
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def answers(url: str, timeout: float = 1.0) -> bool:
    """True when an HTTP server answers GET url, whatever its status."""
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False


# ----------------------------------------------------------------------------- environment

def child_env(settings: Mapping[str, str] | None = None, *, database_url: str | None = None,
              inherit_settings: bool = False) -> dict[str, str]:
    """The environment of a child: the parent's (without its pgqw SETTINGS unless inherit_settings),
    then `settings`, then PGQW_DATABASE_URL when given; output unbuffered so logs arrive line by line.
    A setting given, under either of its names, replaces the parent's under both."""
    env = {k: v for k, v in os.environ.items() if inherit_settings or k not in SETTINGS}
    given = dict(settings or {})
    if database_url is not None:
        given = {k: v for k, v in given.items() if k not in _DATABASE_URL.names}
        given[_DATABASE_URL.env] = database_url
    for name in given:
        for other in _NAMES.get(name) or config.env_names(name):
            env.pop(other, None)
    env.update(given)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def command(args: Sequence[str], prefix: Sequence[str] = ()) -> list[str]:
    """The command line of `pgqw ARGS` run by this interpreter, under an optional prefix."""
    return [*prefix, sys.executable, "-m", "pgqw.cli", *args]


# ----------------------------------------------------------------------------- a child

class Child:
    """One started `pgqw …` process. Use start_worker / start_api / start to make one."""

    def __init__(self, name: str, kind: str, process: subprocess.Popen, log_path: Path | None,
                 url: str | None = None, on_line: Callable[[str], None] | None = None) -> None:
        self.name = name
        self.kind = kind              # "worker", "api" or "pgqw"
        self.process = process
        self.log_path = log_path      # None: the output is piped
        self.url = url                # the API's base URL (no trailing slash), once known
        self.killed = False           # stop() had to kill it
        self._lines: deque[str] = deque(maxlen=KEEP_LINES)
        self._ended = threading.Event()
        if log_path is None:
            threading.Thread(target=self._pump, args=(on_line,), daemon=True, name=f"output of {name}").start()

    def _pump(self, on_line: Callable[[str], None] | None) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.append(line.rstrip("\n"))
            if on_line is not None:
                try:
                    on_line(line)
                except Exception:  # noqa: BLE001 - e.g. a closed stdout: keep draining, or the child blocks
                    on_line = None
        self._ended.set()

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def alive(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        """Everything it printed so far (a piped child: its last KEEP_LINES lines)."""
        if self.log_path is None:
            return "\n".join(list(self._lines))
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def _ended_output(self) -> bool:
        """It exited and all its output has been read."""
        if self.alive():
            return False
        return self._ended.wait(5) if self.log_path is None else True

    def _exited(self, waiting_for: str) -> LaunchError:
        self.wait()
        return LaunchError(f"{self.name} exited with {self.process.returncode} before {waiting_for}:\n{self.tail()}")

    def wait_output(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        """The first match of pattern in its output; LaunchError if it exits without printing one."""
        regex = re.compile(pattern, re.M)

        def found() -> re.Match[str] | None:  # None: not yet (wait_for polls until it is not)
            ended = self._ended_output()      # before reading: a last line printed at exit is seen
            match = regex.search(self.output())
            if match is None and ended:
                raise self._exited(f"printing {pattern!r}")
            return match

        return wait_for(found, timeout=timeout, what=lambda: f"{pattern!r} from {self.name}:\n{self.tail()}")

    def ready(self) -> bool:
        """Ready now (see the module's docstring)? LaunchError when it has exited."""
        if not self.alive():
            raise self._exited("it was ready")
        if self.kind == "worker":
            return WORKER_READY in self.output()
        if self.kind == "api":
            if self.url is None:
                match = SERVING.search(self.output())
                if match is None:
                    return False
                self.url = match.group(1).rstrip("/").replace("//0.0.0.0:", "//127.0.0.1:")
            return answers(f"{self.url}/")
        return True

    def wait_ready(self, timeout: float = 30.0) -> Child:
        wait_for(self.ready, timeout=timeout, what=lambda: f"{self.name} to be ready:\n{self.tail()}")
        return self

    def send_signal(self, sig: int) -> None:
        if self.alive():
            self.process.send_signal(sig)

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code once it exited (subprocess.TimeoutExpired after timeout) and, piped, once
        every line it printed has been read."""
        code = self.process.wait(timeout=timeout)
        if self.log_path is None:
            self._ended.wait(5)
        return code

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Sends sig (SIGTERM: a graceful stop), waits up to timeout, then kills. The exit code."""
        stop_all([self], sig=sig, timeout=timeout)
        return self.process.returncode


def stop_all(children: Iterable[Child], *, sig: int = signal.SIGTERM, timeout: float = 15.0,
             on_kill: Callable[[Child], None] | None = None) -> None:
    """Sends sig to every live child at once, waits for them all within one timeout, then kills the
    ones still running (on_kill is told first; their `killed` is set)."""
    children = list(children)
    for child in children:
        child.send_signal(sig)
    deadline = time.monotonic() + timeout
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            if on_kill is not None:
                on_kill(child)
            child.killed = True
            child.process.kill()
            child.wait()


# ----------------------------------------------------------------------------- starting

def start(args: Sequence[str], *, name: str | None = None, kind: str = "pgqw",
          env: Mapping[str, str] | None = None, database_url: str | None = None, inherit_settings: bool = False,
          log: Path | None = None, on_line: Callable[[str], None] | None = None, cwd: Path | None = None,
          prefix: Sequence[str] = (), url: str | None = None) -> Child:
    """Starts `pgqw ARGS`. env: settings for it (see child_env); log: a file for its output (made or
    truncated), else a pipe whose lines go to on_line as they come; prefix: a command to run it under."""
    full_env = child_env(env, database_url=database_url, inherit_settings=inherit_settings)
    process: subprocess.Popen[Any]
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:
            process = subprocess.Popen(command(args, prefix), stdout=out, env=full_env, cwd=cwd,
                                       stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    else:
        process = subprocess.Popen(command(args, prefix), stdout=subprocess.PIPE, text=True, errors="replace",
                                   env=full_env, cwd=cwd, stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    return Child(name or (args[0] if args else "pgqw"), kind, process, log, url, on_line)


def start_worker(worker_id: str | None = None, *, concurrency: int | None = None, queues: str | None = None,
                 args: Sequence[str] = (), name: str | None = None, **options: object) -> Child:
    """Starts `pgqw worker [--id ID] [--concurrency N] [--queues Q] [ARGS]`; options as for start()."""
    argv = ["worker"]
    if worker_id is not None:
        argv += ["--id", worker_id]
    if concurrency is not None:
        argv += ["--concurrency", str(concurrency)]
    if queues is not None:
        argv += ["--queues", queues]
    return start([*argv, *args], name=name or worker_id or "worker", kind="worker", **options)  # type: ignore[arg-type]


def start_api(port: int = 0, *, host: str = "127.0.0.1", args: Sequence[str] = (), name: str = "api",
              **options: object) -> Child:
    """Starts `pgqw api --port PORT --host HOST`; port 0 lets the system pick one, learnt from the
    API's "serving on" line. Options as for start()."""
    env = dict(options.pop("env", None) or {})  # type: ignore[call-overload]
    if port:
        env.setdefault("PORT", str(port))  # the API's own idea of its port (links without PUBLIC_URL)
    url = local_url(host, port) if port else None
    return start(["api", "--port", str(port), "--host", host, *args], name=name, kind="api", env=env, url=url,
                 **options)  # type: ignore[arg-type]
