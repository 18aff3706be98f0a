"""pgqw.payload_schema: the rules a registered payload schema must meet (check), and validation that runs
any schema it accepts in bounded time, fetching nothing (validator, errors). No database."""
from __future__ import annotations

import http.server
import json
import threading
import time
from typing import Any

import jsonschema
import pydantic
import pytest

from pgqw import demo, payload_schema
from pgqw.payload_schema import (
    PayloadCheckTimeout,
    PayloadSchemaError,
    check,
    errors,
    validator,
)


class Node(pydantic.BaseModel):
    name: str = pydantic.Field(pattern=r"^[a-z][a-z0-9_]*$", max_length=40)
    children: list[Node] = []
    parent: Node | None = None
    tags: dict[str, int] = {}


def _nested(levels: int) -> dict[str, Any]:
    """A schema whose deepest value is `levels` below the top (jsonpath's count: `{"default": 1}` is 1)."""
    node: Any = 1
    for _ in range(levels - 1):
        node = {"a": node}
    return {"default": node}


@pytest.mark.parametrize("schema", [
    demo.Listing.model_json_schema(),
    pydantic.TypeAdapter(Node).json_schema(),
    {},
    {"type": "object", "properties": {"$ref": {"type": "string"}}},  # a field named $ref
    {"$schema": payload_schema.DIALECT, "type": "object"},
    {"$defs": {"x": {"$anchor": "name", "type": "string"}}, "properties": {"a": {"$ref": "#name"}}},
    {"$id": "https://example.invalid/root", "$defs": {"b": {"$id": "https://example.invalid/b",
                                                             "$defs": {"c": {"type": "string"}},
                                                             "properties": {"q": {"$ref": "#/$defs/c"}}}},
     "properties": {"n": {"$ref": "#/$defs/b"}}},  # embedded resources: their refs resolve inside them
    {"type": "object", "patternProperties": {"^x-": {"type": "string"}}, "additionalProperties": False},
])
def test_payload_schema_check_accepts_what_models_generate(schema: dict[str, Any]) -> None:
    check(schema)
    validator(schema)


@pytest.mark.parametrize("schema, says", [
    ([{"type": "object"}], "must be a JSON object"),
    ({"enum": [float("nan")]}, "must be JSON"),
    ({"description": "x" * payload_schema.SCHEMA_MAX_BYTES}, "more than the limit of 131072"),
    (_nested(payload_schema.NESTING_MAX + 1), "nests more than 32 levels"),
    ({"$schema": "http://json-schema.org/draft-07/schema#"}, "is not Draft 2020-12"),
    ({"$ref": "https://example.invalid/schema.json"}, "points outside the schema"),
    ({"properties": {"a": {"$ref": "other.json#/x"}}}, "at /properties/a: $ref 'other.json#/x' points outside"),
    ({"$dynamicRef": "https://example.invalid/meta"}, "$dynamicRef"),
    ({"type": 5}, "at /type: not a valid Draft 2020-12 schema"),
    ({"properties": {"a": {"minLength": -1}}}, "at /properties/a/minLength"),
    ({"$ref": "#/$defs/missing"}, "points at nothing in the schema"),
    ({"$ref": "#"}, "leads back to the top without descending into the payload"),
    ({"allOf": [{"anyOf": [{"$ref": "#"}]}]}, "leads back to the top"),
    ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"not": {"$ref": "#/$defs/a"}}}, "properties": {"x": {"$ref": "#/$defs/a"}}},
     "leads back to /$defs/"),
    ({"properties": {"a": {"pattern": "^(?=x)"}}}, "at /properties/a/pattern: '^(?=x)' is not a pattern"),
    ({"properties": {"a": {"pattern": r"(a)\1"}}}, "no backreferences"),
    ({"patternProperties": {"(": {}}}, "at /patternProperties/(: '(' is not a pattern"),
    ({"pattern": "a{1001}"}, "is not a pattern the API can run"),
    ({"pattern": ".{1000}.{300}"}, "RE2 instructions, more than 10000"),
    ({"properties": {str(n): {"pattern": ".{1000}"} for n in range(13)}}, "more than 100000 RE2 instructions in all"),
])
def test_payload_schema_check_refuses_what_the_api_cannot_run(schema: Any, says: str) -> None:
    with pytest.raises(PayloadSchemaError) as exc:
        check(schema)
    assert says in str(exc.value)
    assert isinstance(exc.value, ValueError)


