"""Checking the arguments a model sent for a tool, with every problem named for the model to fix.

Each tool has one :class:`ArgumentsValidator`, built once from its parameters (when first needed): a
pydantic validator (a ``TypedDict`` of the parameters, ``extra="forbid"``) run in strict JSON mode, and the
JSON schema the model is shown, generated from that same validator. So what the model is told and what is
checked cannot drift apart. A tool whose schema comes from elsewhere (an MCP server's JSON Schema) brings
its own check instead, anything with the shape of :class:`ToolArguments`.

A call is checked in two steps:

1. :func:`parse_arguments` reads the JSON text and refuses what JSON would silently change: a repeated
   key (the last would win), a number beyond any float (it would arrive as infinity), ``NaN`` and
   ``Infinity`` (not JSON), a byte-order mark. Empty text means ``{}``.
2. The validator checks the object and converts values to the annotated types (``Enum`` members,
   pydantic models, tuples, sets, dates, ...). Strict JSON mode takes no ``"5"`` for ``5`` and no
   ``true`` for ``1``; two rules of JSON Schema are kept on top of it: a number with a zero fraction
   (``3.0``) is an ``int``, and a ``Literal`` value matches only a value of the same JSON type (pydantic
   would take ``true`` for ``Literal[1]``).

``null`` for a parameter with a default whose type has no null means "not given" (models often send it
for what they leave unset): the default applies. An ``X | None`` parameter without a default that the
model left out arrives as ``None``.

Every problem is reported at once, each naming the argument (``address.street``, ``tags[1]``) and
what was expected, in JSON words (:func:`argument_error`)::

    Invalid arguments for tool 'search' (2 problems):
    - missing required argument 'query' (string)
    - argument 'limit': expected integer, got string "ten"
    Fix the arguments and call the tool again.
"""

from __future__ import annotations

import enum
import json
import json.scanner
import math
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal, NotRequired, Protocol, Required, Union, cast, get_args, get_origin

import pydantic
import pydantic_core
from pydantic import BeforeValidator, ConfigDict, Field
from typing_extensions import TypedDict

from baf.errors import ConfigurationError, ToolArgumentError
from baf.reasoning.tool_schema import model_facing_schema
from baf.reasoning.tool_signature import EMPTY, ToolParameter, is_union
from baf.wording import agreeing, counted

__all__ = [
    "ArgumentsValidator",
    "ToolArguments",
    "argument_error",
    "argument_path",
    "describe_value",
    "not_an_object",
    "parse_arguments",
]

_NoneType = type(None)
_EXCERPT_CHARS = 200
_VALUE_CHARS = 40
_ARRAYS: tuple[Any, ...] = (list, tuple, set, frozenset, Sequence)
_MAPPINGS: tuple[Any, ...] = (dict, Mapping)
_SCHEMA_ERRORS = (
    pydantic.PydanticSchemaGenerationError,
    pydantic.PydanticUserError,
    pydantic_core.SchemaError,
)


# --------------------------------------------------------------------------------------------------------
# The JSON text
# --------------------------------------------------------------------------------------------------------


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


# ``json.loads(text, parse_constant=...)`` builds a decoder on every call, which costs more than the
# parse of a typical arguments object; one shared decoder (they are stateless) does the same.
_ARGUMENTS_DECODER = json.JSONDecoder(
    parse_constant=_no_constants, parse_float=_finite_float, object_pairs_hook=_unique_keys
)
# Its scanner (C, with the same hooks): ``decode`` wraps it in Python (white space around the value, extra
# data after it) that costs twice the scan of a typical arguments object. Raises ``StopIteration`` where
# there is no value, ``ValueError`` where the hooks refuse one.
_scan_value: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(cast(Any, _ARGUMENTS_DECODER))


def _text_of(raw: str | bytes | bytearray) -> str:
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes | bytearray) else raw


