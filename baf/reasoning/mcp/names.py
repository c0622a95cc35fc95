"""How an MCP server's tool names become names a model may call, and which listed tools are usable.

OpenAI (and baf's :class:`~baf.reasoning.tool.Tool`) accept tool names matching
``^[A-Za-z0-9_-]{1,64}$``; MCP allows more (dots, slashes, up to 128 characters). A server's tool
``read.file`` on a server added as ``fs`` is offered to the model as ``fs__read_file``: the prefix
(``fs__`` by default), then the MCP name with every other character replaced by ``_``. A name that is
still too long is cut and given a short hash of the MCP name, so two long names stay apart.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from baf.reasoning.mcp.schema import schema_problem

__all__ = [
    "ListedTool",
    "ListingEntry",
    "Refusal",
    "Selection",
    "checked_listing",
    "default_prefix",
    "model_name",
    "schema_problem",
    "select_tools",
]

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_BAD_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_MAX = 64


def default_prefix(server: str) -> str:
    """The prefix tools of server ``server`` get unless the user picks one: ``server__``."""
    return f"{server}__"


def model_name(prefix: str, mcp_name: str) -> str:
    """The name the model calls MCP tool ``mcp_name`` by (see the module docstring)."""
    name = prefix + _BAD_CHARS.sub("_", mcp_name)
    if len(name) > _MAX:
        digest = hashlib.sha256(mcp_name.encode("utf-8")).hexdigest()[:8]
        name = f"{name[: _MAX - 9]}_{digest}"
    return name


class ListingEntry(NamedTuple):
    """One tool as a server listed it, with what is wrong with its input schema (``None``: nothing)."""

    name: str
    description: str | None
    input_schema: Any
    problem: str | None


def checked_listing(listed: Iterable[tuple[str, str | None, Any]]) -> list[ListingEntry]:
    """``listed`` with each schema checked (:func:`~baf.reasoning.mcp.schema.schema_problem`).

    Pure work on the listing alone, so it may run in a worker thread: checking many large schemas takes
    a while, and the event loop keeps running meanwhile.
    """
    return [ListingEntry(name, description, schema, schema_problem(schema)) for name, description, schema in listed]


@dataclass(frozen=True, slots=True)
class ListedTool:
    """One usable tool of a listing: its MCP name, the name the model sees, its description and schema."""

    mcp_name: str
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Refusal:
    """A listed tool baf does not offer, and why."""

    mcp_name: str
    reason: str


@dataclass(slots=True)
class Selection:
    """The outcome of :func:`select_tools`."""

    tools: list[ListedTool] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)


def select_tools(listed: Iterable[tuple[Any, ...]], prefix: str, wanted: Iterable[str] | None) -> Selection:
    """Turn a server's listing into the tools to offer: :class:`ListingEntry` items (schemas checked
    already), or ``(name, description, input_schema)`` triples (checked here).

    Refused, each with its reason: a tool outside ``wanted`` (when given) is simply skipped; a schema
    that is not a JSON object schema (a model's arguments are always an object); a name listed twice
    (which of the two the server would run is unknown, so neither is offered); two names that map to
    the same model name.
    """
    wanted_set = set(wanted) if wanted is not None else None
    entries = [entry if isinstance(entry, ListingEntry) else checked_listing([entry])[0] for entry in listed
               if wanted_set is None or entry[0] in wanted_set]  # fmt: skip
    selection = Selection()
    counts: dict[str, int] = {}
    for mcp_name, *_ in entries:
        counts[mcp_name] = counts.get(mcp_name, 0) + 1
    by_model_name: dict[str, list[str]] = {}
    for mcp_name, *_ in entries:
        by_model_name.setdefault(model_name(prefix, mcp_name), []).append(mcp_name)
    seen: set[str] = set()
    for mcp_name, description, schema, problem in entries:
        name = model_name(prefix, mcp_name)
        if counts[mcp_name] > 1:
            if mcp_name not in seen:
                selection.refused.append(Refusal(mcp_name, f"the server lists {counts[mcp_name]} tools named "
                                                           f"{mcp_name!r}; neither is offered"))  # fmt: skip
            seen.add(mcp_name)
            continue
        if len(by_model_name[name]) > 1:
            others = ", ".join(repr(n) for n in by_model_name[name] if n != mcp_name)
            selection.refused.append(Refusal(mcp_name, f"its model name {name!r} is also that of {others}"))
            continue
        if problem is not None:
            selection.refused.append(Refusal(mcp_name, problem))
            continue
        if not _NAME_RE.match(name):  # only an empty MCP name with an empty prefix gets here
            selection.refused.append(Refusal(mcp_name, f"no usable tool name can be made of {mcp_name!r}"))
            continue
        selection.tools.append(ListedTool(mcp_name, name, description or "", schema))
    return selection
