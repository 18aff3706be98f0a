"""Listing payload validation and price formatting (no database)."""

import pytest

from pgqw.demo.listing import (
    CURRENCIES,
    MAX_PRICE_MINOR,
    InvalidPayload,
    check_listing,
    format_price,
    validate_listing,
)

VALID = {
    "title": "3-bedroom apartment in Yaba",
    "priceMinor": 270000000,
    "currency": "NGN",
    "address": "12 Herbert Macaulay Way, Yaba, Lagos",
    "bedrooms": 3,
}


def with_(**changes):
    """A copy of VALID with some fields replaced."""
    return {**VALID, **changes}


def fields(errors):
    return [e["field"] for e in errors]


def test_validate_listing_accepts_valid_payload():
    assert validate_listing(VALID) == []


@pytest.mark.parametrize("payload", [None, [], "x", 3, [VALID]])
def test_validate_listing_rejects_non_object(payload):
    assert validate_listing(payload) == [{"field": "payload", "problem": "must be a JSON object"}]


def test_validate_listing_reports_each_missing_field():
    assert validate_listing({}) == [
        {"field": f, "problem": "is required"}
        for f in ("title", "priceMinor", "currency", "address", "bedrooms")
    ]


def test_validate_listing_rejects_unknown_fields():
    errors = validate_listing(with_(photos=[], agent="x"))
    assert errors == [
        {"field": "agent", "problem": "unknown field"},
        {"field": "photos", "problem": "unknown field"},
    ]


def test_validate_listing_rejects_negative_price():
    assert validate_listing(with_(priceMinor=-1)) == [
        {"field": "priceMinor", "problem": "must not be negative"}
    ]


@pytest.mark.parametrize("price", [True, False, 1.0, 2700000.5, "270000000", None])
def test_validate_listing_rejects_non_integer_price(price):
    assert validate_listing(with_(priceMinor=price)) == [
        {"field": "priceMinor", "problem": "must be an integer"}
    ]


def test_validate_listing_caps_price():
    assert validate_listing(with_(priceMinor=MAX_PRICE_MINOR)) == []
    assert fields(validate_listing(with_(priceMinor=MAX_PRICE_MINOR + 1))) == ["priceMinor"]


def test_validate_listing_accepts_zero_price_and_bedrooms():
    assert validate_listing(with_(priceMinor=0, bedrooms=0)) == []


@pytest.mark.parametrize("currency", ["ngn", "XYZ", "", "NAIRA", 566, None])
def test_validate_listing_rejects_unsupported_currency(currency):
    assert fields(validate_listing(with_(currency=currency))) == ["currency"]


@pytest.mark.parametrize("field,limit", [("title", 200), ("address", 300)])
def test_validate_listing_limits_text_length(field, limit):
    assert validate_listing(with_(**{field: "a" * limit})) == []
    assert validate_listing(with_(**{field: "a" * (limit + 1)})) == [
        {"field": field, "problem": f"must be at most {limit} characters"}
    ]


@pytest.mark.parametrize("field", ["title", "address"])
@pytest.mark.parametrize("value", ["", "   ", "\n\t"])
def test_validate_listing_rejects_blank_text(field, value):
    assert validate_listing(with_(**{field: value})) == [
        {"field": field, "problem": "must not be blank"}
    ]


@pytest.mark.parametrize("field", ["title", "address"])
def test_validate_listing_rejects_non_string_text(field):
    assert validate_listing(with_(**{field: 42})) == [
        {"field": field, "problem": "must be a string"}
    ]


@pytest.mark.parametrize("bedrooms,ok", [(0, True), (100, True), (101, False), (-1, False), (True, False), (2.0, False)])
def test_validate_listing_bounds_bedrooms(bedrooms, ok):
    assert (validate_listing(with_(bedrooms=bedrooms)) == []) is ok


def test_validate_listing_names_every_bad_field():
    payload = {"title": " ", "priceMinor": -5, "currency": "usd", "bedrooms": 1.5, "pool": True}
    assert fields(validate_listing(payload)) == [
        "title", "priceMinor", "currency", "address", "bedrooms", "pool"
    ]


def test_check_listing_raises_invalid_payload_with_errors():
    with pytest.raises(InvalidPayload) as exc:
        check_listing(with_(priceMinor=-1))
    assert isinstance(exc.value, ValueError)
    assert exc.value.errors == [{"field": "priceMinor", "problem": "must not be negative"}]
    assert "priceMinor must not be negative" in str(exc.value)


def test_check_listing_accepts_valid_payload():
    check_listing(VALID)


@pytest.mark.parametrize(
    "minor,currency,expected",
    [
        (270000000, "NGN", "₦2,700,000"),
        (123456, "USD", "$1,234.56"),
        (5000, "JPY", "¥5,000"),
        (100050, "EUR", "€1,000.50"),
        (1, "GBP", "£0.01"),
        (0, "NGN", "₦0"),
        (99, "INR", "₹0.99"),
        (1000, "ZAR", "R10"),
        (MAX_PRICE_MINOR, "JPY", "¥1,000,000,000,000,000"),
        (MAX_PRICE_MINOR - 1, "USD", "$9,999,999,999,999.99"),
    ],
)
def test_format_price_formats_minor_units(minor, currency, expected):
    assert format_price(minor, currency) == expected


def test_format_price_is_exact_for_large_amounts():
    # 2**60 + 1 minor units would lose its last digit through a float.
    assert format_price(2**60 + 1, "USD") == "$11,529,215,046,068,469.77"


@pytest.mark.parametrize("minor,currency", [(-1, "USD"), (1.5, "USD"), (True, "USD"), (1, "XYZ")])
def test_format_price_rejects_bad_input(minor, currency):
    with pytest.raises(ValueError):
        format_price(minor, currency)


def test_currencies_table_is_consistent():
    for code, cur in CURRENCIES.items():
        assert code == cur.code and len(code) == 3 and code.isupper()
        assert cur.symbol and cur.exponent in (0, 2, 3)
