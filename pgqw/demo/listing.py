"""The ``listing_flyer`` payload: the Listing model, its currencies and its money rules.

The model is the one declaration of the payload: the worker parses each job's payload with it, its JSON
Schema (registered with the task type) is what the API checks a POST against, and validate_listing's
field-by-field problems are read from its errors. Pure Python: no database, no I/O.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypedDict

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError


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
DESCRIPTION_MAX = 1000
AGENT_NAME_MAX = 100
PHONE_MAX = 40
URL_MAX = 2000
FLOOR_AREA_MAX = 1_000_000
FIELDS = ("title", "priceMinor", "currency", "address", "bedrooms")  # the required ones

LISTING_TYPES = ("sale", "rent")
PRICE_PERIODS = ("month", "week", "year")
AREA_UNITS = {"m2": "m²", "sqft": "sq ft"}  # floorAreaUnit: how the flyer prints it
PAGE_SIZES = ("A4", "Letter")
URL_PATTERN = r"^https?://[^\s/?#@]+([/?#]\S*)?$"  # RE2 and Python alike
PHONE_PATTERN = r"^\+?[0-9(][0-9 ().-]*[0-9]$"

if TYPE_CHECKING:
    CurrencyCode = str  # the codes of CURRENCIES, checked by the model at run time
else:
    CurrencyCode = Literal[tuple(sorted(CURRENCIES))]

Url = Annotated[str, Field(max_length=URL_MAX, pattern=URL_PATTERN)]


def _no_nulls(schema: dict[str, Any]) -> None:
    """An optional field is left out, never null: its schema is its type's alone (no anyOf with null,
    no default null), as the model's before-validator has it."""
    for prop in schema.get("properties", {}).values():
        options = prop.get("anyOf")
        if options and {"type": "null"} in options and len(options) == 2:
            del prop["anyOf"]
            prop.update(next(o for o in options if o != {"type": "null"}))
        if "default" in prop and prop["default"] is None:
            del prop["default"]


# The rules between fields, for the API's JSON Schema check (the model's after-validator says the same).
CROSS_FIELD_SCHEMA: dict[str, Any] = {
    "dependentRequired": {"floorArea": ["floorAreaUnit"], "floorAreaUnit": ["floorArea"]},
    "allOf": [{
        "if": {"properties": {"listingType": {"const": "rent"}}, "required": ["listingType"]},
        "then": {"required": ["pricePeriod"]},
        "else": {"not": {"required": ["pricePeriod"]}},
    }],
}


def _schema_extra(schema: dict[str, Any]) -> None:
    _no_nulls(schema)
    schema.update(CROSS_FIELD_SCHEMA)