def test_payload_schema_check_nesting_at_the_limit_is_accepted() -> None:
    check(_nested(payload_schema.NESTING_MAX))


def test_payload_schema_check_a_loop_through_a_descending_keyword_is_accepted() -> None:
    # Each step goes one level into the payload, so the payload's own depth ends it.
    check({"type": "array", "items": {"$ref": "#"}})
    check({"properties": {"next": {"$ref": "#"}}, "propertyNames": {"$ref": "#"}})


SLOW = "^(a+)+$"  # exponential in a backtracking engine: 0.8 s at 24 characters, x4 per two more
SLOW_TEXT = "a" * 40 + "!"


@pytest.mark.parametrize("schema, payload_of", [
    ({"properties": {"a": {"pattern": SLOW}}}, lambda text: {"a": text}),
    ({"patternProperties": {SLOW: {"type": "integer"}}}, lambda text: {text: "not an integer"}),
    ({"patternProperties": {SLOW: {}}, "additionalProperties": False}, lambda text: {text: 1}),
    ({"patternProperties": {SLOW: {}}, "unevaluatedProperties": False}, lambda text: {text: 1}),
    ({"propertyNames": {"pattern": SLOW}}, lambda text: {text: 1}),
], ids=["pattern", "patternProperties", "additionalProperties", "unevaluatedProperties", "propertyNames"])
def test_payload_schema_errors_catastrophic_pattern_runs_in_linear_time(schema: dict[str, Any],
                                                                        payload_of: Any) -> None:
    checked = validator(schema)
    for text in (SLOW_TEXT, "a" * 60_000 + "!"):
        started = time.monotonic()
        errors(checked, payload_of(text), seconds=10)
        assert time.monotonic() - started < 0.5


def test_payload_schema_errors_patterns_keep_their_meaning() -> None:
    checked = validator({"properties": {"a": {"pattern": SLOW}}, "patternProperties": {"^x-": {"type": "integer"}},
                         "additionalProperties": False})
    assert errors(checked, {"a": "aaaa", "x-1": 1}, seconds=1) == []
    assert sorted(e.validator for e in errors(checked, {"a": SLOW_TEXT, "x-1": "one", "y": 1}, seconds=1)) == \
        ["additionalProperties", "pattern", "type"]


def test_payload_schema_every_regex_jsonschema_runs_is_re2() -> None:
    """jsonschema reaches the backtracking engine through the module `re` in its keywords and helpers:
    every function of theirs that names `re` must be one payload_schema runs with RE2 instead (a new one
    in a jsonschema release fails here first)."""
    from jsonschema import _keywords, _utils

    engine = payload_schema._engine()
    using_re = {(module.__name__, name) for module in (_keywords, _utils) for name, fn in vars(module).items()
                if callable(fn) and getattr(fn, "__module__", None) == module.__name__
                and hasattr(fn, "__code__") and "re" in payload_schema._code_names(fn.__code__)}
    rebound = {(_keywords.__name__, name) for name in engine.REBOUND_KEYWORDS} | \
              {(_utils.__name__, name) for name in engine.REBOUND_UTILS}
    assert using_re <= rebound, using_re - rebound
    for name, keyword in engine.Validator.VALIDATORS.items():
        fn = keyword.__wrapped__
        if name in engine.REBOUND_KEYWORDS:
            assert fn.__globals__["re"] is not __import__("re"), name
        else:  # a keyword left as jsonschema wrote it calls none of the helpers that use `re`
            assert not set(engine.REBOUND_UTILS) & payload_schema._code_names(fn.__code__), name


