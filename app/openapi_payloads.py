"""The body of POST /api/jobs in the OpenAPI document: CreateJob, one shape per registered task type, each
with that type's payload schema as a component of its own (Payload.<name>, its $defs hoisted beside it)."""
from __future__ import annotations

import copy
import re
from typing import Any

from .models import JobRequest


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


_COMPONENT = re.compile(r"[^A-Za-z0-9._-]")


def _component_name(task_name: str, taken: set[str]) -> str:
    """Payload.<name>, the characters a component name may not hold made _, and numbered when another
    type's name came out the same (send email beside send_email: Payload.send_email_2)."""
    base = "Payload." + _COMPONENT.sub("_", task_name)
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    taken.add(name)
    return name


def _hoist(schema: dict[str, Any], prefix: str, into: dict[str, Any]) -> dict[str, Any]:
    """The schema with its $defs moved to components (named prefix.Def) and its refs rewritten."""
    schema = copy.deepcopy(schema)
    defs = schema.pop("$defs", {})

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                node = {**node, "$ref": f"#/components/schemas/{prefix}.{_COMPONENT.sub('_', ref[8:])}"}
            return {k: rewrite(v) for k, v in node.items()}
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    for name, sub in defs.items():
        into[f"{prefix}.{_COMPONENT.sub('_', name)}"] = rewrite(sub)
    return rewrite(schema)


def create_job_schemas(task_types: list[tuple[str, dict[str, Any], str | None]]) -> dict[str, Any]:
    """CreateJob (from the request model) and one payload schema per registered task type: the body
    of POST /api/jobs is one of CreateJob's shapes, one per type."""
    out: dict[str, Any] = {}
    base = _hoist(JobRequest.model_json_schema(), "CreateJob", out)
    variants = []
    taken: set[str] = set()
    # Names that are valid component names as they are keep them; the others are numbered if need be.
    components = {name: _component_name(name, taken)
                  for name, _, _ in sorted(task_types, key=lambda t: _COMPONENT.search(t[0]) is not None)}
    for name, payload_schema, description in task_types:
        component = components[name]
        payload = _hoist(payload_schema, component, out)
        if description and "description" not in payload:
            payload["description"] = description
        out[component] = payload
        variant = copy.deepcopy(base)
        variant["title"] = f"CreateJob.{name}"
        variant["properties"]["type"] = {"const": name}
        variant["properties"]["payload"] = ref(component)
        variants.append(variant)
    out["CreateJob"] = {"oneOf": variants, "description": "a job of one registered task type"} if variants else base
    return out
