"""Tools: plain Python functions the model can call.

A :class:`Tool` wraps a function (sync or async) and derives from its signature and Google-style docstring
the OpenAI function schema the model sees::

    def search(query: str, limit: int = 10) -> list[str]:
        \"\"\"Search the catalogue.

        Args:
            query: Free-text search terms.
            limit: How many results to return at most.
        \"\"\"

    tool = Tool(search)
    tool.schema        # {"type": "function", "function": {"name": "search", ...}}
    await tool.run('{"query": "shoes"}')   # validated, called, rendered to a string

Rules the schema follows (and :meth:`Tool.validate_args` enforces):

- ``str``, ``int``, ``float``, ``bool`` map to ``string``, ``integer``, ``number``, ``boolean``. A boolean
  is never accepted as a number; an integer is accepted for a ``float`` (and converted); a number with a
  zero fraction (``3.0``) is accepted for an ``int``, as JSON Schema defines ``integer``.
- ``list[X]``, ``tuple[X, ...]``, ``set[X]``, ``frozenset[X]`` and ``Sequence[X]`` are arrays (converted
  to the annotated container); ``tuple[X, Y]`` is a fixed-length array; ``dict[str, X]`` is an object.
- ``Optional[X]`` / ``X | None`` is optional and accepts ``null``; when the argument is left out and the
  parameter has no default, the function receives ``None``. Any other default makes a parameter optional,
  and ``null`` for it, where its type has no null, means "not given" (models often send it for what they
  leave unset): the default applies.
- ``Literal[...]`` and ``Enum`` subclasses become ``enum`` (an Enum argument arrives as the member).
- A pydantic ``BaseModel`` becomes a nested object schema, inlined (no ``$ref``); the argument arrives as
  a model instance. Recursive models cannot be inlined and are refused.
- Other types pydantic understands (``datetime``, ``UUID``, ``TypedDict``, ``Annotated`` with
  constraints, ...) use pydantic's JSON schema, and are validated by pydantic in strict JSON mode.
- An unannotated parameter (or ``Any``) accepts any JSON value.
- A parameter named ``session``, or annotated with a class named ``Session``, is injected by the runtime
  (:meth:`Tool.call`'s ``session``) and never appears in the schema. A leading ``self`` is ignored.
- ``*args`` and ``**kwargs`` are refused with :class:`~baf.errors.ConfigurationError`: the model can
  only send named arguments, and a schema cannot describe "anything else".
"""

from __future__ import annotations

import asyncio
import copy
import enum
import functools
import inspect
import json
import math
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin, overload

import pydantic
import pydantic_core

from baf.errors import (
    ConfigurationError,
    ToolArgumentError,
    ToolError,
    ToolExecutionError,
    ToolTimeoutError,
)

__all__ = ["Tool", "parse_docstring", "tool"]

_NoneType = type(None)
_EMPTY = inspect.Parameter.empty
# OpenAI rejects function names outside this pattern; failing at construction beats a 400 at run time.
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_EXCERPT_CHARS = 200
_VALUE_CHARS = 40


def _no_constants(token: str) -> Any:
    raise ValueError(f"{token} is not valid JSON")


def _finite_float(token: str) -> float:
    value = float(token)
    if math.isinf(value):  # 1e999 is valid JSON text, but no number a tool could be given
        raise ValueError(f"the number {_shorten(token, _VALUE_CHARS)} is too large")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) < len(pairs):  # JSON would let the last one win, silently: say so instead
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"the key {key!r} appears more than once in one object")
            seen.add(key)
    return value


# ``json.loads(text, parse_constant=...)`` builds a decoder on every call, which cost more than the
# parse of a typical arguments object; one shared decoder (they are stateless) does the same.
_ARGUMENTS_DECODER = json.JSONDecoder(
    parse_constant=_no_constants, parse_float=_finite_float, object_pairs_hook=_unique_keys
)


# --------------------------------------------------------------------------------------------------------
# Docstrings
# --------------------------------------------------------------------------------------------------------

