"""argparse types shared by the pgqw subcommands: each refuses bad text with a message that becomes
the one-line usage error (pgqw.cli.Parser)."""
from __future__ import annotations

import argparse
import re
from datetime import timedelta
from typing import Callable


def whole(low: int) -> Callable[[str], int]:
    """A whole number of at least low."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be {low} or more, got {value}")
        return value

    return parse


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 0 and 65535, got {value}")
    return value


DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def duration(text: str) -> timedelta:
    """A length of time: a whole number and a unit (500ms, 45s, 30m, 12h, 7d, 2w)."""
    found = re.fullmatch(r"\s*(\d{1,9})\s*(ms|s|m|h|d|w)\s*", text)
    if found is None:
        raise argparse.ArgumentTypeError(
            f"must be a whole number and a unit (ms, s, m, h, d or w), such as 7d or 12h, got {text!r}")
    return timedelta(seconds=int(found.group(1)) * DURATION_UNITS[found.group(2)])