def parse_arguments(tool_name: str, raw: str | bytes | bytearray) -> Any:
    """The JSON value of ``raw``; empty text means ``{}`` (some servers send it for a call without
    arguments).

    Raises:
        ToolArgumentError: not JSON, or JSON that would silently change (see the module docstring),
            with the reason and an excerpt of what was received.
    """
    text = _text_of(raw)
    if text[:1] == "{":  # the usual text, one object with nothing around it: the scanner alone reads it
        try:
            value, end = _scan_value(text, 0)
        except (StopIteration, ValueError, RecursionError):
            pass  # not JSON, or refused, or nested too deeply: the decoder below says why
        else:
            if end == len(text):
                return value
    if not text.strip():
        return {}
    try:
        if text.startswith("\ufeff"):  # refused as json.loads refuses it (the decoder alone would not)
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        return _ARGUMENTS_DECODER.decode(text)
    except json.JSONDecodeError as exc:
        reason = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    except ValueError as exc:
        reason = str(exc)
    except RecursionError:  # the model's text, so never baf's crash: the model can send it flatter
        reason = "nested too deeply"
    excerpt = _shorten(text, _EXCERPT_CHARS)
    raise ToolArgumentError(
        f"The arguments for tool '{tool_name}' are not valid JSON ({reason}). "
        f"Received ({len(text)} characters): {excerpt!r}. "
        "Send one JSON object with the arguments as its keys."
    )


def argument_error(tool_name: str, problems: Sequence[str]) -> ToolArgumentError:
    """One error listing every problem, worded for the model to fix its call."""
    lines = "\n".join(f"- {problem}" for problem in problems)
    return ToolArgumentError(
        f"Invalid arguments for tool '{tool_name}' ({counted(len(problems), 'problem')}):\n{lines}\n"
        "Fix the arguments and call the tool again."
    )


def argument_path(loc: Sequence[int | str]) -> str:
    """How a place in the arguments is named in messages: ``address.street``, ``tags[1]``."""
    return _format_path(str(loc[0]), loc[1:]) if loc else ""


def not_an_object(tool_name: str, value: Any) -> ToolArgumentError:
    """The error for arguments that are valid JSON but not an object."""
    got = describe_value(value)
    return ToolArgumentError(f"The arguments for tool '{tool_name}' must be a JSON object, got {got}.")


# --------------------------------------------------------------------------------------------------------
# The validator
# --------------------------------------------------------------------------------------------------------


class ToolArguments(Protocol):
    """What checks a tool's arguments and describes them to the model: a :class:`~baf.reasoning.tool.Tool`
    holds one, its only source of both. :class:`ArgumentsValidator` reads them from a Python signature;
    :class:`~baf.reasoning.mcp.tool.SchemaArguments` takes an MCP server's JSON Schema."""

    @property
    def json_schema(self) -> dict[str, Any]:
        """The JSON schema of the arguments object, as the model is shown it."""
        ...

    def validate(self, raw: str | bytes | bytearray | Mapping[str, Any]) -> dict[str, Any]:
        """The arguments to call the tool with, from the model's JSON text (or a mapping).

        Raises:
            ToolArgumentError: the arguments do not fit, every problem named for the model.
        """
        ...


