"""argparse types shared by the pgqw subcommands: each refuses bad text with a message that becomes
the one-line usage error (pgqw.cli.Parser)."""
from __future__ import annotations

import argparse
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
