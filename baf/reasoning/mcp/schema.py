"""An MCP server's JSON Schemas, checked on baf's side with bounded work.

A server's input schema is shown to the model as it is, and the model's arguments are checked against it
before the call is sent, so the model hears of a mistake at once. That check runs on the event loop, so a
schema written to be slow must not be able to stall it (every session of the process would wait). Hence:

- **Regular expressions of a server are never run.** ``pattern``, ``patternProperties`` (and so
  ``additionalProperties`` beside it) are not enforced by baf: Python's ``re`` backtracks, holds the GIL
  and cannot be interrupted, so ``^(a|aa)+$`` against 60 characters would take years. The server
  checks its own input. ``unevaluatedProperties`` and ``unevaluatedItems`` are not enforced either: their
  check does work no budget can count.
- **The schema itself is bounded** when the tools are listed: at most :data:`MAX_SCHEMA_VALUES` JSON values,
  nested at most :data:`MAX_SCHEMA_DEPTH` deep. Every ``$ref`` must resolve inside the schema (nothing is
  fetched from the network), and no ``$ref`` may lead back to where it started without going into a
  property or an item (``{"$ref": "#"}`` at the root would recurse forever on any call). A tool whose
  schema breaks one of these is not offered.
- **One check has a budget** of :data:`CHECK_BUDGET` units of work (a keyword applied to a value is one; an
  ``enum`` costs its length; ``uniqueItems`` the square of the array's length when it holds objects or
  arrays). A check that would spend more stops, and the arguments go to the server unchecked (the server
  checks its own input), with a warning. So does one that recurses too deep. The units do not depend on
  timing, so a re-run decides as the run did.

``format`` is not asserted (as JSON Schema says by default).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "CHECK_BUDGET",
    "MAX_SCHEMA_DEPTH",
    "MAX_SCHEMA_VALUES",
    "CheckAbandoned",
    "bounded_errors",
    "bounded_validator",
    "schema_problem",
]

#: JSON values (objects, arrays, strings, numbers... counted one each) a tool's input schema may hold.
MAX_SCHEMA_VALUES = 20_000
#: How deep objects and arrays may nest in a tool's input schema.
MAX_SCHEMA_DEPTH = 64
#: Units of work one check of a call's arguments may spend (a keyword applied to a value is one unit).
CHECK_BUDGET = 10_000

# Keywords whose subschemas apply to the same value (a cycle through them alone never ends) ...
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_LIST = ("allOf", "anyOf", "oneOf", "extends", "disallow", "type")
_IN_PLACE_MAP = ("dependentSchemas", "dependencies")
# ... and those whose subschemas apply to a property, an item or a property name.
_CHILD_ONE = ("additionalProperties", "propertyNames", "additionalItems", "contains", "unevaluatedItems",
              "unevaluatedProperties", "items")  # fmt: skip
_CHILD_LIST = ("items", "prefixItems")
_CHILD_MAP = ("properties", "patternProperties")
_REFS = ("$ref", "$dynamicRef", "$recursiveRef")

# Keywords baf leaves to the server (see the module docstring).
_NOT_ENFORCED = ("pattern", "patternProperties", "unevaluatedProperties", "unevaluatedItems", "format")

_budget: contextvars.ContextVar[list[int]] = contextvars.ContextVar("baf_mcp_schema_budget")


class CheckAbandoned(Exception):
    """A check of arguments stopped before its end (its budget spent, or too deep): nothing was decided."""


# --------------------------------------------------------------------------------------------------------
# When the tools are listed
# --------------------------------------------------------------------------------------------------------


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` cannot be a tool's input schema, or ``None`` if it can.

    It must be a JSON object schema (``"type": "object"``), within the bounds of the module docstring, a
    valid JSON Schema, every ``$ref`` resolving inside it, and no ``$ref`` cycle that stays on one value.
    """
    if not isinstance(schema, dict):
        return f"its input schema is not a JSON object schema but {type(schema).__name__}"
    if schema.get("type") != "object":
        return f"its input schema has type {schema.get('type')!r}; a tool's arguments are a JSON object"
    size = _size_problem(schema)
    if size is not None:
        return size
    import jsonschema  # a dependency of the mcp package, present whenever MCP tools are

    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return f"its input schema is not a valid JSON Schema ({_short(exc.message)})"
    return _reference_problem(cls, schema)


def _size_problem(schema: Any) -> str | None:
    """Too many values or too deep (counted without recursion, so any depth is safe to look at)."""
    count = 0
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > MAX_SCHEMA_VALUES:
            return f"its input schema holds more than {MAX_SCHEMA_VALUES} values"
        if depth > MAX_SCHEMA_DEPTH:
            return f"its input schema nests more than {MAX_SCHEMA_DEPTH} levels deep"
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return None


