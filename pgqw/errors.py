"""Errors the pgqw command reports as one line (pgqw.cli catches them)."""
from __future__ import annotations


class UsageError(RuntimeError):
    """A command was asked for something it cannot do; the message says what."""