_ARG_SECTIONS = frozenset({"args", "arguments", "parameters", "params", "keyword args", "keyword arguments", "kwargs"})
_SECTION_RE = re.compile(
    r"^(args|arguments|parameters|params|keyword args|keyword arguments|kwargs|returns?|yields?|raises|"
    r"examples?|notes?|attributes|todo|warnings?|see also|references|methods)\s*:\s*$",
    re.IGNORECASE,
)
_ARG_LINE_RE = re.compile(r"^\*{0,2}(?P<name>[A-Za-z_]\w*)\s*(?:\([^)]*\))?\s*:\s*(?P<text>.*)$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _join_paragraphs(lines: list[str]) -> str:
    """Join wrapped lines into paragraphs: single newlines become spaces, blank lines separate."""
    paragraphs: list[str] = []
    current: list[str] = []
    for line in lines:
        if line.strip():
            current.append(line.strip())
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    if current:
        paragraphs.append(" ".join(current))
    return "\n\n".join(paragraphs)


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its description and per-argument descriptions.

    The description is the text before the first section header (``Args:``, ``Returns:``, ...). In the
    ``Args:`` section, ``name: text`` and ``name (type): text`` start an argument; more-indented lines
    continue it.
    """
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    description: list[str] = []
    args: dict[str, list[str]] = {}
    section: str | None = None
    arg_indent: int | None = None
    current: str | None = None
    for line in lines:
        header = _SECTION_RE.match(line) if _indent(line) == 0 else None
        if header:
            section = header.group(1).lower()
            arg_indent, current = None, None
            continue
        if section is None:
            description.append(line)
            continue
        if section not in _ARG_SECTIONS:
            continue
        if not line.strip():
            if current is not None:
                args[current].append("")
            continue
        indent = _indent(line)
        if indent == 0:
            # Unindented text ends the section (Google style indents section bodies).
            section, current = "end", None
            continue
        if arg_indent is None:
            arg_indent = indent
        match = _ARG_LINE_RE.match(line.strip()) if indent <= arg_indent else None
        if match:
            current = match.group("name")
            args[current] = [match.group("text")]
        elif current is not None:
            args[current].append(line)
    return _join_paragraphs(description), {name: _join_paragraphs(text) for name, text in args.items()}


# --------------------------------------------------------------------------------------------------------
# Types -> JSON schema
# --------------------------------------------------------------------------------------------------------

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
    schema = _adapter(tp).json_schema()
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


def _is_union(origin: Any) -> bool:
    return origin is Union or origin is types.UnionType


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, pydantic.BaseModel)


def _is_enum(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, enum.Enum)


_ARRAY_ORIGINS: tuple[Any, ...] = (list, tuple, set, frozenset, Sequence)


def _str_metadata_only(metadata: Sequence[Any]) -> bool:
    return all(isinstance(item, str) for item in metadata)


def _schema_for(tp: Any) -> dict[str, Any]:
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
        if _str_metadata_only(metadata):
            return {**_schema_for(inner), "description": " ".join(metadata)}
        return _pydantic_schema(tp)
    if _is_union(origin):
        arms = [arg for arg in args if arg is not _NoneType]
        union = _schema_for(arms[0]) if len(arms) == 1 else {"anyOf": [_schema_for(arm) for arm in arms]}
        return _make_nullable(union) if len(arms) < len(args) else union
    if origin is Literal:
        return _enum_schema(list(args))
    if _is_enum(tp):
        return _enum_schema([member.value for member in tp])
    if _is_model(tp):
        return _pydantic_schema(tp)
    container = origin or tp
    if container in _ARRAY_ORIGINS:
        if container is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            return {
                "type": "array",
                "prefixItems": [_schema_for(arg) for arg in args],
                "minItems": len(args),
                "maxItems": len(args),
            }
        array: dict[str, Any] = {"type": "array"}
        if args and _schema_for(args[0]):
            array["items"] = _schema_for(args[0])
        if container in (set, frozenset):
            array["uniqueItems"] = True
        return array
    if container in (dict, Mapping):
        mapping: dict[str, Any] = {"type": "object"}
        if args:
            key_type, value_type = args
            if key_type not in (str, Any):
                raise ConfigurationError(f"dict keys must be str (JSON object keys are strings), not in {tp}")
            if _schema_for(value_type):
                mapping["additionalProperties"] = _schema_for(value_type)
        return mapping
    try:
        return _pydantic_schema(tp)
    except pydantic.PydanticUserError as exc:
        raise ConfigurationError(f"cannot build a JSON schema for the type {tp!r}: {exc}") from exc
    except pydantic_core.SchemaError as exc:
        raise ConfigurationError(f"cannot build a JSON schema for the type {tp!r}: {exc}") from exc


# --------------------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------------------

_adapters: dict[Any, pydantic.TypeAdapter[Any]] = {}


def _adapter(tp: Any) -> pydantic.TypeAdapter[Any]:
    try:
        return _adapters[tp]
    except KeyError:
        adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(tp)
        _adapters[tp] = adapter
        return adapter
    except TypeError:  # an unhashable annotation (rare): build it each time
        return pydantic.TypeAdapter(tp)


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _describe_value(value: Any) -> str:
    """How a received JSON value is named in error messages: its JSON type and a short excerpt."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {json.dumps(value)}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {_shorten(json.dumps(value, ensure_ascii=False), _VALUE_CHARS)}"
    if isinstance(value, list):
        return f"array of {len(value)} item{'s' if len(value) != 1 else ''}"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _describe_type(tp: Any) -> str:
    """How an expected type is named in error messages, in JSON vocabulary the model understands."""
    if tp is Any or tp is _EMPTY or tp is object:
        return "any JSON value"
    if tp is None or tp is _NoneType:
        return "null"
    simple = {str: "string", bool: "boolean", int: "integer", float: "number"}
    if tp in simple:
        return simple[tp]
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        return _describe_type(args[0])
    if _is_union(origin):
        return " or ".join(_describe_type(arg) for arg in args)
    if origin is Literal:
        return "one of " + ", ".join(json.dumps(arg) for arg in args)
    if _is_enum(tp):
        return "one of " + ", ".join(json.dumps(member.value) for member in tp)
    if _is_model(tp):
        return f"object ({tp.__name__})"
    container = origin or tp
    if container in _ARRAY_ORIGINS:
        if container is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            return f"array of exactly {len(args)} items"
        return f"array of {_describe_type(args[0])}" if args else "array"
    if container in (dict, Mapping):
        return f"object with {_describe_type(args[1])} values" if args else "object"
    return getattr(tp, "__name__", str(tp))


def _same_json_value(expected: Any, received: Any) -> bool:
    # type() identity keeps True from matching 1 (and 1 from matching 1.0), as in JSON.
    return type(expected) is type(received) and expected == received


def _format_path(path: str, loc: Sequence[Any]) -> str:
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _check_with_pydantic(value: Any, tp: Any, path: str, problems: list[str]) -> Any:
    adapter = _adapter(tp)
    try:
        try:
            payload = json.dumps(value)
        except TypeError:  # a Python object handed in by code rather than a model: validate it as is
            return adapter.validate_python(value)
        # Strict JSON mode gives the same rules as the top level: no "5" for 5, no true for 1, while
        # still reading ISO dates, UUID strings and arrays for tuples the way JSON spells them.
        return adapter.validate_json(payload, strict=True)
    except pydantic.ValidationError as exc:
        for error in exc.errors(include_url=False):
            where = _format_path(path, error["loc"])
            if error["type"] == "missing":
                problems.append(f"argument '{where}': missing required field")
            else:
                problems.append(
                    f"argument '{where}': {error['msg'][:1].lower()}{error['msg'][1:]}, "
                    f"got {_describe_value(error['input'])}"
                )
        return None


def _check(value: Any, tp: Any, path: str, problems: list[str]) -> Any:
    """Validate ``value`` against ``tp``; return the converted value, appending problems found."""
    if tp is Any or tp is _EMPTY or tp is object:
        return value

    def wrong() -> None:
        problems.append(f"argument '{path}': expected {_describe_type(tp)}, got {_describe_value(value)}")

    if tp is None or tp is _NoneType:
        if value is not None:
            wrong()
        return None
    if tp is bool or tp is str:
        if not isinstance(value, tp):
            wrong()
        return value
    if tp is int:
        if isinstance(value, float) and not isinstance(value, bool) and value.is_integer():
            return int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            wrong()
        return value
    if tp is float:
        if not isinstance(value, int | float) or isinstance(value, bool):
            wrong()
            return value
        try:
            return float(value)
        except OverflowError:  # an integer beyond any float: a problem with the call, not the tool failing
            shown = _shorten(str(value), _VALUE_CHARS)
            problems.append(f"argument '{path}': expected a number, got {shown}, too large for one")
            return value
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        if _str_metadata_only(args[1:]):
            return _check(value, args[0], path, problems)
        return _check_with_pydantic(value, tp, path, problems)
    if _is_union(origin):
        if value is None and _NoneType in args:
            return None
        arms = [arg for arg in args if arg is not _NoneType]
        arm_problems: list[str] = []
        for arm in arms:
            arm_problems = []
            converted = _check(value, arm, path, arm_problems)
            if not arm_problems:
                return converted
        if len(arms) == 1 and isinstance(value, list | dict):
            problems.extend(arm_problems)  # inside a structure, the arm's own messages say where it broke
        else:
            wrong()
        return value
    if origin is Literal:
        for option in args:
            if _same_json_value(option, value):
                return option
        wrong()
        return value
    if _is_enum(tp):
        if isinstance(value, tp):
            return value
        for member in tp:
            if _same_json_value(member.value, value):
                return member
        wrong()
        return value
    if _is_model(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            wrong()
            return value
        return _check_with_pydantic(value, tp, path, problems)
    container = origin or tp
    if container in _ARRAY_ORIGINS:
        if not isinstance(value, list | tuple):
            wrong()
            return value
        if container is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            item_types = list(args)
            if len(value) != len(item_types):
                wrong()
                return value
            return tuple(
                _check(item, item_type, f"{path}[{i}]", problems)
                for i, (item, item_type) in enumerate(zip(value, item_types, strict=True))
            )
        item_type = args[0] if args else Any
        items = [_check(item, item_type, f"{path}[{i}]", problems) for i, item in enumerate(value)]
        if container in (set, frozenset):
            try:
                return container(items)
            except TypeError:
                problems.append(f"argument '{path}': items of a set must be hashable values")
                return value
        return tuple(items) if container is tuple else items
    if container in (dict, Mapping):
        if not isinstance(value, dict):
            wrong()
            return value
        value_type = args[1] if args else Any
        return {key: _check(item, value_type, f"{path}.{key}", problems) for key, item in value.items()}
    return _check_with_pydantic(value, tp, path, problems)


def _refuses_null(annotation: Any) -> bool:
    """Whether ``null`` is not a valid value of ``annotation`` (``Any``, ``X | None`` and ``Literal[..., None]``
    accept it)."""
    problems: list[str] = []
    _check(None, annotation, "", problems)
    return bool(problems)


# --------------------------------------------------------------------------------------------------------
# Tool
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Parameter:
    """One model-visible parameter of the wrapped function."""

    name: str
    annotation: Any
    default: Any
    description: str | None
    schema: dict[str, Any]

    @property
    def nullable(self) -> bool:
        tp = self.annotation
        if get_origin(tp) is Annotated:
            tp = get_args(tp)[0]
        return _is_union(get_origin(tp)) and _NoneType in get_args(tp)

    @property
    def required(self) -> bool:
        return self.default is _EMPTY and not self.nullable


class _Unresolved:
    """A string annotation that could not be evaluated (e.g. a type imported under TYPE_CHECKING)."""

    def __init__(self, text: str, error: Exception) -> None:
        self.text = text
        self.error = error


def _globals_of(fn: Callable[..., Any]) -> dict[str, Any]:
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    if inspect.ismethod(target):
        target = target.__func__
    if not inspect.isfunction(target):
        target = getattr(type(target), "__call__", target)  # noqa: B004 - we want the method itself
    target = inspect.unwrap(target)
    return dict(getattr(target, "__globals__", {}))


def _docstring_of(fn: Callable[..., Any]) -> str | None:
    """The docstring that describes ``fn``: a partial's function's, a callable object's class or ``__call__``."""
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func  # the partial class's own docstring describes partial, not the tool
    doc = inspect.getdoc(target)
    if doc is None and not (inspect.isfunction(target) or inspect.ismethod(target)):
        doc = inspect.getdoc(getattr(type(target), "__call__", None))  # noqa: B004 - the method, not callable()
    return doc


def _signature(fn: Callable[..., Any], name: str) -> inspect.Signature:
    try:
        return inspect.signature(fn, eval_str=True)
    except Exception:
        # Some hint cannot be evaluated; evaluate one by one so the others still work and the bad one can
        # be reported by name (or ignored when it is the injected session).
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"tool {name!r}: cannot read the signature of {fn!r}: {exc}") from exc
        namespace = _globals_of(fn)
        params = []
        for param in signature.parameters.values():
            annotation = param.annotation
            if isinstance(annotation, str):
                try:
                    annotation = eval(annotation, namespace)  # what eval_str does, one hint at a time
                except Exception as exc:
                    annotation = _Unresolved(annotation, exc)
            params.append(param.replace(annotation=annotation))
        return signature.replace(parameters=params)


_SESSION_TEXT_RE = re.compile(r"\bSession\b")


def _is_session_annotation(annotation: Any) -> bool:
    """True for ``Session``, ``Session | None``, ``"Session"`` and unresolvable hints naming ``Session``.

    Matching by class name keeps this package free of an import of ``baf.core`` (the dependency arrows
    point the other way), and lets a hint imported only under ``TYPE_CHECKING`` still work.
    """
    if isinstance(annotation, _Unresolved):
        return bool(_SESSION_TEXT_RE.search(annotation.text))
    if isinstance(annotation, str):
        return bool(_SESSION_TEXT_RE.search(annotation))
    if isinstance(annotation, typing.ForwardRef):
        return bool(_SESSION_TEXT_RE.search(annotation.__forward_arg__))
    if _is_union(get_origin(annotation)):
        return any(_is_session_annotation(arm) for arm in get_args(annotation))
    return getattr(annotation, "__name__", None) == "Session"


def _to_jsonable(value: Any) -> Any:
    return pydantic_core.to_jsonable_python(value, fallback=str)


class Tool:
    """A function the model can call, with its JSON schema, argument validation and result rendering.

    Args:
        fn: The function. Sync functions run in a worker thread so they cannot block the event loop;
            async functions are awaited.
        name: The name the model calls it by; defaults to the function's ``__name__``. Must match
            ``^[A-Za-z0-9_-]{1,64}$`` (the OpenAI rule).
        description: What the tool does; defaults to the docstring's text before its first section.
        timeout: Seconds the call may take before :class:`~baf.errors.ToolTimeoutError`. A sync function
            keeps running in its thread after the timeout (Python cannot kill a thread): its result is
            discarded, but its side effects still happen.
        idempotent: True when running the tool twice with the same arguments is harmless. The runtime
            may then re-run a call whose result was not recorded before a crash; a non-idempotent call
            is reported instead of repeated.
        requires_approval: ``True`` when a human must approve each call before it runs, or a policy
            ``(session, call) -> bool`` deciding per call (``call`` is the model's
            :class:`~baf.llm.base.ToolCall`). A call that needs approval is recorded and waits; the
            loop goes on once a decision arrives (``docs/human_approval.md``).

    Raises:
        ConfigurationError: ``*args``/``**kwargs``, an invalid name, a bad timeout, or a parameter type
            that has no JSON schema.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        idempotent: bool = False,
        requires_approval: bool | Callable[[Any, Any], bool] = False,
    ) -> None:
        if not callable(fn):
            raise ConfigurationError(f"a tool wraps a callable, got {type(fn).__name__}")
        resolved_name = name if name is not None else getattr(fn, "__name__", None)
        if not isinstance(resolved_name, str) or not _NAME_RE.match(resolved_name):
            raise ConfigurationError(
                f"invalid tool name {resolved_name!r}: it must match ^[A-Za-z0-9_-]{{1,64}}$; pass name=..."
            )
        if timeout is not None and (isinstance(timeout, bool) or not timeout > 0):
            raise ConfigurationError(f"tool {resolved_name!r}: timeout must be a positive number of seconds")
        self.fn = fn
        self.name: str = resolved_name
        if not isinstance(requires_approval, bool) and not callable(requires_approval):
            raise ConfigurationError(
                f"tool {resolved_name!r}: requires_approval must be True, False or a function (session, call) -> bool"
            )
        self.timeout = timeout
        self.idempotent = idempotent
        self.requires_approval = requires_approval
        doc_description, doc_args = parse_docstring(_docstring_of(fn))
        self.description: str = description if description is not None else doc_description
        # An object whose __call__ is async counts too (B004 is about callable(), not this).
        self._is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004
        )
        self._signature = _signature(fn, resolved_name)
        self._session_param: str | None = None
        self._skipped: set[str] = set()
        self._params: dict[str, _Parameter] = {}
        for index, param in enumerate(self._signature.parameters.values()):
            self._add_parameter(index, param, doc_args)
        self._schema = self._build_schema()

    def _add_parameter(self, index: int, param: inspect.Parameter, doc_args: Mapping[str, str]) -> None:
        where = f"tool {self.name!r}, parameter {param.name!r}"
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            star = "*" if param.kind is param.VAR_POSITIONAL else "**"
            raise ConfigurationError(
                f"{where}: {star}{param.name} is not supported; a tool takes named parameters only, "
                "each of which is described in the schema the model sees"
            )
        if index == 0 and param.name == "self":
            self._skipped.add(param.name)
            return
        if param.name == "session" or _is_session_annotation(param.annotation):
            if self._session_param is not None:
                raise ConfigurationError(f"{where}: only one parameter can receive the session")
            self._session_param = param.name
            return
        if isinstance(param.annotation, _Unresolved):
            raise ConfigurationError(
                f"{where}: cannot evaluate the type hint {param.annotation.text!r} "
                f"({type(param.annotation.error).__name__}: {param.annotation.error})"
            )
        annotation = Any if param.annotation is _EMPTY else param.annotation
        try:
            schema = _schema_for(annotation)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{where}: {exc}") from exc
        description = doc_args.get(param.name) or schema.pop("description", None) or None
        schema.pop("description", None)
        if description:
            schema = {"description": description, **schema}
        if param.default is not _EMPTY:
            try:
                schema["default"] = json.loads(json.dumps(pydantic_core.to_jsonable_python(param.default)))
            except (TypeError, ValueError, pydantic_core.PydanticSerializationError):
                pass  # a default with no JSON form is simply not advertised
        self._params[param.name] = _Parameter(param.name, annotation, param.default, description, schema)

    def _build_schema(self) -> dict[str, Any]:
        parameters = {
            "type": "object",
            "properties": {name: param.schema for name, param in self._params.items()},
            "required": [name for name, param in self._params.items() if param.required],
            "additionalProperties": False,
        }
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": parameters},
        }

    @property
    def schema(self) -> dict[str, Any]:
        """The OpenAI tool schema: ``{"type": "function", "function": {name, description, parameters}}``."""
        return copy.deepcopy(self._schema)

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments object (``schema["function"]["parameters"]``)."""
        return copy.deepcopy(self._schema["function"]["parameters"])

    @property
    def takes_session(self) -> bool:
        """True when the function has a parameter the runtime fills with the session."""
        return self._session_param is not None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function directly, as plain Python (no validation, no thread, no timeout)."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r}, parameters={list(self._params)!r})"

    # ---- validation -------------------------------------------------------------------------------------

    def _fail(self, problems: Sequence[str]) -> ToolArgumentError:
        noun = "problem" if len(problems) == 1 else "problems"
        lines = "\n".join(f"- {problem}" for problem in problems)
        return ToolArgumentError(
            f"Invalid arguments for tool '{self.name}' ({len(problems)} {noun}):\n{lines}\n"
            "Fix the arguments and call the tool again."
        )

    def _parse(self, raw: str | bytes | bytearray) -> Any:
        text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes | bytearray) else raw
        if not text.strip():
            return {}  # some servers send "" for a call without arguments; it means {}

        try:
            if text.startswith("\ufeff"):  # refused as json.loads refuses it (the decoder alone would not)
                raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
            return _ARGUMENTS_DECODER.decode(text)
        except json.JSONDecodeError as exc:
            reason = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
        except ValueError as exc:
            reason = str(exc)
        excerpt = _shorten(text, _EXCERPT_CHARS)
        raise ToolArgumentError(
            f"The arguments for tool '{self.name}' are not valid JSON ({reason}). "
            f"Received ({len(text)} characters): {excerpt!r}. "
            "Send one JSON object with the arguments as its keys."
        )

    def validate_args(self, raw: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
        """Parse and check the model's arguments, returning the ones to call the function with.

        ``raw`` is the JSON text the model produced (or an already-parsed mapping). Values are converted
        to the annotated types (Enum members, model instances, tuples, sets, floats). An optional
        parameter without a default that the model left out is returned as ``None``; one with a default
        that it left out or sent as ``null`` is left out so the function's default applies.

        Raises:
            ToolArgumentError: listing every problem at once (not JSON, not an object, missing or unknown
                arguments, wrong types), worded for the model to fix its call.
        """
        args = self._parse(raw) if isinstance(raw, str | bytes | bytearray) else raw
        if not isinstance(args, Mapping):
            raise ToolArgumentError(
                f"The arguments for tool '{self.name}' must be a JSON object, got {_describe_value(args)}."
            )
        problems: list[str] = []
        unknown = [str(key) for key in args if key not in self._params]
        if unknown:
            accepted = ", ".join(self._params) or "no arguments"
            names = ", ".join(f"'{key}'" for key in unknown)
            plural = "s" if len(unknown) > 1 else ""
            problems.append(f"unknown argument{plural} {names} (accepted: {accepted})")
        validated: dict[str, Any] = {}
        for name, param in self._params.items():
            if name in args:
                value = args[name]
                if value is None and param.default is not _EMPTY and _refuses_null(param.annotation):
                    continue  # null where the type has no null: taken as not given, so the default applies
                validated[name] = _check(value, param.annotation, name, problems)
            elif param.required:
                problems.append(f"missing required argument '{name}' ({_describe_type(param.annotation)})")
            elif param.default is _EMPTY:
                validated[name] = None
        if problems:
            raise self._fail(problems)
        return validated

    # ---- calling ----------------------------------------------------------------------------------------

    def _bind(self, args: Mapping[str, Any], session: Any) -> tuple[list[Any], dict[str, Any]]:
        unknown = [key for key in args if key not in self._params]
        if unknown:
            raise self._fail([f"unknown argument '{key}'" for key in unknown])
        positional: list[Any] = []
        held_defaults: list[Any] = []  # defaults of positional-only params, needed only if a later one is set
        keyword: dict[str, Any] = {}
        for param in self._signature.parameters.values():
            if param.name in self._skipped:
                continue
            if param.name == self._session_param:
                present, value = (session is not None or param.default is _EMPTY), session
            elif param.name in args:
                present, value = True, args[param.name]
            elif param.default is _EMPTY and self._params[param.name].nullable:
                present, value = True, None
            else:
                present, value = False, None
            if not present and param.default is _EMPTY:
                raise self._fail([f"missing required argument '{param.name}'"])
            if param.kind is param.POSITIONAL_ONLY:
                if present:
                    positional.extend(held_defaults)
                    held_defaults = []
                    positional.append(value)
                else:
                    held_defaults.append(param.default)
            elif present:
                keyword[param.name] = value
        return positional, keyword

    async def _invoke(self, positional: list[Any], keyword: dict[str, Any], session: Any) -> Any:
        try:
            if self._is_async:
                result = await self.fn(*positional, **keyword)
            else:
                # A baf session runs it on the agent's daemon threads for tools (Session.run_tool_sync),
                # which a stopping agent need not wait for; looked up by name, since reasoning must not
                # import baf.core.
                run_sync = getattr(session, "run_tool_sync", None)
                if run_sync is not None:
                    result = await run_sync(self.fn, *positional, **keyword)
                else:  # called standalone: asyncio's default threads
                    result = await asyncio.to_thread(self.fn, *positional, **keyword)
            if inspect.isawaitable(result):  # a sync wrapper that hands back a coroutine
                result = await result
            return result
        except ToolError:
            raise  # the tool chose a message for the model; keep it
        except Exception as exc:
            raise ToolExecutionError(f"tool '{self.name}' failed: {type(exc).__name__}: {exc}") from exc

    async def call(self, args: Mapping[str, Any], session: Any = None) -> Any:
        """Run the function with already-validated ``args`` (see :meth:`validate_args`).

        ``session`` is passed to the function's session parameter if it has one (a parameter with a
        default keeps it when ``session`` is None). Sync functions run in a worker thread, so a tool
        that touches the session must only use thread-safe parts of it: with a session that has a
        ``run_tool_sync`` method (a baf session), in the agent's threads for tools, so an agent that
        stops does not wait for a tool it gave up on; without one, in ``asyncio.to_thread``.

        Raises:
            ToolTimeoutError: the call ran past ``timeout``.
            ToolExecutionError: the function raised; the original exception is ``__cause__``. A
                :class:`~baf.errors.ToolError` raised by the function itself passes through unchanged.
        """
        positional, keyword = self._bind(args, session)
        if self.timeout is None:
            return await self._invoke(positional, keyword, session)
        try:
            # _invoke converts the function's own TimeoutError, so one arriving here is our deadline.
            async with asyncio.timeout(self.timeout):
                return await self._invoke(positional, keyword, session)
        except TimeoutError:
            raise ToolTimeoutError(
                f"tool '{self.name}' did not finish within {self.timeout:g} seconds and was abandoned"
            ) from None

    @staticmethod
    def render_result(value: Any) -> str:
        """Turn a tool's return value into the text the model reads.

        A string is passed as is; ``None`` becomes ``"null"``; everything else (numbers, booleans, dicts,
        lists, pydantic models, dataclasses, enums, dates) is rendered as JSON, with ``str()`` for
        anything JSON cannot express.
        """
        if isinstance(value, str):
            return value
        if isinstance(value, pydantic.BaseModel):
            return value.model_dump_json()
        return json.dumps(_to_jsonable(value), ensure_ascii=False)

    async def run(self, raw_args: str | bytes | Mapping[str, Any], session: Any = None) -> str:
        """Validate the model's arguments, call the function and render its result for the model.

        Raises:
            ToolArgumentError: the arguments do not fit (see :meth:`validate_args`).
            ToolTimeoutError: the call ran past ``timeout``.
            ToolExecutionError: the function raised; its type and message are in the error's message.
        """
        args = self.validate_args(raw_args)
        return self.render_result(await self.call(args, session=session))


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    idempotent: bool = False,
    requires_approval: bool | Callable[[Any, Any], bool] = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    idempotent: bool = False,
    requires_approval: bool | Callable[[Any, Any], bool] = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Decorator form of :class:`Tool`: ``@tool`` or ``@tool(timeout=5)``.

    The decorated name becomes the :class:`Tool`; calling it still calls the function directly.
    """

    def decorate(function: Callable[..., Any]) -> Tool:
        return Tool(function, name=name, description=description, timeout=timeout, idempotent=idempotent,
                    requires_approval=requires_approval)  # fmt: skip

    return decorate(fn) if fn is not None else decorate