class ArgumentsValidator:
    """The arguments check of one tool, and the JSON schema of its arguments object.

    Args:
        tool_name: Used in error messages.
        params: The parameters the model fills (see :func:`~baf.reasoning.tool_signature.read_signature`).

    The pydantic validator and the schema generated from it are built together, when either is first
    needed (:attr:`json_schema`, :meth:`validate`).

    Raises:
        ConfigurationError: naming the parameter: a ``dict`` whose keys are not ``str`` (here); a
            parameter type pydantic cannot validate or describe in JSON schema, or a model that refers
            to itself (when the validator is built: the first :attr:`json_schema` or :meth:`validate`).
    """

    def __init__(self, tool_name: str, params: Mapping[str, ToolParameter]) -> None:
        self.tool_name = tool_name
        self._params = dict(params)
        self._null_means_default = frozenset(
            name for name, param in params.items() if param.default is not EMPTY and not _takes_null(param.annotation)
        )
        self._none_when_missing = tuple(
            name for name, param in params.items() if param.default is EMPTY and param.nullable
        )
        # The parameter rules baf adds are checked now; pydantic compiles the validator and its schema
        # when either is first needed (:meth:`_build`): that is ~90 % of a tool's construction (2.8 ms
        # for ten parameters, bench/bench_tools.py), paid for tools no request ever offers otherwise.
        self._annotations = {name: self._ruled(param) for name, param in params.items()}
        self._adapter: pydantic.TypeAdapter[dict[str, Any]] | None = None
        self._json_schema: dict[str, Any] | None = None

    @property
    def json_schema(self) -> dict[str, Any]:
        """The JSON schema of the arguments object, as the model is shown it (built on first use).

        Raises:
            ConfigurationError: see the class (a type pydantic cannot validate or describe).
        """
        if self._json_schema is None:
            self._build()
            assert self._json_schema is not None
        return self._json_schema

    def _build(self) -> pydantic.TypeAdapter[dict[str, Any]]:
        """The one validator, and the schema generated from it."""
        if self._adapter is not None:
            return self._adapter
        # Built at run time from the signature, so typed as Any: a type checker cannot follow it.
        fields = {name: self._field(param, self._annotations[name]) for name, param in self._params.items()}
        arguments: Any = cast(Any, TypedDict)(f"{self.tool_name}_arguments", fields)
        arguments.__pydantic_config__ = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
        try:
            adapter: pydantic.TypeAdapter[dict[str, Any]] = pydantic.TypeAdapter(arguments)
            generated = adapter.json_schema()
        except (*_SCHEMA_ERRORS, pydantic.errors.PydanticInvalidForJsonSchema) as exc:
            raise self._unusable_type(exc) from exc
        try:
            schema = model_facing_schema(generated)
        except ConfigurationError as exc:
            raise self._unusable_type(exc) from exc
        self._json_schema = {
            "type": "object",
            "properties": schema.get("properties", {}),
            "required": schema.get("required", []),
            "additionalProperties": False,
        }
        self._adapter = adapter
        return adapter

    def validate(self, raw: str | bytes | bytearray | Mapping[str, Any]) -> dict[str, Any]:
        """Check the model's arguments (JSON text, or a mapping); the arguments to call the function with.

        Raises:
            ToolArgumentError: not JSON, not an object, or listing every problem at once.
        """
        if isinstance(raw, str | bytes | bytearray):
            args = parse_arguments(self.tool_name, raw)
            text = _text_of(raw) if args else "{}"
        else:
            args, text = raw, None
        if type(args) is not dict and not isinstance(args, Mapping):
            raise not_an_object(self.tool_name, args)
        nulls = self._null_means_default
        if nulls and any(args.get(name, 0) is None for name in nulls):
            # null where the type has no null: taken as not given, so the default applies
            args = {key: value for key, value in args.items() if not (value is None and key in nulls)}
            text = None
        adapter = self._adapter if self._adapter is not None else self._build()
        try:
            if text is not None:
                validated = adapter.validate_json(text, strict=True)
            else:
                validated = self._validate_mapping(adapter, args)
        except pydantic.ValidationError as exc:
            raise argument_error(self.tool_name, self._problems(exc, args)) from None
        for name in self._none_when_missing:
            validated.setdefault(name, None)
        return validated

    @staticmethod
    def _validate_mapping(adapter: pydantic.TypeAdapter[dict[str, Any]], args: Mapping[str, Any]) -> dict[str, Any]:
        """Arguments handed in by code rather than a model: JSON-mode rules on their JSON form, so
        ``"blue"`` and ``Color.BLUE`` both arrive as the member; anything with no JSON form as it is."""
        try:
            text = pydantic_core.to_json(args)
        except pydantic_core.PydanticSerializationError:
            return adapter.validate_python(args, strict=True)
        return adapter.validate_json(text, strict=True)

    def _ruled(self, param: ToolParameter) -> Any:
        """The parameter's annotation with baf's JSON rules on top (refusing what they cannot take)."""
        try:
            return _json_rules(param.annotation)
        except ConfigurationError as exc:
            raise ConfigurationError(f"tool {self.tool_name!r}, parameter {param.name!r}: {exc}") from exc

    @staticmethod
    def _field(param: ToolParameter, annotation: Any) -> Any:
        description = param.description or _annotated_text(param.annotation) or None
        extra: dict[str, Any] | None = None
        if param.default is not EMPTY:
            try:
                extra = {"default": json.loads(pydantic_core.to_json(param.default))}
            except (TypeError, ValueError, pydantic_core.PydanticSerializationError):
                pass  # a default with no JSON form is simply not advertised
        field = cast(Any, Annotated)[annotation, Field(description=description, json_schema_extra=extra)]
        return cast(Any, Required)[field] if param.required else cast(Any, NotRequired)[field]

    def _unusable_type(self, error: Exception) -> ConfigurationError:
        """Name the parameter whose type broke the validator or its schema."""
        for name, param in self._params.items():
            try:
                model_facing_schema(pydantic.TypeAdapter(_json_rules(param.annotation)).json_schema())
            except Exception as exc:
                return ConfigurationError(
                    f"tool {self.tool_name!r}, parameter {name!r}: cannot build a JSON schema for the type "
                    f"{param.annotation!r}: {exc}"
                )
        return ConfigurationError(f"tool {self.tool_name!r}: cannot build its arguments schema: {error}")

    # ---- problems, in words for the model -----------------------------------------------------------

    def _problems(self, exc: pydantic.ValidationError, args: Mapping[str, Any]) -> list[str]:
        unknown: list[str] = []
        problems: list[str] = []
        for error in exc.errors(include_url=False):
            loc, kind = error["loc"], error["type"]
            if not loc or loc[0] not in self._params:
                if loc and kind == "extra_forbidden":
                    unknown.append(str(loc[0]))
                else:
                    problems.append(_lower_first(error["msg"]))
                continue
            name = str(loc[0])
            annotation = self._params[name].annotation
            if len(loc) == 1 and kind == "missing":
                problems.append(f"missing required argument '{name}' ({_describe_type(annotation)})")
            else:
                problems.append(_problem(name, annotation, loc[1:], error, args))
        if unknown:
            accepted = ", ".join(self._params) or "no arguments"
            names = ", ".join(f"'{key}'" for key in unknown)
            noun = agreeing(len(unknown), "argument", "arguments")
            problems.insert(0, f"unknown {noun} {names} (accepted: {accepted})")
        return list(dict.fromkeys(problems))  # the arms of a union report one problem each time


