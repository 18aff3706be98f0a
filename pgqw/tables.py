"""Prints rows as a plain-text table, the way psql does, for the CLI's reports."""
from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Iterable, Sequence


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
    return text if len(text) <= 60 else text[:57] + "..."


def format_table(rows: Iterable[Any], columns: Sequence[str] | None = None) -> str:
    """Dataclass instances or dicts → aligned text with a header line."""
    items = [dataclasses.asdict(r) if dataclasses.is_dataclass(r) else dict(r) for r in rows]
    if columns is None:
        columns = list(items[0].keys()) if items else []
    grid = [[_cell(item.get(c)) for c in columns] for item in items]
    widths = [max([len(c)] + [len(row[i]) for row in grid]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in grid]
    if not grid:
        lines.append("(no rows)")
    return "\n".join(lines)