class Listing(BaseModel):
    """A property listing: what the flyer shows. The first five fields are required; the rest are what an
    agent adds for a flyer worth handing out."""

    model_config = ConfigDict(extra="forbid", strict=True, title="Listing", json_schema_extra=_schema_extra)

    title: Annotated[str, Field(min_length=1, max_length=TITLE_MAX, pattern=r"\S")]
    priceMinor: Annotated[int, Field(ge=0, le=MAX_PRICE_MINOR, description="price in minor units (kobo, cents)")]
    currency: CurrencyCode
    address: Annotated[str, Field(min_length=1, max_length=ADDRESS_MAX, pattern=r"\S")]
    bedrooms: Annotated[int, Field(ge=0, le=BEDROOMS_MAX)]

    listingType: Literal["sale", "rent"] | None = Field(None, description="for sale or for rent")
    pricePeriod: Literal["month", "week", "year"] | None = Field(
        None, description="what the rent's price is for; required with listingType rent, refused otherwise")
    description: Annotated[str, Field(min_length=1, max_length=DESCRIPTION_MAX, pattern=r"\S")] | None = None
    floorArea: Annotated[float, Field(gt=0, le=FLOOR_AREA_MAX, allow_inf_nan=False)] | None = Field(
        None, description="floor area, in floorAreaUnit (the two go together)")
    floorAreaUnit: Literal["m2", "sqft"] | None = None
    agentName: Annotated[str, Field(min_length=1, max_length=AGENT_NAME_MAX, pattern=r"\S")] | None = None
    agentPhone: Annotated[str, Field(min_length=3, max_length=PHONE_MAX, pattern=PHONE_PATTERN)] | None = Field(
        None, description="digits, spaces and + ( ) . -")
    listingUrl: Url | None = Field(
        None, description="http(s): the QR code's link (without it, the QR code links to the flyer itself)")
    photoUrl: Url | None = Field(
        None, description="http(s): a JPEG or PNG the worker fetches; a placeholder when it cannot be used")
    pageSize: Literal["A4", "Letter"] = "A4"

    @field_validator("listingType", "pricePeriod", "description", "floorArea", "floorAreaUnit", "agentName",
                     "agentPhone", "listingUrl", "photoUrl", "pageSize", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        if value is None:
            raise PydanticCustomError("null_forbidden", "must not be null (leave the field out)")
        return value

    @model_validator(mode="after")
    def _together(self) -> Listing:
        if (self.floorArea is None) != (self.floorAreaUnit is None):
            missing = "floorAreaUnit" if self.floorAreaUnit is None else "floorArea"
            other = "floorArea" if missing == "floorAreaUnit" else "floorAreaUnit"
            raise _rule(missing, f"is required with {other}")
        if self.listingType == "rent" and self.pricePeriod is None:
            raise _rule("pricePeriod", "is required with listingType rent (month, week or year)")
        if self.listingType != "rent" and self.pricePeriod is not None:
            raise _rule("pricePeriod", "is only for listingType rent")
        return self


def _rule(field: str, problem: str) -> PydanticCustomError:
    return PydanticCustomError("listing_rule", "{field} {problem}", {"field": field, "problem": problem})


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


CHOICES: dict[str, tuple[str, ...]] = {
    "currency": tuple(sorted(CURRENCIES)), "listingType": LISTING_TYPES, "pricePeriod": PRICE_PERIODS,
    "floorAreaUnit": tuple(AREA_UNITS), "pageSize": PAGE_SIZES,
}
PATTERN_PROBLEMS = {"listingUrl": "must be an http:// or https:// URL", "photoUrl": "must be an http:// or https:// URL",
                    "agentPhone": "must be a phone number: digits, spaces and + ( ) . -"}
ORDER = {name: i for i, name in enumerate(Listing.model_fields)}


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _problem(field: str, error: Any) -> str:
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "string_type":
        return "must be a string"
    if kind == "string_too_short":
        return "must not be blank" if ctx.get("min_length") == 1 else f"must be at least {ctx['min_length']} characters"
    if kind == "string_too_long":
        return f"must be at most {ctx['max_length']} characters"
    if kind == "string_pattern_mismatch":
        return PATTERN_PROBLEMS.get(field, "must not be blank")
    if kind == "int_type":
        return "must be an integer"
    if kind in ("float_type", "finite_number"):
        return "must be a number"
    if kind == "greater_than_equal":
        return "must not be negative" if ctx.get("ge") == 0 else f"must be at least {ctx['ge']}"
    if kind == "greater_than":
        return f"must be above {_number(ctx['gt'])}"
    if kind == "less_than_equal":
        return f"must be at most {_number(ctx['le'])}"
    if kind == "literal_error" and field in CHOICES:
        return "must be one of " + ", ".join(CHOICES[field])
    return str(error["msg"])


def validate_listing(payload: Any) -> list[FieldError]:
    """Return one error per bad field of a listing payload (the model's fields in order, then unknown
    fields by name); empty means valid."""
    if not isinstance(payload, dict):
        return [{"field": "payload", "problem": "must be a JSON object"}]
    try:
        Listing.model_validate(payload)
    except pydantic.ValidationError as exc:
        found: dict[str, str] = {}
        for error in exc.errors():
            if error["type"] == "listing_rule":
                field, problem = error["ctx"]["field"], error["ctx"]["problem"]
            else:
                field = str(error["loc"][0]) if error["loc"] else "payload"
                problem = _problem(field, error)
            found.setdefault(field, problem)
        ordered = sorted(found, key=lambda f: (ORDER.get(f, len(ORDER)), f))
        return [{"field": f, "problem": found[f]} for f in ordered]
    return []


def check_listing(payload: Any) -> Listing:
    """The payload as a Listing; raises InvalidPayload naming each bad field."""
    errors = validate_listing(payload)
    if errors:
        raise InvalidPayload(errors)
    return Listing.model_validate(payload)


# The demo's example listing: the page's form starts with it, `pgqw burst` sends it.
EXAMPLE_LISTING = {
    "title": "3-bedroom apartment in Yaba",
    "priceMinor": 270000000,
    "currency": "NGN",
    "address": "12 Herbert Macaulay Way, Yaba, Lagos",
    "bedrooms": 3,
}

# The same listing as an agent fills it in for a flyer to hand out (its photo is the caller's to add).
FULL_EXAMPLE_LISTING: dict[str, Any] = {
    **EXAMPLE_LISTING,
    "title": "Bright 3-bedroom apartment in Yaba",
    "priceMinor": 350000000,
    "listingType": "rent",
    "pricePeriod": "year",
    "description": "A quiet third-floor flat two streets from the Herbert Macaulay bus stop: a large living "
                   "room with a balcony, a fitted kitchen, two bathrooms, a 24-hour water supply, a backup "
                   "generator and parking for two cars. Ten minutes from the University of Lagos.",
    "floorArea": 145,
    "floorAreaUnit": "m2",
    "agentName": "Adaeze Okafor, Lagos Homes",
    "agentPhone": "+234 803 555 0142",
    "listingUrl": "https://homes.example.com/listings/yaba-3br-0142",
}


def format_price(price_minor: int, currency: str) -> str:
    """Format minor units for display: ``270000000, "NGN"`` → ``"₦2,700,000"``.

    The minor part is shown only when non-zero (``123456, "USD"`` → ``"$1,234.56"``).
    Exact integer arithmetic throughout.
    """
    if not isinstance(price_minor, int) or isinstance(price_minor, bool) or price_minor < 0:
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


def format_area(value: float, unit: str) -> str:
    """``145, "m2"`` → ``"145 m²"``; ``1250.5, "sqft"`` → ``"1,250.5 sq ft"`` (at most two decimals)."""
    if not math.isfinite(value):
        raise ValueError(f"floor area must be finite, got {value!r}")
    number = f"{value:,.2f}".rstrip("0").rstrip(".")
    return f"{number} {AREA_UNITS[unit]}"
