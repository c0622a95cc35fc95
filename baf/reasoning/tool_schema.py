"""From Python types to the JSON schema the model sees for a tool's arguments.

- ``str``, ``int``, ``float``, ``bool`` map to ``string``, ``integer``, ``number``, ``boolean``.
- ``list[X]``, ``tuple[X, ...]``, ``set[X]``, ``frozenset[X]`` and ``Sequence[X]`` are arrays;
  ``tuple[X, Y]`` is a fixed-length array; ``dict[str, X]`` is an object.
- ``Optional[X]`` / ``X | None`` accepts ``null``.
- ``Literal[...]`` and ``Enum`` subclasses become ``enum``.
- A pydantic ``BaseModel`` becomes a nested object schema, inlined (no ``$ref``); recursive models cannot
  be inlined and are refused.
- Other types pydantic understands (``datetime``, ``UUID``, ``TypedDict``, ``Annotated`` with
  constraints, ...) use pydantic's JSON schema.
- An unannotated parameter (or ``Any``) accepts any JSON value (``{}``).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, get_args, get_origin

import pydantic
import pydantic_core

from baf.errors import ConfigurationError
from baf.reasoning.tool_signature import EMPTY, ToolParameter, is_union

__all__ = [
    "ARRAY_ORIGINS",
    "adapter_for",
    "is_enum",
    "is_model",
    "parameters_schema",
    "schema_for",
    "str_metadata_only",
]

_NoneType = type(None)
_EMPTY = EMPTY
_is_union = is_union
_SINGLE_SUBSCHEMA = ("items", "additionalProperties", "not", "contains", "propertyNames")
_LIST_SUBSCHEMA = ("anyOf", "allOf", "oneOf", "prefixItems")
_MAP_SUBSCHEMA = ("properties", "patternProperties")


def _inline_refs(node: dict[str, Any], defs: Mapping[str, Any], stack: tuple[str, ...]) -> dict[str, Any]:
    """Resolve ``$ref`` into ``$defs`` and drop pydantic's ``title`` noise, walking only schema positions.

    Walking by keyword (rather than every nested dict) keeps a property that happens to be *named*
    ``title`` or ``$ref`` intact, and leaves ``default``/``enum`` values untouched.
    """
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("title", "$defs", "$ref"):
            continue
        if key in _MAP_SUBSCHEMA and isinstance(value, dict):
            out[key] = {name: _inline_refs(sub, defs, stack) for name, sub in value.items()}
        elif key in _LIST_SUBSCHEMA and isinstance(value, list):
            out[key] = [_inline_refs(sub, defs, stack) if isinstance(sub, dict) else sub for sub in value]
        elif key in _SINGLE_SUBSCHEMA and isinstance(value, dict):
            out[key] = _inline_refs(value, defs, stack)
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
        out = {**_inline_refs(defs[name], defs, (*stack, name)), **out}
    return out


def _pydantic_schema(tp: Any) -> dict[str, Any]:
    schema = adapter_for(tp).json_schema()
    return _inline_refs(schema, schema.get("$defs", {}), ())


def _json_type_of_values(values: Sequence[Any]) -> str | None:
    """The JSON type shared by all enum values, or None when they are mixed."""
    if values and all(isinstance(v, str) for v in values):
        return "string"
    if values and all(isinstance(v, bool) for v in values):
        return "boolean"
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "integer"
    if values and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return "number"
    return None


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    json_type = _json_type_of_values(values)
    return {"type": json_type, "enum": values} if json_type else {"enum": values}


def _make_nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if not schema:
        return schema  # "any JSON" already includes null
    if isinstance(schema.get("type"), str):
        out = {**schema, "type": [schema["type"], "null"]}
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
        return out
    if "enum" in schema and "type" not in schema:
        return schema if None in schema["enum"] else {**schema, "enum": [*schema["enum"], None]}
    if list(schema) == ["anyOf"]:
        return {"anyOf": [*schema["anyOf"], {"type": "null"}]}
    return {"anyOf": [schema, {"type": "null"}]}


def is_model(tp: Any) -> bool:
    """Whether ``tp`` is a pydantic model class."""
    return isinstance(tp, type) and issubclass(tp, pydantic.BaseModel)


def is_enum(tp: Any) -> bool:
    """Whether ``tp`` is an ``Enum`` subclass."""
    return isinstance(tp, type) and issubclass(tp, enum.Enum)


ARRAY_ORIGINS: tuple[Any, ...] = (list, tuple, set, frozenset, Sequence)


def str_metadata_only(metadata: Sequence[Any]) -> bool:
    """Whether ``Annotated`` metadata is only description text (no constraints for pydantic)."""
    return all(isinstance(item, str) for item in metadata)


def schema_for(tp: Any) -> dict[str, Any]:
    """JSON schema for one annotation; ``{}`` means any JSON value."""
    if tp is Any or tp is _EMPTY or tp is object:
        return {}
    if tp is None or tp is _NoneType:
        return {"type": "null"}
    simple = {str: "string", bool: "boolean", int: "integer", float: "number"}
    if tp in simple:
        return {"type": simple[tp]}
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        inner, *metadata = args
        if str_metadata_only(metadata):
            return {**schema_for(inner), "description": " ".join(metadata)}
        return _pydantic_schema(tp)
    if _is_union(origin):
        arms = [arg for arg in args if arg is not _NoneType]
        union = schema_for(arms[0]) if len(arms) == 1 else {"anyOf": [schema_for(arm) for arm in arms]}
        return _make_nullable(union) if len(arms) < len(args) else union
    if origin is Literal:
        return _enum_schema(list(args))
    if is_enum(tp):
        return _enum_schema([member.value for member in tp])
    if is_model(tp):
        return _pydantic_schema(tp)
    container = origin or tp
    if container in ARRAY_ORIGINS:
        if container is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            return {
                "type": "array",
                "prefixItems": [schema_for(arg) for arg in args],
                "minItems": len(args),
                "maxItems": len(args),
            }
        array: dict[str, Any] = {"type": "array"}
        if args and schema_for(args[0]):
            array["items"] = schema_for(args[0])
        if container in (set, frozenset):
            array["uniqueItems"] = True
        return array
    if container in (dict, Mapping):
        mapping: dict[str, Any] = {"type": "object"}
        if args:
            key_type, value_type = args
            if key_type not in (str, Any):
                raise ConfigurationError(f"dict keys must be str (JSON object keys are strings), not in {tp}")
            if schema_for(value_type):
                mapping["additionalProperties"] = schema_for(value_type)
        return mapping
    try:
        return _pydantic_schema(tp)
    except pydantic.PydanticUserError as exc:
        raise ConfigurationError(f"cannot build a JSON schema for the type {tp!r}: {exc}") from exc
    except pydantic_core.SchemaError as exc:
        raise ConfigurationError(f"cannot build a JSON schema for the type {tp!r}: {exc}") from exc


_adapters: dict[Any, pydantic.TypeAdapter[Any]] = {}


def adapter_for(tp: Any) -> pydantic.TypeAdapter[Any]:
    """A pydantic ``TypeAdapter`` for ``tp``, built once per type."""
    try:
        return _adapters[tp]
    except KeyError:
        adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(tp)
        _adapters[tp] = adapter
        return adapter
    except TypeError:  # an unhashable annotation (rare): build it each time
        return pydantic.TypeAdapter(tp)


def parameters_schema(tool_name: str, params: Mapping[str, ToolParameter]) -> dict[str, Any]:
    """The JSON schema of a tool's arguments object: one property per parameter, ``required`` for those
    without a default or ``None`` in their type, and no other keys.

    Raises:
        ConfigurationError: a parameter type that has no JSON schema (naming the parameter).
    """
    properties: dict[str, Any] = {}
    for name, param in params.items():
        try:
            schema = schema_for(param.annotation)
        except ConfigurationError as exc:
            raise ConfigurationError(f"tool {tool_name!r}, parameter {name!r}: {exc}") from exc
        # The docstring's text wins over an Annotated[..., "text"] description.
        description = param.description or schema.pop("description", None) or None
        schema.pop("description", None)
        if description:
            schema = {"description": description, **schema}
        if param.default is not EMPTY:
            try:
                schema["default"] = json.loads(json.dumps(pydantic_core.to_jsonable_python(param.default)))
            except (TypeError, ValueError, pydantic_core.PydanticSerializationError):
                pass  # a default with no JSON form is simply not advertised
        properties[name] = schema
    return {
        "type": "object",
        "properties": properties,
        "required": [name for name, param in params.items() if param.required],
        "additionalProperties": False,
    }