# Error kinds that mean "not the expected type", answered with what the type is; other kinds (a
# constraint such as ``ge=0``, a date in the wrong format) keep pydantic's own sentence.
_TYPE_ERRORS = frozenset({
    "literal_error", "enum", "int_from_float", "int_parsing", "float_parsing", "bool_parsing", "none_required",
    "union_tag_invalid", "is_instance_of", "model_type", "model_attributes_type", "dataclass_type",
})  # fmt: skip


def _problem(name: str, annotation: Any, rest: tuple[int | str, ...], error: Any, args: Mapping[str, Any]) -> str:
    """One problem below argument ``name``: pydantic's location followed through the annotation as far
    as it goes, so the message can say what was expected there."""
    tp, followed, union = _locate(annotation, rest)
    path = _format_path(name, rest[:followed])
    found, value = _value_at(args, (name, *rest[:followed]))
    kind = error["type"]
    if not found:
        value = error["input"]
    if kind == "finite_number" and isinstance(value, int) and not isinstance(value, bool):
        return f"argument '{path}': expected number, got {describe_value(value)}, too large for a number"
    if union or (followed == len(rest) and _describable(tp) and _is_type_error(kind, tp)):
        return f"argument '{path}': expected {_describe_type(tp)}, got {describe_value(value)}"
    where = _format_path(path, rest[followed:])
    if kind == "missing":
        return f"argument '{where}': missing required field"
    if kind == "extra_forbidden":
        return f"argument '{where}': unknown field"
    return f"argument '{where}': {_lower_first(error['msg'])}, got {describe_value(error['input'])}"


