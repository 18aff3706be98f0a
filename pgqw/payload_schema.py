"""Payload JSON Schemas: what a task type's schema must be to be registered, and the bounded validation
of payloads against one.

A worker login may register any schema (register_task_types), and the API runs it on every POST of the
type, so a registered schema is input, not configuration. check() refuses a schema the API could not run
safely; validator() and errors() run one it accepts without fetching anything, without a backtracking
regex engine and within a time limit. The rules, in the order check() applies them:

1. a JSON object of at most SCHEMA_MAX_BYTES bytes (as jsonb text) nested at most NESTING_MAX levels;
2. `$schema`, when present, is Draft 2020-12's (the dialect every schema is read in);
3. every `$ref` and `$dynamicRef` (any string-valued member of that name, anywhere) starts with `#`:
   it points into the schema itself, so there is nothing to fetch;
4. a valid Draft 2020-12 schema (its meta-schema: `{"type": 5}` is refused);
5. every `pattern` and `patternProperties` key compiles with RE2 (no lookaround or backreferences;
   RE2 matches in time linear in the text, no catastrophic backtracking), into at most
   PATTERN_PROGRAM_MAX instructions each and SCHEMA_PROGRAM_MAX in all;
6. every reference resolves, and none leads back to where it started without descending into the
   payload (`{"$ref": "#"}` would apply itself to the same value for ever).

register_task_types enforces rules 1 to 3 in the database too: the worker role calls it directly. Rules
4 to 6 need jsonschema and google-re2 (the `api` extra); without them check() applies rules 1 to 3 only.
The API needs them, and applies every rule to each schema before it uses it.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import re
import time
import types
from collections.abc import Iterator
from typing import Any

SCHEMA_MAX_BYTES = 131072   # octet_length(payload_schema::text), what register_task_types measures
NESTING_MAX = 32            # levels below the top (jsonpath's .** levels: `{"a": {"b": 1}}` is 2)
DIALECT = "https://json-schema.org/draft/2020-12/schema"
PATTERN_PROGRAM_MAX = 10_000   # RE2 instructions of one pattern (`.{1000}` is 8,004, `^[a-z]{3}$` 10)
SCHEMA_PROGRAM_MAX = 100_000   # ... of all of a schema's patterns together
PATTERN_MEMORY_BYTES = 8 << 20  # RE2's memory budget per pattern (its default), program and DFA cache
CHECK_SECONDS = 5.0         # how long check() may take over the meta-schema before it gives up

REF_KEYWORDS = ("$ref", "$dynamicRef")


class PayloadSchemaError(ValueError):
    """The schema breaks one of the rules above; the message names the rule and where (a JSON pointer)."""


class PayloadCheckTimeout(TimeoutError):
    """errors() ran out of its time before it had checked the whole payload."""


# ---- rules 1 to 3: plain Python, no dependency ------------------------------------------------------

def _where(pointer: str) -> str:
    return f"at {pointer}" if pointer else "at the top"


def _escape(token: Any) -> str:
    return str(token).replace("~", "~0").replace("/", "~1")


def _check_shape(schema: Any) -> None:
    if not isinstance(schema, dict):
        raise PayloadSchemaError(f"a payload schema must be a JSON object, not {type(schema).__name__}")
    try:
        # jsonb's text form: ", " and ": " between members, UTF-8.
        text = json.dumps(schema, ensure_ascii=False, allow_nan=False, separators=(", ", ": "))
    except (TypeError, ValueError) as exc:
        raise PayloadSchemaError(f"a payload schema must be JSON: {exc}") from None
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > SCHEMA_MAX_BYTES:
        raise PayloadSchemaError(f"the payload schema is {size} bytes, more than the limit of {SCHEMA_MAX_BYTES}")
    if "$schema" in schema and schema["$schema"] not in (DIALECT, DIALECT + "#"):
        raise PayloadSchemaError(f"at /$schema: {str(schema['$schema'])[:100]!r} is not Draft 2020-12 ({DIALECT}), "
                                 "the only dialect payload schemas are read in")
    level: list[tuple[Any, int, str]] = [(schema, 0, "")]
    while level:
        node, depth, pointer = level.pop()
        if depth > NESTING_MAX:
            raise PayloadSchemaError(f"{_where(pointer)}: the payload schema nests more than {NESTING_MAX} levels")
        if isinstance(node, dict):
            for keyword in REF_KEYWORDS:
                ref = node.get(keyword)
                if isinstance(ref, str) and not ref.startswith("#"):
                    raise PayloadSchemaError(
                        f"{_where(pointer)}: {keyword} {ref[:100]!r} points outside the schema; a payload schema "
                        f"is read alone (nothing is fetched), so every {keyword} starts with # "
                        "(#/$defs/Name)")
            level.extend((v, depth + 1, f"{pointer}/{_escape(k)}") for k, v in node.items())
        elif isinstance(node, list):
            level.extend((v, depth + 1, f"{pointer}/{n}") for n, v in enumerate(node))


# ---- the engine: jsonschema with RE2 patterns, no retrieval, a deadline ----------------------------

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("pgqw_payload_check_deadline",
                                                                         default=None)


class _Expired(Exception):
    """Raised from inside the validator when the deadline has passed (never seen outside this module)."""


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _tick() -> None:
    deadline = _DEADLINE.get()
    if deadline is not None and time.monotonic() > deadline:
        raise _Expired()


def _code_names(code: types.CodeType) -> set[str]:
    """The global names a function's code (and the code nested in it) refers to."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


