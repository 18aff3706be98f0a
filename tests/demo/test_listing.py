"""The listing_flyer payload's new fields: the model's rules, its JSON Schema (what the API checks a POST
against) saying the same, and docs/demo.md naming every field."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from pgqw import payload_schema
from pgqw.demo.listing import EXAMPLE_LISTING, FULL_EXAMPLE_LISTING, Listing, format_area, validate_listing

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = Listing.model_json_schema()


def problems(**changes: Any) -> list[dict[str, str]]:
    payload = {**EXAMPLE_LISTING, **changes}
    return [dict(e) for e in validate_listing({k: v for k, v in payload.items() if v is not ...})]


CASES: list[tuple[dict[str, Any], list[dict[str, str]]]] = [
    ({}, []),
    ({"listingType": "sale"}, []),
    ({"listingType": "rent", "pricePeriod": "month"}, []),
    ({"listingType": "rent"}, [{"field": "pricePeriod", "problem": "is required with listingType rent (month, week or year)"}]),
    ({"listingType": "sale", "pricePeriod": "month"}, [{"field": "pricePeriod", "problem": "is only for listingType rent"}]),
    ({"pricePeriod": "week"}, [{"field": "pricePeriod", "problem": "is only for listingType rent"}]),
    ({"listingType": "lease"}, [{"field": "listingType", "problem": "must be one of sale, rent"}]),
    ({"listingType": "rent", "pricePeriod": "day"}, [{"field": "pricePeriod", "problem": "must be one of month, week, year"}]),
    ({"floorArea": 85.5, "floorAreaUnit": "m2"}, []),
    ({"floorArea": 85}, [{"field": "floorAreaUnit", "problem": "is required with floorArea"}]),
    ({"floorAreaUnit": "sqft"}, [{"field": "floorArea", "problem": "is required with floorAreaUnit"}]),
    ({"floorArea": 0, "floorAreaUnit": "m2"}, [{"field": "floorArea", "problem": "must be above 0"}]),
    ({"floorArea": True, "floorAreaUnit": "m2"}, [{"field": "floorArea", "problem": "must be a number"}]),
    ({"floorArea": 1, "floorAreaUnit": "acre"}, [{"field": "floorAreaUnit", "problem": "must be one of m2, sqft"}]),
    ({"description": "x" * 1000}, []),
    ({"description": "x" * 1001}, [{"field": "description", "problem": "must be at most 1000 characters"}]),
    ({"description": "  "}, [{"field": "description", "problem": "must not be blank"}]),
    ({"agentName": "A"}, []),
    ({"agentName": ""}, [{"field": "agentName", "problem": "must not be blank"}]),
    ({"agentPhone": "+44 (20) 7946-0958"}, []),
    ({"agentPhone": "call me"}, [{"field": "agentPhone", "problem": "must be a phone number: digits, spaces and + ( ) . -"}]),
    ({"listingUrl": "https://example.com/a?b=c#d"}, []),
    ({"listingUrl": "HTTP://example.com"}, [{"field": "listingUrl", "problem": "must be an http:// or https:// URL"}]),
    ({"listingUrl": "javascript:alert(1)"}, [{"field": "listingUrl", "problem": "must be an http:// or https:// URL"}]),
    ({"photoUrl": "ftp://example.com/a.jpg"}, [{"field": "photoUrl", "problem": "must be an http:// or https:// URL"}]),
    ({"photoUrl": "http://example.com/" + "a" * 2000}, [{"field": "photoUrl", "problem": "must be at most 2000 characters"}]),
    ({"pageSize": "Letter"}, []),
    ({"pageSize": "letter"}, [{"field": "pageSize", "problem": "must be one of A4, Letter"}]),
    ({"description": None}, [{"field": "description", "problem": "must not be null (leave the field out)"}]),
    ({"photos": []}, [{"field": "photos", "problem": "unknown field"}]),
]


@pytest.mark.parametrize(("changes", "expected"), CASES)
def test_listing_optional_fields_are_checked(changes: dict[str, Any], expected: list[dict[str, str]]) -> None:
    assert problems(**changes) == expected


@pytest.mark.parametrize(("changes", "expected"), CASES)
def test_listing_schema_agrees_with_the_model(changes: dict[str, Any], expected: list[dict[str, str]]) -> None:
    """The API refuses (422) exactly what the worker's model refuses: a job it accepts always renders."""
    valid = Draft202012Validator(SCHEMA).is_valid({**EXAMPLE_LISTING, **changes})
    assert valid is (expected == [])


def test_listing_schema_is_one_the_api_runs() -> None:
    payload_schema.check(SCHEMA)
    assert Draft202012Validator(SCHEMA).is_valid(FULL_EXAMPLE_LISTING)
    assert validate_listing(FULL_EXAMPLE_LISTING) == []


def test_listing_optional_fields_have_no_null_in_their_schema() -> None:
    for name, prop in SCHEMA["properties"].items():
        assert "anyOf" not in prop and prop.get("default", "") is not None, name


def test_format_area_prints_the_unit() -> None:
    assert format_area(145, "m2") == "145 m²"
    assert format_area(1250.5, "sqft") == "1,250.5 sq ft"
    assert format_area(85.125, "m2") == "85.12 m²"


def test_docs_demo_names_every_payload_field() -> None:
    text = (ROOT / "docs" / "demo.md").read_text()
    assert all(f"| `{name}` |" in text for name in Listing.model_fields)
