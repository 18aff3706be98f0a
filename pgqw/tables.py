"""Rows as a text table for the CLI's reports, drawn by rich (a well-kept library) rather than by
hand: aligned columns, a header rule, long cells cut with an ellipsis."""
from __future__ import annotations

import dataclasses
import io
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Iterable, Sequence

from rich import box
from rich.console import Console
from rich.table import Table

CELL_MAX = 60


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        utc = value.astimezone(timezone.utc)
        day = "" if utc.date() == datetime.now(timezone.utc).date() else utc.strftime("%Y-%m-%d ")
        return day + utc.strftime("%H:%M:%S.%f")[:-3]
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, Decimal):
        return f"{value:f}"
    text = str(value)
    return text if len(text) <= CELL_MAX else text[:CELL_MAX - 3] + "..."


def format_table(rows: Iterable[Any], columns: Sequence[str] | None = None) -> str:
    """Dataclass instances or dicts → an aligned text table with a header (plain text, no colour)."""
    items = [dataclasses.asdict(r) if dataclasses.is_dataclass(r) and not isinstance(r, type) else dict(r)
             for r in rows]
    if columns is None:
        columns = list(items[0].keys()) if items else []
    table = Table(*columns, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="")
    for item in items:
        table.add_row(*(_cell(item.get(c)) for c in columns))
    out = io.StringIO()
    Console(file=out, width=max(80, sum(len(c) + 2 for c in columns) + CELL_MAX * 2), color_system=None,
            force_terminal=False, highlight=False).print(table)
    text = "\n".join(line.rstrip() for line in out.getvalue().splitlines() if line.strip())
    return text if items else text + "\n(no rows)"
