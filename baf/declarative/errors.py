"""Locating problems in an agent file: from a path of keys (``("states", 1, "to")``) to line and column."""

from __future__ import annotations

from typing import Any, get_args, get_origin

import pydantic
from pydantic import BaseModel

from baf.declarative.models import AgentFile
from baf.declarative.source import Marks
from baf.errors import AgentFileError

__all__ = ["Located", "describe_validation_error", "dotted"]

PathKey = tuple[str | int, ...]


def dotted(path: PathKey) -> str:
    """``states[1].transitions[0].to`` for ``("states", 1, "transitions", 0, "to")``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


class Located:
    """Collects problems by path and raises them together, each with its line and column."""

    def __init__(self, where: str, marks: Marks) -> None:
        self.where = where
        self.marks = marks
        self.problems: list[tuple[str, int, int, str]] = []

    def add(self, path: PathKey, message: str, *, key: bool = False) -> None:
        """Note a problem at ``path`` (at its key rather than its value when ``key``)."""
        line, column = self.marks.find(path, key=key)
        shown = dotted(path)
        self.problems.append((shown, line, column, f"{shown}: {message}" if path else message))

    def describe(self, path: PathKey) -> str:
        """``file:line:column (path)``, for errors raised later (a template failing at run time)."""
        line, column = self.marks.find(path)
        return f"{self.where}:{line}:{column} ({dotted(path)})"

    def raise_if_any(self) -> None:
        """Raise :class:`AgentFileError` if a problem was noted."""
        if self.problems:
            problems, self.problems = sorted(self.problems, key=lambda p: (p[1], p[2])), []
            raise AgentFileError(self.where, problems)


def describe_validation_error(
    exc: pydantic.ValidationError, data: Any, root: type[BaseModel] = AgentFile
) -> list[tuple[PathKey, str, bool]]:
    """Each error as ``(path in the data, message, at the key?)``, one message per path.

    pydantic's locations carry the names of union members (``ToolSpec``, ``literal['text', ...]``); they
    are dropped, so the path is that of the file. Errors of several union members at one path are joined.
    """
    by_path: dict[PathKey, list[str]] = {}
    at_key: dict[PathKey, bool] = {}
    for error in exc.errors(include_url=False):
        path, rest = _data_path(data, error["loc"])
        kind = error["type"]
        if kind == "extra_forbidden":
            allowed = _allowed_keys(path[:-1], root)
            message = f"unknown key {path[-1]!r}" + (f"; expected one of: {', '.join(allowed)}" if allowed else "")
            at_key[path] = True
        elif kind == "missing":
            field = rest[-1] if rest else (path[-1] if path else "?")
            message = f"missing required key {field!r}"
        else:
            message = _plain(error)
        messages = by_path.setdefault(path, [])
        if message not in messages:
            messages.append(message)
    return [(path, " | ".join(messages) if len(messages) < 4 else "; ".join(messages[:3]) + " ...",
             at_key.get(path, False)) for path, messages in by_path.items()]  # fmt: skip


def _data_path(data: Any, loc: tuple[Any, ...]) -> tuple[PathKey, list[Any]]:
    """The longest prefix of ``loc`` that names values in ``data`` (union tags skipped), and what is left."""
    path: list[str | int] = []
    current = data
    rest: list[Any] = []
    for index, part in enumerate(loc):
        if isinstance(current, dict) and isinstance(part, str) and part in current:
            path.append(part)
            current = current[part]
        elif isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current):
            path.append(part)
            current = current[part]
        elif index == len(loc) - 1:
            rest.append(part)
    return tuple(path), rest


def _plain(error: Any) -> str:
    message = str(error["msg"])
    value = error.get("input")
    if error["type"] in ("value_error", "assertion_error"):
        message = message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    elif not isinstance(value, dict | list):
        message += f" (found {value!r:.60})"
    return message


def _allowed_keys(path: PathKey, root: type[BaseModel]) -> list[str]:
    """The keys the model at ``path`` (from ``root``) accepts, when the path leads to one model (not a union)."""
    annotation: Any = root
    for part in path:
        origin, args = get_origin(annotation), [a for a in get_args(annotation) if a is not type(None)]
        if origin in (list, dict):
            annotation = args[-1]  # an item of a list, or a value of a mapping (llms, intents)
            continue
        if len(args) == 1 and origin is not None and not isinstance(annotation, type):
            annotation = args[0]  # X | None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)) or isinstance(part, int):
            return []
        field = annotation.model_fields.get(part) or next(
            (f for f in annotation.model_fields.values() if f.alias == part), None
        )
        if field is None:
            return []
        annotation = field.annotation
    args = [a for a in get_args(annotation) if a is not type(None)]
    if len(args) == 1:
        annotation = args[0]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [f.alias or name for name, f in annotation.model_fields.items()]
    return []
