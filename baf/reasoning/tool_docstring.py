"""Reading a tool's description and its parameters' descriptions from a Google-style docstring.

::

    def search(query: str, limit: int = 10) -> list[str]:
        \"\"\"Search the catalogue.

        Args:
            query: Free-text search terms.
            limit: How many results to return at most.
        \"\"\"

    parse_docstring(search.__doc__)
    # ("Search the catalogue.", {"query": "Free-text search terms.", "limit": "How many results ..."})
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from typing import Any

__all__ = ["docstring_of", "parse_docstring"]

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


def docstring_of(fn: Callable[..., Any]) -> str | None:
    """The docstring that describes ``fn``: a partial's function's, a callable object's class or ``__call__``."""
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func  # the partial class's own docstring describes partial, not the tool
    doc = inspect.getdoc(target)
    if doc is None and not (inspect.isfunction(target) or inspect.ismethod(target)):
        doc = inspect.getdoc(getattr(type(target), "__call__", None))  # noqa: B004 - the method, not callable()
    return doc