def test_payload_schema_errors_time_limit_ends_an_exponential_schema() -> None:
    # anyOf of two branches that both recurse: 2^depth evaluations, each step cheap.
    branch = {"type": "array", "items": {"$ref": "#/$defs/n"}}
    schema = {"$defs": {"n": {"anyOf": [{**branch, "minItems": 2}, {**branch, "maxItems": 0}]}}, "$ref": "#/$defs/n"}
    check(schema)
    payload: Any = "leaf"
    for _ in range(60):
        payload = [payload]
    started = time.monotonic()
    with pytest.raises(PayloadCheckTimeout):
        errors(validator(schema), payload, seconds=0.2)
    # Ended by the limit, not by the work (2^60 steps would take years); the margin is for a busy machine.
    assert time.monotonic() - started < 5


def test_payload_schema_errors_unique_items_is_linear() -> None:
    checked = validator({"type": "array", "uniqueItems": True})
    items = [{"n": n} for n in range(20_000)]
    # Pairwise, 20,000 items are 200 million comparisons (minutes): within the limit only if linear (ms).
    assert errors(checked, items, seconds=5) == []
    assert [e.message for e in errors(checked, [*items, {"n": 7.0}], seconds=10)] == ["has duplicate items"]
    assert errors(checked, [1, True, "1", [1], {"a": 1}], seconds=10) == []  # JSON equality: true is not 1


def test_payload_schema_validator_fetches_nothing() -> None:
    """Below check(), the validator's registry refuses every reference outside the schema: nothing is
    fetched even for a schema that was never checked (one stored before these rules)."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/schema+json")
            self.end_headers()
            self.wfile.write(b'{"type": "string"}')

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/schema.json"
        engine = payload_schema._engine()
        unchecked = engine.Validator({"$ref": url}, registry=engine.registry, format_checker=engine.formats)
        with pytest.raises(PayloadSchemaError, match="does not resolve"):
            errors(unchecked, 5, seconds=1)
        with pytest.raises(PayloadSchemaError, match="points outside"):
            validator({"$ref": url})
    finally:
        server.shutdown()
        server.server_close()
    assert hits == []


def test_payload_schema_errors_format_regex_that_python_cannot_compile_is_invalid() -> None:
    checked = validator({"type": "string", "format": "regex"})
    assert errors(checked, "^ok$", seconds=1) == []
    assert [e.validator for e in errors(checked, "(" * 5000 + ")" * 5000, seconds=1)] == ["format"]
    assert [e.validator for e in errors(checked, "(", seconds=1)] == ["format"]


def test_payload_schema_errors_a_deep_payload_through_a_recursive_schema_is_checked() -> None:
    """The API's payloads nest at most 100 levels; a checked recursive schema follows them there."""
    checked = validator(pydantic.TypeAdapter(Node).json_schema())
    payload: dict[str, Any] = {"name": "leaf"}
    for n in range(50):
        payload = {"name": f"n{n}", "children": [payload]}
    assert errors(checked, payload, seconds=5) == []


def test_payload_schema_check_without_the_api_extra_applies_the_database_rules(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(payload_schema, "_engine_available", lambda: False)
    check({"type": 5})  # the meta-schema needs jsonschema
    with pytest.raises(PayloadSchemaError, match="points outside"):
        check({"$ref": "https://example.invalid/x"})


def test_payload_schema_size_is_measured_as_jsonb_text() -> None:
    """The byte count check() uses is PostgreSQL's octet_length(payload_schema::text) for these."""
    schema = {"type": "object", "properties": {"é": {"enum": [1, "two", None, True]}}, "required": ["é"]}
    text = json.dumps(schema, ensure_ascii=False, separators=(", ", ": "))
    assert text == '{"type": "object", "properties": {"é": {"enum": [1, "two", null, true]}}, "required": ["é"]}'
    assert jsonschema.Draft202012Validator.check_schema(schema) is None
