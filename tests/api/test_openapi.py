"""app/openapi.py stays true: the same routes and methods as the app, valid schemas, resolvable $refs.
(Every response of the other API tests is validated against it by the CheckedClient.)"""
from __future__ import annotations

from typing import Any, Iterator

from flask import Flask
from flask.testing import FlaskClient
from jsonschema import Draft202012Validator

from tests.api.openapi_check import OPENAPI, openapi_path

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


def test_openapi_payload_schemas_are_the_registered_models() -> None:
    """The request body is made from the task types' payload models: the listing schema accepts the
    example and refuses what the model refuses."""
    from jsonschema import ValidationError

    from pgqw.demo import Listing
    from pgqw.listing import EXAMPLE_LISTING

    schema = {"$ref": "#/components/schemas/Payload.listing_flyer", "components": OPENAPI["components"]}
    Draft202012Validator(schema).validate(EXAMPLE_LISTING)
    Listing.model_validate(EXAMPLE_LISTING)
    bad = {**EXAMPLE_LISTING, "currency": "XXX"}
    try:
        Listing.model_validate(bad)
    except Exception:  # noqa: BLE001 - pydantic's ValidationError
        pass
    else:
        raise AssertionError("the model accepts a currency it should refuse")
    try:
        Draft202012Validator(schema).validate(bad)
    except ValidationError:
        pass
    else:
        raise AssertionError("the schema accepts a currency the model refuses")
    variants = OPENAPI["components"]["schemas"]["CreateJob"]["oneOf"]
    assert {v["properties"]["type"]["const"] for v in variants} == {"listing_flyer", "noop"}


def test_openapi_task_types_whose_names_sanitise_alike_keep_their_own_payloads() -> None:
    """A component name holds only A-Z a-z 0-9 . _ -: "send email" must not take send_email's place."""
    from pgqw.app.openapi import create_job_schemas

    schemas = create_job_schemas([("send email", {"type": "object", "required": ["a"]}, None),
                                  ("send_email", {"type": "object", "required": ["b"]}, None)])
    refs = {v["properties"]["type"]["const"]: v["properties"]["payload"]["$ref"]
            for v in schemas["CreateJob"]["oneOf"]}
    assert refs == {"send_email": "#/components/schemas/Payload.send_email",
                    "send email": "#/components/schemas/Payload.send_email_2"}
    assert schemas["Payload.send_email"]["required"] == ["b"]
    assert schemas["Payload.send_email_2"]["required"] == ["a"]