def _reference_problem(cls: Any, schema: dict[str, Any]) -> str | None:
    """Every subschema reachable from the root is visited once; each ``$ref`` is resolved (within the
    schema and the bundled meta-schemas only), and the graph of subschemas applied to the same value is
    searched for a cycle."""
    import referencing
    import referencing.exceptions
    import referencing.jsonschema
    from jsonschema_specifications import REGISTRY

    specification = referencing.jsonschema.specification_with(
        cls.ID_OF(cls.META_SCHEMA) or "urn:unknown-dialect", default=referencing.jsonschema.DRAFT202012
    )
    root = REGISTRY.resolver_with_root(specification.create_resource(schema))
    in_place: dict[int, list[int]] = {}
    seen: set[int] = set()
    stack: list[tuple[Any, Any]] = [(schema, root)]
    while stack:
        node, resolver = stack.pop()
        if not isinstance(node, dict) or id(node) in seen:
            continue
        seen.add(id(node))
        resolver = resolver.in_subresource(specification.create_resource(node))
        edges = in_place.setdefault(id(node), [])
        for keyword, value in node.items():
            if keyword in _REFS and isinstance(value, str):
                try:
                    resolved = resolver.lookup(value)
                except referencing.exceptions.Unresolvable:
                    return f"its input schema refers to {_short(value)!r}, which it does not hold"
                edges.append(id(resolved.contents))
                stack.append((resolved.contents, resolved.resolver))
                continue
            for sub, same_value in _subschemas(keyword, value):
                if same_value and isinstance(sub, dict):
                    edges.append(id(sub))
                stack.append((sub, resolver))
    if _has_cycle(in_place):
        return "its input schema refers to itself without going into a property or item (it would never end)"
    return None


def _subschemas(keyword: str, value: Any) -> Iterator[tuple[Any, bool]]:
    """The subschemas under ``keyword``, each with whether it applies to the same value."""
    if keyword in _IN_PLACE_ONE or keyword in _CHILD_ONE:
        if isinstance(value, dict):
            yield value, keyword in _IN_PLACE_ONE
    if keyword in _IN_PLACE_LIST or keyword in _CHILD_LIST:
        if isinstance(value, list):
            yield from ((v, keyword in _IN_PLACE_LIST) for v in value if isinstance(v, dict))
    if keyword in _IN_PLACE_MAP or keyword in _CHILD_MAP:
        if isinstance(value, dict):
            yield from ((v, keyword in _IN_PLACE_MAP) for v in value.values() if isinstance(v, dict))


def _has_cycle(edges: dict[int, list[int]]) -> bool:
    """Whether the directed graph ``edges`` has a cycle (depth first, without recursion)."""
    done: set[int] = set()
    for start in edges:
        if start in done:
            continue
        on_path = {start}
        path: list[tuple[int, Iterator[int]]] = [(start, iter(edges.get(start, ())))]
        while path:
            node, successors = path[-1]
            following = next(successors, None)
            if following is None:
                path.pop()
                on_path.discard(node)
                done.add(node)
            elif following in on_path:
                return True
            elif following not in done:
                on_path.add(following)
                path.append((following, iter(edges.get(following, ()))))
    return False


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


# --------------------------------------------------------------------------------------------------------
# When a call is checked
# --------------------------------------------------------------------------------------------------------


def bounded_validator(schema: dict[str, Any]) -> Any:
    """A ``jsonschema`` validator of ``schema`` that runs no regular expression, resolves ``$ref`` only
    inside the schema, and spends from the budget of the check under way (see :func:`bounded_errors`)."""
    import jsonschema
    import referencing

    base = jsonschema.validators.validator_for(schema)
    keywords = {keyword: _spending(keyword, check) for keyword, check in base.VALIDATORS.items()}
    for keyword in _NOT_ENFORCED:
        keywords[keyword] = _not_enforced
    if "additionalProperties" in keywords:
        keywords["additionalProperties"] = _additional_properties(keywords["additionalProperties"])
    cls = jsonschema.validators.extend(base, keywords)
    return cls(schema, registry=referencing.Registry())


def bounded_errors(validator: Any, instance: Any) -> list[Any]:
    """Every error of ``instance`` under ``validator`` (from :func:`bounded_validator`).

    Raises:
        CheckAbandoned: the check would spend more than :data:`CHECK_BUDGET`, or recursed too deep.
    """
    token = _budget.set([CHECK_BUDGET])
    try:
        return list(validator.iter_errors(instance))
    except RecursionError:
        raise CheckAbandoned("the arguments nest too deeply to be checked against the schema") from None
    finally:
        _budget.reset(token)


def _spend(units: int) -> None:
    left = _budget.get(None)
    if left is None:
        return  # a check outside bounded_errors (none in baf): nothing to count against
    left[0] -= units
    if left[0] < 0:
        raise CheckAbandoned(f"checking the arguments against the schema would take more than {CHECK_BUDGET} steps")


def _cost(keyword: str, value: Any, instance: Any) -> int:
    if keyword == "enum" and isinstance(value, list):
        return 1 + len(value)
    if keyword == "uniqueItems" and isinstance(instance, list):
        if all(isinstance(item, str | int | float | bool) or item is None for item in instance):
            return 1 + len(instance)  # sorted, then neighbours compared
        return 1 + len(instance) ** 2  # objects and arrays: every pair is compared
    if keyword in ("required", "properties", "dependentRequired") and isinstance(value, list | dict):
        return 1 + len(value)
    return 1


def _spending(keyword: str, check: Callable[..., Any]) -> Callable[..., Any]:
    def spend_then_check(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        _spend(_cost(keyword, value, instance))
        return check(validator, value, instance, schema)

    return spend_then_check


def _not_enforced(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
    return iter(())


def _additional_properties(check: Callable[..., Any]) -> Callable[..., Any]:
    """``additionalProperties`` beside ``patternProperties`` is left to the server: which properties are
    additional depends on the patterns, which baf does not run."""

    def additional_properties(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        if isinstance(schema, dict) and "patternProperties" in schema:
            return iter(())
        return check(validator, value, instance, schema)

    return additional_properties
