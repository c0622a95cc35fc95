"""Reading a tool function's signature: the parameters the model fills, and the one the runtime fills.

A parameter named ``session``, or annotated with a class named ``Session``, receives the session and is
not shown to the model; a leading ``self`` is ignored; ``*args`` and ``**kwargs`` are refused (the model
sends named arguments only, and a schema cannot describe "anything else"). A type hint that cannot be
evaluated (a name imported only under ``TYPE_CHECKING``) is reported by parameter name, unless it is the
session's.
"""

from __future__ import annotations

import functools
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin

from baf.errors import ConfigurationError

__all__ = ["EMPTY", "ToolParameter", "ToolSignature", "is_union", "read_signature"]

#: The marker for "no default" and "no annotation" (``inspect.Parameter.empty``).
EMPTY: Any = inspect.Parameter.empty
_NoneType = type(None)
_SESSION_TEXT_RE = re.compile(r"\bSession\b")


def is_union(origin: Any) -> bool:
    """Whether ``get_origin(tp)`` says ``tp`` is a union (``Union[...]``, ``Optional[...]`` or ``X | Y``)."""
    return origin is Union or origin is types.UnionType


@dataclass(frozen=True)
class ToolParameter:
    """One parameter of the wrapped function that the model fills.

    ``annotation`` is ``Any`` when the parameter has none; ``default`` is :data:`EMPTY` when it has none;
    ``description`` comes from the docstring's ``Args:`` section (or is None).
    """

    name: str
    annotation: Any
    default: Any
    description: str | None

    @property
    def nullable(self) -> bool:
        """Whether the annotation is ``X | None`` (``Optional[X]``)."""
        tp = self.annotation
        if get_origin(tp) is Annotated:
            tp = get_args(tp)[0]
        return is_union(get_origin(tp)) and _NoneType in get_args(tp)

    @property
    def required(self) -> bool:
        """Whether the model must send it: no default and no ``None`` in its type."""
        return self.default is EMPTY and not self.nullable


@dataclass(frozen=True)
class ToolSignature:
    """What a tool learns from its function's signature."""

    #: The signature, with the type hints evaluated (an unresolvable one left as its text).
    signature: inspect.Signature
    #: The parameters the model fills, in signature order.
    parameters: dict[str, ToolParameter]
    #: The parameter that receives the session, if any.
    session_param: str | None
    #: Parameters neither the model nor the runtime fills (a leading ``self``).
    skipped: frozenset[str]


class _Unresolved:
    """A string annotation that could not be evaluated (e.g. a type imported under TYPE_CHECKING)."""

    def __init__(self, text: str, error: Exception) -> None:
        self.text = text
        self.error = error


def read_signature(fn: Callable[..., Any], tool_name: str, descriptions: Mapping[str, str]) -> ToolSignature:
    """Read ``fn``'s parameters; ``descriptions`` are the docstring's per-argument texts.

    Raises:
        ConfigurationError: ``*args``/``**kwargs``, two session parameters, a type hint that cannot be
            evaluated, or a signature that cannot be read.
    """
    signature = _signature(fn, tool_name)
    session_param: str | None = None
    skipped: set[str] = set()
    parameters: dict[str, ToolParameter] = {}
    for index, param in enumerate(signature.parameters.values()):
        where = f"tool {tool_name!r}, parameter {param.name!r}"
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            star = "*" if param.kind is param.VAR_POSITIONAL else "**"
            raise ConfigurationError(
                f"{where}: {star}{param.name} is not supported; a tool takes named parameters only, "
                "each of which is described in the schema the model sees"
            )
        if index == 0 and param.name == "self":
            skipped.add(param.name)
            continue
        if param.name == "session" or _is_session_annotation(param.annotation):
            if session_param is not None:
                raise ConfigurationError(f"{where}: only one parameter can receive the session")
            session_param = param.name
            continue
        if isinstance(param.annotation, _Unresolved):
            raise ConfigurationError(
                f"{where}: cannot evaluate the type hint {param.annotation.text!r} "
                f"({type(param.annotation.error).__name__}: {param.annotation.error})"
            )
        annotation = Any if param.annotation is EMPTY else param.annotation
        description = descriptions.get(param.name) or None
        parameters[param.name] = ToolParameter(param.name, annotation, param.default, description)
    return ToolSignature(signature, parameters, session_param, frozenset(skipped))


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
    if is_union(get_origin(annotation)):
        return any(_is_session_annotation(arm) for arm in get_args(annotation))
    return getattr(annotation, "__name__", None) == "Session"