class _Engine:
    """Built once, on first use: the validator class, its formats, the registry and RE2's options."""

    def __init__(self) -> None:
        import jsonschema
        import re2
        from jsonschema import _keywords, _utils
        from jsonschema.exceptions import ValidationError
        from referencing import Registry
        from referencing.exceptions import NoSuchResource, Unresolvable
        from referencing.jsonschema import DRAFT202012

        self.jsonschema = jsonschema
        self.re2 = re2
        self.Unresolvable = Unresolvable
        self.DRAFT202012 = DRAFT202012
        options = re2.Options()
        options.log_errors = False  # RE2 would write every refused pattern to stderr
        options.never_capture = True  # only "does it match" is asked
        options.max_mem = PATTERN_MEMORY_BYTES
        self.options = options

        def refuse(uri: str) -> Any:
            raise NoSuchResource(ref=uri)  # type: ignore[call-arg]

        # Nothing is ever fetched: a reference to anything outside the schema (and the meta-schemas
        # jsonschema ships) is unresolvable.
        self.registry = Registry(retrieve=refuse)  # type: ignore[call-arg]

        compiled = functools.lru_cache(maxsize=512)(self.compile)

        class RE2Search:
            """What jsonschema's pattern keywords call as `re.search`: RE2, each pattern compiled once."""

            error = re2.error

            @staticmethod
            def search(pattern: str, string: str, flags: int = 0) -> Any:
                try:
                    return compiled(pattern).search(string)
                except UnicodeEncodeError:  # a lone surrogate (the API refuses the text anyway): as U+FFFD
                    return compiled(pattern).search(
                        string.encode("utf-16", "surrogatepass").decode("utf-16", "replace"))

        # jsonschema runs `pattern`, and the patternProperties keys in patternProperties,
        # additionalProperties and unevaluatedProperties, through the module `re` (a backtracking
        # engine, holding the GIL). Copies of those functions whose `re` is RE2 (the rest of their code
        # is jsonschema's own); tests/unit/test_payload_schema.py fails when another function of
        # jsonschema starts to use `re`.
        def rebound(fn: Any, namespace: dict[str, Any]) -> Any:
            copy = types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__)
            copy.__kwdefaults__ = fn.__kwdefaults__
            copy.__qualname__ = fn.__qualname__
            return copy

        utils = {**vars(_utils), "re": RE2Search}
        for name in self.REBOUND_UTILS:
            utils[name] = rebound(getattr(_utils, name), utils)
        keywords_ns = {**vars(_keywords), "re": RE2Search, **{name: utils[name] for name in self.REBOUND_UTILS}}
        base = jsonschema.Draft202012Validator
        keywords = dict(base.VALIDATORS)
        for name in self.REBOUND_KEYWORDS:
            keywords[name] = rebound(keywords[name], keywords_ns)

        def unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
            # jsonschema compares items pairwise (quadratic for objects); a set of canonical forms is linear.
            if unique and validator.is_type(instance, "array"):
                seen = set()
                for item in instance:
                    key = _canonical(item)
                    if key in seen:
                        yield ValidationError("has duplicate items")
                        return
                    seen.add(key)

        keywords["uniqueItems"] = unique_items

        def ticking(fn: Any) -> Any:
            # Every keyword checks the deadline before it runs: a validation cannot outlast its time by
            # more than one keyword's own work (one RE2 match at most, which releases the GIL).
            @functools.wraps(fn)
            def keyword(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
                _tick()
                return fn(validator, value, instance, schema)
            return keyword

        self.Validator = jsonschema.validators.extend(
            base, validators={name: ticking(fn) for name, fn in keywords.items()})

        # Formats: Draft 2020-12's, with `regex` (a payload value that must be a regular expression)
        # compiled by Python's re as the worker's model would, and its RecursionError a "no".
        self.formats = jsonschema.FormatChecker(formats=())
        self.formats.checkers.update(base.FORMAT_CHECKER.checkers)

        @self.formats.checks("regex", raises=(re.error, RecursionError, OverflowError, ValueError))
        def is_regex(instance: object) -> bool:
            return not isinstance(instance, str) or bool(re.compile(instance))

        # The meta-schema's own `format: regex` (on pattern and patternProperties) is left to the RE2
        # check of rule 5, which names the pattern.
        meta_formats = jsonschema.FormatChecker(formats=())
        meta_formats.checkers.update({k: v for k, v in base.FORMAT_CHECKER.checkers.items() if k != "regex"})
        self.meta = self.Validator(base.META_SCHEMA, registry=self.registry, format_checker=meta_formats)

    # The functions of jsonschema copied with RE2 for `re` (see above).
    REBOUND_KEYWORDS = ("pattern", "patternProperties", "additionalProperties", "unevaluatedProperties")
    REBOUND_UTILS = ("find_additional_properties", "find_evaluated_property_keys_by_schema")

    def compile(self, pattern: str) -> Any:
        return self.re2.compile(pattern, self.options)


@functools.lru_cache(maxsize=1)
def _engine() -> _Engine:
    return _Engine()


def _engine_available() -> bool:
    try:
        _engine()
    except ImportError:
        return False
    return True


def _canonical(value: Any) -> Any:
    """A hashable form equal for JSON-equal values (1 and 1.0 alike, true and 1 not)."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, (int, float)):
        return ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, dict):
        return ("o", frozenset((k, _canonical(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return ("a", tuple(_canonical(v) for v in value))
    if value is None:
        return ("z", None)
    return ("?", repr(value))


# The keywords whose value is one subschema, a list of them or an object of them, and whether each
# applies to the same value (in place) or to values inside it (down). $defs holds subschemas that apply
# only through a reference.
_ONE: dict[str, bool | None] = {
    "not": True, "if": True, "then": True, "else": True, "items": False, "contains": False,
    "additionalProperties": False, "propertyNames": False, "unevaluatedItems": False, "unevaluatedProperties": False,
}
_MANY: dict[str, bool | None] = {"allOf": True, "anyOf": True, "oneOf": True, "prefixItems": False}
_MAP: dict[str, bool | None] = {"dependentSchemas": True, "properties": False, "patternProperties": False,
                                "$defs": None}


def _children(node: dict[str, Any]) -> Iterator[tuple[str, Any, bool | None]]:
    for keyword, in_place in _ONE.items():
        if keyword in node:
            yield f"/{keyword}", node[keyword], in_place
    for keyword, in_place in _MANY.items():
        for n, child in enumerate(node.get(keyword) or ()):
            yield f"/{keyword}/{n}", child, in_place
    for keyword, in_place in _MAP.items():
        for name, child in (node.get(keyword) or {}).items():
            yield f"/{keyword}/{_escape(name)}", child, in_place


def _check_meta(engine: _Engine, schema: dict[str, Any]) -> None:
    try:
        with _deadline(CHECK_SECONDS):
            error = engine.jsonschema.exceptions.best_match(engine.meta.iter_errors(schema))
    except _Expired:
        raise PayloadSchemaError(f"the payload schema took more than {CHECK_SECONDS:g} s to check") from None
    if error is not None:
        pointer = "".join(f"/{_escape(p)}" for p in error.absolute_path)
        raise PayloadSchemaError(f"{_where(pointer)}: not a valid Draft 2020-12 schema: {error.message[:300]}")


def _check_graph(engine: _Engine, schema: dict[str, Any]) -> None:
    """Rules 5 and 6: every subschema reached from the top (keyword by keyword, and through each
    reference), its patterns compiled, its references resolved; then no cycle of in-place edges."""
    root = engine.DRAFT202012.create_resource(schema)
    resolver = engine.registry.resolver_with_root(root)
    nodes: dict[int, str] = {}          # id of a subschema → its JSON pointer
    edges: dict[int, list[int]] = {}    # in place: the subschemas applied to the same value
    keep: list[Any] = []                # what the ids are of, kept alive while they are compared
    program = 0
    todo: list[tuple[Any, Any, str]] = [(schema, resolver, "")]
    while todo:
        node, resolver, pointer = todo.pop()
        if not isinstance(node, dict) or id(node) in nodes:
            continue
        nodes[id(node)] = pointer
        keep.append(node)
        out = edges.setdefault(id(node), [])
        patterns = [(f"{pointer}/pattern", node["pattern"])] if isinstance(node.get("pattern"), str) else []
        patterns += [(f"{pointer}/patternProperties/{_escape(p)}", p) for p in node.get("patternProperties") or {}]
        for where, pattern in patterns:
            try:
                size = engine.compile(pattern).programsize
            except engine.re2.error as exc:
                raise PayloadSchemaError(
                    f"{_where(where)}: {pattern[:100]!r} is not a pattern the API can run: "
                    f"{_re2_message(exc)} (patterns are RE2: no lookaround, no backreferences)") from None
            if size > PATTERN_PROGRAM_MAX:
                raise PayloadSchemaError(
                    f"{_where(where)}: {pattern[:100]!r} compiles to {size} RE2 instructions, more than "
                    f"{PATTERN_PROGRAM_MAX}: bound lengths with minLength/maxLength rather than counted "
                    "repeats of a wide class")
            program += size
            if program > SCHEMA_PROGRAM_MAX:
                raise PayloadSchemaError(
                    f"{_where(where)}: the schema's patterns compile to more than {SCHEMA_PROGRAM_MAX} RE2 "
                    "instructions in all")
        for keyword in REF_KEYWORDS:
            ref = node.get(keyword)
            if isinstance(ref, str):
                try:
                    resolved = resolver.lookup(ref)
                except engine.Unresolvable:
                    raise PayloadSchemaError(
                        f"{_where(pointer)}: {keyword} {ref[:100]!r} points at nothing in the schema") from None
                target = resolved.contents
                if isinstance(target, dict):
                    out.append(id(target))
                # Reached first through the reference only when nothing names it as a subschema
                # (a pointer into `definitions`, say): its pointer is then the reference.
                todo.insert(0, (target, resolved.resolver, ref))
        for suffix, child, in_place in _children(node):
            if in_place and isinstance(child, dict):
                out.append(id(child))
            child_resolver = resolver.in_subresource(engine.DRAFT202012.create_resource(child))
            todo.append((child, child_resolver, pointer + suffix))

    # A cycle of in-place edges (iterative depth-first search, three colours).
    state: dict[int, int] = {}  # 1: on the current path, 2: done
    for start in edges:
        if start in state:
            continue
        state[start] = 1
        path = [(start, iter(edges[start]))]
        while path:
            current, following = path[-1]
            step = next(following, None)
            if step is None:
                state[current] = 2
                path.pop()
            elif state.get(step) == 1:
                raise PayloadSchemaError(
                    f"{_where(nodes.get(current, ''))}: a reference leads back to {nodes.get(step) or 'the top'} "
                    "without descending into the payload, so it would apply itself to the same value for ever")
            elif step not in state:
                state[step] = 1
                path.append((step, iter(edges.get(step, ()))))


def _re2_message(exc: BaseException) -> str:
    text = exc.args[0] if exc.args else str(exc)
    return text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)


# ---- the API ---------------------------------------------------------------------------------------

def check(schema: Any) -> None:
    """Raises PayloadSchemaError, naming the rule and where, when the schema breaks one of the rules of
    this module's docstring. Registration calls it for every task type; the API before it uses a schema."""
    _check_shape(schema)
    if not _engine_available():
        return
    engine = _engine()
    _check_meta(engine, schema)
    _check_graph(engine, schema)


def validator(schema: dict[str, Any]) -> Any:
    """check(schema), then a Draft 2020-12 validator of it (jsonschema's, with the formats it checks)
    whose patterns are RE2's, which fetches nothing and honours errors()' time limit."""
    check(schema)
    engine = _engine()
    return engine.Validator(schema, registry=engine.registry, format_checker=engine.formats)


def errors(checked: Any, payload: Any, *, seconds: float) -> list[Any]:
    """Every jsonschema ValidationError of the payload against a validator(), within `seconds`.

    Raises PayloadCheckTimeout when the time is up first, and PayloadSchemaError when the schema cannot
    be applied after all (a reference that no longer resolves; a recursion deeper than Python's stack,
    which a payload nested within the API's limit never reaches through a checked schema)."""
    engine = _engine()
    try:
        with _deadline(seconds):
            return list(checked.iter_errors(payload))
    except _Expired:
        raise PayloadCheckTimeout(f"the payload took more than {seconds:g} s to check") from None
    except engine.Unresolvable as exc:
        raise PayloadSchemaError(f"a reference does not resolve: {str(exc)[:200]}") from None
    except RecursionError:
        raise PayloadSchemaError("applying the schema recursed deeper than the interpreter allows") from None
