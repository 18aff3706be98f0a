"""register_task_types refuses a payload schema the API could not run safely, by the rules that need no
JSON Schema library (pgqw.payload_schema's 1 to 3): at most 131072 bytes, nested at most 32 levels,
Draft 2020-12 if it names a $schema, every $ref and $dynamicRef into itself. A worker login calls the
function directly, so the database holds these rules itself; pgqw.payload_schema.check applies the
same ones (and more) in Python, and the two agree."""
from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from pgqw import payload_schema
from tests.helpers import one
from tests.sql.queue_state import snapshot


def nested(levels: int) -> dict[str, Any]:
    """A schema whose deepest value is `levels` below the top."""
    node: Any = 1
    for _ in range(levels - 1):
        node = {"a": node}
    return {"default": node}


def register(conn: psycopg.Connection, schema: Any) -> None:
    conn.execute("select * from register_task_types(%s::jsonb)",
                 [Jsonb([{"name": "t", "payload_schema": {"type": "object"}},
                         {"name": "schemed", "payload_schema": schema}])])


ACCEPTED = [
    {},
    {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"},
    {"$schema": "https://json-schema.org/draft/2020-12/schema#"},
    {"$defs": {"a": {"type": "string"}}, "properties": {"x": {"$ref": "#/$defs/a"}, "y": {"$dynamicRef": "#a"}}},
    {"properties": {"$ref": {"type": "string"}}},  # a field named $ref is no reference
    {"items": [{"$ref": "#"}]},
    nested(payload_schema.NESTING_MAX),
    {"description": "é" * ((payload_schema.SCHEMA_MAX_BYTES - 20) // 2)},
]
REFUSED = [
    (nested(payload_schema.NESTING_MAX + 1), "nests more than 32 levels"),
    ({"description": "x" * payload_schema.SCHEMA_MAX_BYTES}, "more than the limit of 131072"),
    ({"$schema": "http://json-schema.org/draft-07/schema#"}, "names the $schema"),
    ({"$schema": 2020}, "names the $schema"),
    ({"$ref": "https://example.invalid/x.json"}, "points outside it"),
    ({"properties": {"a": {"allOf": [{"$ref": "other.json"}]}}}, "points outside it"),
    ({"items": [{"$dynamicRef": "https://example.invalid/meta#meta"}]}, "points outside it"),
]


@pytest.mark.parametrize("schema", ACCEPTED, ids=range(len(ACCEPTED)))
def test_register_task_types_payload_schema_within_the_rules_is_stored(conn: psycopg.Connection, schema: Any) -> None:
    register(conn, schema)
    assert one(conn, "select payload_schema from task_types where name = 'schemed'")["payload_schema"] == schema


@pytest.mark.parametrize("schema, says", REFUSED, ids=[says for _, says in REFUSED])
def test_register_task_types_payload_schema_outside_the_rules_raises_qv400_and_changes_nothing(
    conn: psycopg.Connection, schema: Any, says: str
) -> None:
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as exc:
        register(conn, schema)
    assert exc.value.sqlstate == "QV400"
    assert "task type 'schemed': its payload_schema" in exc.value.diag.message_primary
    assert says in exc.value.diag.message_primary
    assert snapshot(conn) == before


@pytest.mark.parametrize("schema", ACCEPTED + [s for s, _ in REFUSED], ids=range(len(ACCEPTED) + len(REFUSED)))
def test_payload_schema_shape_rules_agree_with_register_task_types(conn: psycopg.Connection, schema: Any) -> None:
    """The same verdict from Python (pgqw.payload_schema's rules 1 to 3) and from the database."""
    try:
        payload_schema._check_shape(schema)
        python_accepts = True
    except payload_schema.PayloadSchemaError:
        python_accepts = False
    try:
        with conn.transaction(force_rollback=True):
            register(conn, schema)
        database_accepts = True
    except psycopg.Error as exc:
        assert exc.sqlstate == "QV400"
        database_accepts = False
    assert python_accepts == database_accepts
