"""Checking the arguments a model sent for a tool, with every problem named for the model to fix.

:func:`parse_arguments` reads the JSON text (refusing what JSON would silently change: a repeated key,
a number beyond any float, ``NaN``); :func:`validate_arguments` checks the object against the tool's
parameters and converts values to the annotated types; :func:`argument_error` words the problems as
one :class:`~baf.errors.ToolArgumentError`.

Rules: a boolean is never accepted as a number; an integer is accepted for a ``float`` (and converted);
a number with a zero fraction (``3.0``) is accepted for an ``int``, as JSON Schema defines ``integer``.
Arrays convert to the annotated container, ``Enum`` values to members, objects to pydantic models.
Other types pydantic understands are validated by pydantic in strict JSON mode.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, get_args, get_origin

import pydantic

from baf.errors import ToolArgumentError
from baf.reasoning.tool_schema import ARRAY_ORIGINS, adapter_for, is_enum, is_model, str_metadata_only
from baf.reasoning.tool_signature import EMPTY, ToolParameter, is_union

__all__ = ["argument_error", "describe_value", "parse_arguments", "validate_arguments"]

_NoneType = type(None)
_EMPTY = EMPTY
_is_union = is_union
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


def parse_arguments(tool_name: str, raw: str | bytes | bytearray) -> Any:
    """The JSON value of ``raw``; empty text means ``{}`` (some servers send it for a call without
    arguments).

    Raises:
        ToolArgumentError: not JSON (with the reason and an excerpt of what was received).
    """
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes | bytearray) else raw
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
    excerpt = _shorten(text, _EXCERPT_CHARS)
    raise ToolArgumentError(
        f"The arguments for tool '{tool_name}' are not valid JSON ({reason}). "
        f"Received ({len(text)} characters): {excerpt!r}. "
        "Send one JSON object with the arguments as its keys."
    )


def argument_error(tool_name: str, problems: Sequence[str]) -> ToolArgumentError:
    """One error listing every problem, worded for the model to fix its call."""
    noun = "problem" if len(problems) == 1 else "problems"
    lines = "\n".join(f"- {problem}" for problem in problems)
    return ToolArgumentError(
        f"Invalid arguments for tool '{tool_name}' ({len(problems)} {noun}):\n{lines}\n"
        "Fix the arguments and call the tool again."
    )


def validate_arguments(tool_name: str, params: Mapping[str, ToolParameter], args: Any) -> dict[str, Any]:
    """Check a parsed arguments value against ``params``; the arguments to call the function with.

    An optional parameter without a default that the model left out is returned as ``None``; one with a
    default that it left out or sent as ``null`` (where its type has no null) is left out so the
    function's default applies.

    Raises:
        ToolArgumentError: not an object, or listing every problem at once (missing or unknown
            arguments, wrong types).
    """
    if not isinstance(args, Mapping):
        raise ToolArgumentError(
            f"The arguments for tool '{tool_name}' must be a JSON object, got {describe_value(args)}."
        )
    problems: list[str] = []
    unknown = [str(key) for key in args if key not in params]
    if unknown:
        accepted = ", ".join(params) or "no arguments"
        names = ", ".join(f"'{key}'" for key in unknown)
        plural = "s" if len(unknown) > 1 else ""
        problems.append(f"unknown argument{plural} {names} (accepted: {accepted})")
    validated: dict[str, Any] = {}
    for name, param in params.items():
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
        raise argument_error(tool_name, problems)
    return validated


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_value(value: Any) -> str:
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
    if is_enum(tp):
        return "one of " + ", ".join(json.dumps(member.value) for member in tp)
    if is_model(tp):
        return f"object ({tp.__name__})"
    container = origin or tp
    if container in ARRAY_ORIGINS:
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
    adapter = adapter_for(tp)
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
                    f"got {describe_value(error['input'])}"
                )
        return None


def _check(value: Any, tp: Any, path: str, problems: list[str]) -> Any:
    """Validate ``value`` against ``tp``; return the converted value, appending problems found."""
    if tp is Any or tp is _EMPTY or tp is object:
        return value

    def wrong() -> None:
        problems.append(f"argument '{path}': expected {_describe_type(tp)}, got {describe_value(value)}")

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
        if str_metadata_only(args[1:]):
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
    if is_enum(tp):
        if isinstance(value, tp):
            return value
        for member in tp:
            if _same_json_value(member.value, value):
                return member
        wrong()
        return value
    if is_model(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            wrong()
            return value
        return _check_with_pydantic(value, tp, path, problems)
    container = origin or tp
    if container in ARRAY_ORIGINS:
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
