"""The JSON schema the model sees, from the JSON schema pydantic generates for a tool's arguments.

Pydantic's schema is correct but written for documents, not for a model reading a tool list: this
turns it into one self-contained schema.

- ``$ref`` into ``$defs`` is inlined (some providers refuse references); a recursive model cannot be
  inlined and is refused with :class:`~baf.errors.ConfigurationError`.
- ``title`` (pydantic derives one from every name) is dropped; ``description`` stays.
- ``"items": {}`` and ``"additionalProperties": true`` (what JSON Schema assumes anyway) are dropped;
  ``const`` (pydantic's spelling of a one-value ``Literal``) is written as a one-value ``enum``.
- ``{"anyOf": [X, {"type": "null"}]}`` becomes X with ``"null"`` added to its ``type`` (and to its
  ``enum``), the spelling models follow best.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from baf.errors import ConfigurationError

__all__ = ["model_facing_schema"]

_SINGLE_SUBSCHEMA = ("items", "additionalProperties", "not", "contains", "propertyNames")
_LIST_SUBSCHEMA = ("anyOf", "allOf", "oneOf", "prefixItems")
_MAP_SUBSCHEMA = ("properties", "patternProperties")
_NULL = {"type": "null"}


def model_facing_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` (as pydantic generated it) made self-contained and plain (see the module docstring).

    Raises:
        ConfigurationError: a type refers to itself, or a ``$ref`` that does not resolve.
    """
    return _clean(schema, schema.get("$defs", {}), ())


def _clean(node: Mapping[str, Any], defs: Mapping[str, Any], stack: tuple[str, ...]) -> dict[str, Any]:
    # Walking by keyword (rather than every nested dict) keeps a property that happens to be *named*
    # ``title`` or ``$ref`` intact, and leaves ``default``/``enum``/``const`` values untouched.
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("title", "$defs", "$ref"):
            continue
        if key in _MAP_SUBSCHEMA and isinstance(value, dict):
            out[key] = {name: _clean(sub, defs, stack) for name, sub in value.items()}
        elif key in _LIST_SUBSCHEMA and isinstance(value, list):
            out[key] = [_clean(sub, defs, stack) if isinstance(sub, dict) else sub for sub in value]
        elif key in _SINGLE_SUBSCHEMA and isinstance(value, dict):
            out[key] = _clean(value, defs, stack)
        else:
            out[key] = value
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if name in stack:
            raise ConfigurationError(
                f"the type {name!r} refers to itself; recursive models cannot be inlined into a tool schema"
            )
        if name not in defs:
            raise ConfigurationError(f"cannot resolve schema reference {ref!r}")
        # Keywords written next to the $ref (a field description, a default) win over the definition's.
        out = {**_clean(defs[name], defs, (*stack, name)), **out}
    if "const" in out and "enum" not in out:
        out["enum"] = [out.pop("const")]
    if out.get("items") == {}:
        del out["items"]
    if out.get("additionalProperties") is True:
        del out["additionalProperties"]
    return _compact_nullable(out)


def _compact_nullable(schema: dict[str, Any]) -> dict[str, Any]:
    arms = schema.get("anyOf")
    if not (isinstance(arms, list) and len(arms) == 2 and arms[1] == _NULL):
        return schema
    inner = arms[0]
    if not isinstance(inner.get("type"), str) or set(inner) & set(schema) - {"anyOf"}:
        return schema  # no single type to add "null" to, or keywords that would collide: keep anyOf
    rest = {key: value for key, value in schema.items() if key != "anyOf"}
    out = {**inner, **rest, "type": [inner["type"], "null"]}
    if "enum" in out and None not in out["enum"]:
        out["enum"] = [*out["enum"], None]
    return out