def _is_type_error(kind: str, tp: Any) -> bool:
    if kind.endswith("_type") or kind in _TYPE_ERRORS:
        return True
    return kind in ("too_long", "too_short") and _fixed_tuple(_strip(tp))  # a fixed tuple's length is its type


def _locate(tp: Any, rest: tuple[int | str, ...]) -> tuple[Any, int, bool]:
    """Follow ``rest`` through ``tp``: the type reached, how many parts it followed, and whether it
    stopped at a union of several types (pydantic then reports each arm; the problem is the union's)."""
    for index, part in enumerate(rest):
        inner = _strip(tp)
        if is_union(get_origin(inner)):
            return tp, index, True
        child = _child(inner, part)
        if child is _NOT_FOLLOWED:
            return tp, index, False
        tp = child
    return tp, len(rest), False


_NOT_FOLLOWED = object()


def _child(tp: Any, part: int | str) -> Any:
    origin, args = get_origin(tp), get_args(tp)
    container = origin or tp
    if container in _ARRAYS and isinstance(part, int):
        if _fixed_tuple(tp):
            return args[part] if part < len(args) else _NOT_FOLLOWED
        return args[0] if args else Any
    if container in _MAPPINGS and isinstance(part, str) and part != "[key]":
        return args[1] if args else Any
    if _is_model(tp) and isinstance(part, str) and part in tp.model_fields:
        return tp.model_fields[part].annotation
    return _NOT_FOLLOWED


def _value_at(args: Any, loc: Sequence[int | str]) -> tuple[bool, Any]:
    value = args
    for part in loc:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list | tuple) and isinstance(part, int) and 0 <= part < len(value):
            value = value[part]
        else:
            return False, None
    return True, value


def _format_path(path: str, loc: Sequence[int | str]) -> str:
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


# --------------------------------------------------------------------------------------------------------
# Annotations
# --------------------------------------------------------------------------------------------------------


