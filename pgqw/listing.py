"""Payload validation and money formatting for the ``listing_flyer`` job type.

Shared by the API (errors become HTTP 422) and the worker (an invalid payload
is a permanent failure). Pure Python: no database, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict


@dataclass(frozen=True)
class Currency:
    """An ISO 4217 currency: display symbol and minor-unit exponent."""

    code: str
    symbol: str
    exponent: int


CURRENCIES: dict[str, Currency] = {
    c.code: c
    for c in (
        Currency("NGN", "₦", 2),
        Currency("USD", "$", 2),
        Currency("EUR", "€", 2),
        Currency("GBP", "£", 2),
        Currency("KES", "KSh", 2),
        Currency("GHS", "GH₵", 2),
        Currency("ZAR", "R", 2),
        Currency("JPY", "¥", 0),
        Currency("INR", "₹", 2),
        Currency("CAD", "CA$", 2),
        Currency("AUD", "A$", 2),
    )
}

MAX_PRICE_MINOR = 10**15
TITLE_MAX = 200
ADDRESS_MAX = 300
BEDROOMS_MAX = 100
FIELDS = ("title", "priceMinor", "currency", "address", "bedrooms")


class FieldError(TypedDict):
    """One problem with one field of a payload."""

    field: str
    problem: str


class InvalidPayload(ValueError):
    """A listing payload failed validation; ``errors`` names each bad field."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = errors
        super().__init__(
            "invalid listing payload: "
            + "; ".join(f"{e['field']} {e['problem']}" for e in errors)
        )


def _is_int(value: Any) -> bool:
    """True for real ints; bool is a subclass of int but is not accepted."""
    return isinstance(value, int) and not isinstance(value, bool)


def _text_problem(value: Any, max_len: int) -> str | None:
    if not isinstance(value, str):
        return "must be a string"
    if not value.strip():
        return "must not be blank"
    if len(value) > max_len:
        return f"must be at most {max_len} characters"
    return None


def _int_problem(value: Any, low: int, high: int) -> str | None:
    if not _is_int(value):
        return "must be an integer"
    if value < low:
        return "must not be negative" if low == 0 else f"must be at least {low}"
    if value > high:
        return f"must be at most {high}"
    return None


def _currency_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return "must be a string"
    if value not in CURRENCIES:
        return "must be one of " + ", ".join(sorted(CURRENCIES))
    return None


_CHECKS = {
    "title": lambda v: _text_problem(v, TITLE_MAX),
    "priceMinor": lambda v: _int_problem(v, 0, MAX_PRICE_MINOR),
    "currency": _currency_problem,
    "address": lambda v: _text_problem(v, ADDRESS_MAX),
    "bedrooms": lambda v: _int_problem(v, 0, BEDROOMS_MAX),
}


# The demo's example listing: the page's form starts with it, `pgqw burst` sends it.
EXAMPLE_LISTING = {
    "title": "3-bedroom apartment in Yaba",
    "priceMinor": 270000000,
    "currency": "NGN",
    "address": "12 Herbert Macaulay Way, Yaba, Lagos",
    "bedrooms": 3,
}


def validate_listing(payload: Any) -> list[FieldError]:
    """Return one error per bad field of a listing payload; empty means valid."""
    if not isinstance(payload, dict):
        return [{"field": "payload", "problem": "must be a JSON object"}]
    errors: list[FieldError] = []
    for field in FIELDS:
        if field not in payload:
            errors.append({"field": field, "problem": "is required"})
            continue
        problem = _CHECKS[field](payload[field])
        if problem:
            errors.append({"field": field, "problem": problem})
    for field in sorted(str(k) for k in payload if k not in _CHECKS):
        errors.append({"field": field, "problem": "unknown field"})
    return errors


def check_listing(payload: Any) -> None:
    """Raise InvalidPayload unless the payload is a valid listing."""
    errors = validate_listing(payload)
    if errors:
        raise InvalidPayload(errors)


def format_price(price_minor: int, currency: str) -> str:
    """Format minor units for display: ``270000000, "NGN"`` → ``"₦2,700,000"``.

    The minor part is shown only when non-zero (``123456, "USD"`` → ``"$1,234.56"``).
    Exact integer arithmetic throughout.
    """
    if not _is_int(price_minor) or price_minor < 0:
        raise ValueError(f"price_minor must be a non-negative int, got {price_minor!r}")
    try:
        cur = CURRENCIES[currency]
    except KeyError:
        raise ValueError(f"unsupported currency {currency!r}") from None
    major, minor = divmod(price_minor, 10**cur.exponent)
    text = f"{cur.symbol}{major:,}"
    if minor:
        text += f".{minor:0{cur.exponent}d}"
    return text
