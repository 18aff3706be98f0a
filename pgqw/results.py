"""A job's result, as both sides see it: the File a handler may return, and how a handler's return value
becomes the row stored with its success (pgqw.tasks re-exports both; pgqw.client reads the row back)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pydantic


@dataclass(frozen=True)
class File:
    """A file result: bytes and their content type (served as is by GET /api/jobs/{id}/result)."""

    data: bytes
    content_type: str


def result_row(value: Any) -> tuple[str, Any, bytes | None] | None:
    """A handler's return value as (content_type, json value, bytes), or None for no result."""
    if value is None:
        return None
    if isinstance(value, File):
        if not isinstance(value.data, (bytes, bytearray, memoryview)):
            raise TypeError(f"File.data must be bytes, got {type(value.data).__name__}")
        return value.content_type, None, bytes(value.data)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "application/octet-stream", None, bytes(value)
    return "application/json", pydantic.TypeAdapter(Any).dump_python(value, mode="json"), None