def _whole_number(value: Any) -> Any:
    """``3.0`` is an integer in JSON Schema; strict pydantic refuses it, so it is converted first."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


_JSON_INT = Annotated[int, BeforeValidator(_whole_number)]


def _same_json_value(choices: tuple[Any, ...]) -> Callable[[Any], Any]:
    """A check that lets through only a literal of the same JSON type (no ``true`` for ``1``)."""

    def check(value: Any) -> Any:
        if isinstance(value, bool | int | float) and not any(
            type(choice) is type(value) and choice == value for choice in choices
        ):
            raise pydantic_core.PydanticCustomError("literal_error", "Input should be one of the listed values")
        return value  # pydantic checks the rest

    return check


def _json_rules(tp: Any) -> Any:
    """``tp`` with the two JSON Schema rules strict pydantic lacks (see the module docstring) applied at
    every level baf reads (unions, containers, ``Annotated``); pydantic models keep their own rules.

    Raises:
        ConfigurationError: a ``dict`` whose keys are not ``str`` (JSON object keys are strings).
    """
    if tp is int:
        return _JSON_INT
    origin, args = get_origin(tp), get_args(tp)
    if origin is None or not args:
        return tp
    if origin is Literal:
        return Annotated[tp, BeforeValidator(_same_json_value(args))]
    if origin is Annotated:
        if args[0] is int:  # listed last, the conversion runs first, before any constraint (ge=0) is checked
            return Annotated[(int, *args[1:], BeforeValidator(_whole_number))]
        return Annotated[(_json_rules(args[0]), *args[1:])]
    if is_union(origin):
        return Union[tuple(_json_rules(arm) for arm in args)]  # noqa: UP007 - built from a tuple
    if origin in _MAPPINGS:
        key_type, value_type = args
        if key_type not in (str, Any):
            raise ConfigurationError(f"dict keys must be str (JSON object keys are strings), not in {tp}")
        return origin[key_type, _json_rules(value_type)]
    if origin in _ARRAYS:
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return tuple[_json_rules(args[0]), ...]  # type: ignore[misc]
        return origin[tuple(_json_rules(arg) for arg in args)]
    return tp


def _takes_null(tp: Any) -> bool:
    """Whether ``null`` is a value of ``tp``: ``Any``, ``X | None``, ``Literal[..., None]``, ``None``."""
    if tp is Any or tp is EMPTY or tp is object or tp is None or tp is _NoneType:
        return True
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        return _takes_null(args[0])
    if is_union(origin):
        return any(_takes_null(arm) for arm in args)
    return origin is Literal and None in args


def _annotated_text(tp: Any) -> str | None:
    """The description written as ``Annotated[X, "text"]``."""
    if get_origin(tp) is not Annotated:
        return None
    texts = [item for item in get_args(tp)[1:] if isinstance(item, str)]
    return " ".join(texts) or None


def _strip(tp: Any) -> Any:
    """``tp`` without ``Annotated`` and without a ``| None`` around a single type."""
    while True:
        origin, args = get_origin(tp), get_args(tp)
        if origin is Annotated:
            tp = args[0]
            continue
        arms = [arm for arm in args if arm is not _NoneType] if is_union(origin) else []
        if len(arms) == 1:
            tp = arms[0]
            continue
        return tp


def _fixed_tuple(tp: Any) -> bool:
    args = get_args(tp)
    return get_origin(tp) is tuple and bool(args) and not (len(args) == 2 and args[1] is Ellipsis)


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, pydantic.BaseModel)


def _is_enum(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, enum.Enum)


_SIMPLE = {str: "string", bool: "boolean", int: "integer", float: "number"}


def _describable(tp: Any) -> bool:
    """Whether :func:`_describe_type` names ``tp`` in JSON words (rather than by its Python name)."""
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        return _describable(args[0])
    if is_union(origin):
        return all(_describable(arm) for arm in args)
    container = origin or tp
    return (
        tp in (Any, EMPTY, object, None, _NoneType) or tp in _SIMPLE or origin is Literal or _is_enum(tp)
        or _is_model(tp) or container in _ARRAYS or container in _MAPPINGS
    )  # fmt: skip


def _describe_type(tp: Any) -> str:
    """How an expected type is named in error messages, in JSON vocabulary the model understands."""
    if tp is Any or tp is EMPTY or tp is object:
        return "any JSON value"
    if tp is None or tp is _NoneType:
        return "null"
    if tp in _SIMPLE:
        return _SIMPLE[tp]
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        return _describe_type(args[0])
    if is_union(origin):
        return " or ".join(_describe_type(arg) for arg in args)
    if origin is Literal:
        return "one of " + ", ".join(json.dumps(arg) for arg in args)
    if _is_enum(tp):
        return "one of " + ", ".join(json.dumps(member.value) for member in tp)
    if _is_model(tp):
        return f"object ({tp.__name__})"
    container = origin or tp
    if container in _ARRAYS:
        if _fixed_tuple(tp):
            return f"array of exactly {len(args)} items"
        return f"array of {_describe_type(args[0])}" if args else "array"
    if container in _MAPPINGS:
        return f"object with {_describe_type(args[1])} values" if args else "object"
    if isinstance(tp, typing.ForwardRef):
        return tp.__forward_arg__
    return getattr(tp, "__name__", str(tp))


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_value(value: Any) -> str:
    """How a received JSON value is named in error messages: its JSON type and a short excerpt."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {json.dumps(value)}"
    if isinstance(value, int):
        return f"integer {_shorten(str(value), _VALUE_CHARS)}"
    if isinstance(value, float):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {_shorten(json.dumps(value, ensure_ascii=False), _VALUE_CHARS)}"
    if isinstance(value, list):
        return f"array of {counted(len(value), 'item')}"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
