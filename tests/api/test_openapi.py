"""app/openapi.py stays true: the same routes and methods as the app, valid schemas, resolvable $refs.
(Every response of the other API tests is validated against it by the CheckedClient.)"""
from __future__ import annotations

from typing import Any, Iterator

from flask import Flask
from flask.testing import FlaskClient
from jsonschema import Draft202012Validator

from pgqw.app.openapi import OPENAPI
from tests.api.openapi_check import openapi_path

IGNORED_METHODS = {"HEAD", "OPTIONS"}


def app_operations(app: Flask) -> set[tuple[str, str]]:
    return {
        (openapi_path(rule.rule), method.lower())
        for rule in app.url_map.iter_rules()
        if rule.rule.startswith("/api/")
        for method in (rule.methods or set()) - IGNORED_METHODS
    }


def documented_operations() -> set[tuple[str, str]]:
    return {(path, method) for path, item in OPENAPI["paths"].items() for method in item}


def test_openapi_documents_every_api_route_and_nothing_else(shared_app: Flask) -> None:
    in_app, in_doc = app_operations(shared_app), documented_operations()
    assert in_app - in_doc == set(), "routes missing from app/openapi.py"
    assert in_doc - in_app == set(), "app/openapi.py documents routes the app does not have"


def test_openapi_is_served(shared_client: FlaskClient) -> None:
    r = shared_client.get("/api/openapi.json")
    assert r.status_code == 200
    assert r.get_json() == OPENAPI
    assert r.get_json()["openapi"].startswith("3.1")


def walk(node: Any) -> Iterator[Any]:
    yield node
    if isinstance(node, dict):
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


def resolve(pointer: str) -> Any:
    assert pointer.startswith("#/")
    node: Any = OPENAPI
    for part in pointer[2:].split("/"):
        node = node[part]
    return node


def test_openapi_refs_resolve_and_schemas_are_valid_json_schema() -> None:
    for node in walk(OPENAPI):
        if isinstance(node, dict) and "$ref" in node:
            assert resolve(node["$ref"]) is not None
    for name, schema in OPENAPI["components"]["schemas"].items():
        Draft202012Validator.check_schema(schema)
    for path, item in OPENAPI["paths"].items():
        for method, op in item.items():
            for status, response in op["responses"].items():
                for media in response.get("content", {}).values():
                    Draft202012Validator.check_schema(media["schema"])


def test_openapi_operations_are_complete() -> None:
    operation_ids = []
    for path, item in OPENAPI["paths"].items():
        for method, op in item.items():
            operation_ids.append(op["operationId"])
            assert op["summary"] and op["responses"]
            params = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert params == ({"id"} if "{id}" in path else set()), (method, path)
            for status, response in op["responses"].items():
                assert response["description"], (method, path, status)
                if int(status) >= 400:
                    assert response["content"]["application/json"]["schema"] == {
                        "$ref": "#/components/schemas/ErrorEnvelope"}
    assert len(operation_ids) == len(set(operation_ids))


def test_openapi_listing_schema_matches_the_validator() -> None:
    """The documented payload and pgqw.listing agree on an example and on a refusal."""
    from jsonschema import ValidationError

    from pgqw.listing import validate_listing

    schema = {"$ref": "#/components/schemas/Listing", "components": OPENAPI["components"]}
    example = OPENAPI["components"]["schemas"]["Listing"]["example"]
    Draft202012Validator(schema).validate(example)
    assert validate_listing(example) == []
    bad = {**example, "currency": "XXX"}
    assert validate_listing(bad)
    try:
        Draft202012Validator(schema).validate(bad)
    except ValidationError:
        pass
    else:
        raise AssertionError("the schema accepts a currency the validator refuses")
