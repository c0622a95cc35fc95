"""Where a reasoning loop gets model responses and tool results: live, or from a session log.

A loop normally calls its model and runs its tools. Two things need it to take them from somewhere else:

- **crash resume**: a loop that was running when the process died continues from its records; a model
  response that was already recorded is used, not asked for again;
- **deterministic re-run** (``baf.replay.rerun``): the agent's current code runs over a recorded session,
  and every response and tool result comes from the log, so nothing reaches a network or a tool.

Both hand the loop an :class:`EffectSource`. The loop asks it before each model call and each tool call;
``None`` means "do it live". The re-run installs its source for a whole run with :func:`use_effect_source`
(a context variable, so every session step started inside inherits it); a resumed loop gets its own.

Tools that exist only while connected (an MCP server's, see :mod:`baf.reasoning.toolset`) are not
connected during a re-run: they take their definitions from the log instead, through
:func:`offline_tool_schemas` (a source that can answer has a ``tool_schemas()`` method).

:func:`rebuild_requests` turns ``llm_request`` records (which carry only what changed since the previous
request of the same invocation) back into complete requests.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from baf.llm.base import LLMResponse, ToolCall
from baf.log.record import Record, RecordKind
from baf.reasoning.tool import Tool

__all__ = [
    "EffectSource",
    "FullRequest",
    "RecordedToolResult",
    "ReplayGuardError",
    "current_effect_source",
    "offline_tool_schemas",
    "rebuild_requests",
    "use_effect_source",
]


@dataclass(frozen=True, slots=True)
class FullRequest:
    """One model request in full: what the model was (or would be) sent."""

    step: int
    messages: list[dict[str, Any]]
    system: str | None
    tools: list[dict[str, Any]]
    parameters: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    seq: int | None = None  # the ``llm_request`` record it was rebuilt from, if any
    loop: str = "reasoning"  # the loop that made it: "reasoning" or a pattern's name
    turn: int = 0  # its number among the loop run's model turns

    def comparable(self) -> dict[str, Any]:
        """The parts that define the request (not the model name or where it was recorded)."""
        return {"messages": self.messages, "system": self.system, "tools": self.tools,
                "parameters": self.parameters}  # fmt: skip


@dataclass(frozen=True, slots=True)
class RecordedToolResult:
    """A tool result to use instead of running the tool."""

    content: str
    is_error: bool
    original_size: int


class ReplayGuardError(AssertionError):
    """A re-run needed a model response or tool result that the log does not hold.

    An ``AssertionError`` on purpose: the loop lets assertion failures through instead of turning them
    into a recorded outage, and a re-run must never fall back to a real model or a real tool.
    """


class EffectSource(Protocol):
    """Answers a loop's model calls and tool calls from somewhere other than the live model and tools."""

    def llm_response(self, request: FullRequest) -> LLMResponse | None:
        """The response to use for ``request``, or ``None`` to call the model."""

    def tool_result(self, step: int, call: ToolCall, tool: Tool) -> RecordedToolResult | None:
        """The result to use for ``call`` (validated against ``tool``), or ``None`` to run the tool."""


_SOURCE: contextvars.ContextVar[EffectSource | None] = contextvars.ContextVar("baf_effect_source", default=None)


def current_effect_source() -> EffectSource | None:
    """The source installed by :func:`use_effect_source` in this context, if any."""
    return _SOURCE.get()


def offline_tool_schemas() -> list[dict[str, Any]] | None:
    """While a source answering from a log is installed (a re-run): the tool schemas that log offered
    the model, one per name, in the order first offered. ``None`` when tools run live."""
    source = _SOURCE.get()
    if source is None:
        return None
    schemas = getattr(source, "tool_schemas", None)
    return list(schemas()) if callable(schemas) else []


@contextlib.contextmanager
def use_effect_source(source: EffectSource) -> Iterator[EffectSource]:
    """Install ``source`` for everything started in this context (tasks copy the context they start in)."""
    token = _SOURCE.set(source)
    try:
        yield source
    finally:
        _SOURCE.reset(token)


def rebuild_requests(records: Iterable[Record]) -> list[FullRequest]:
    """Every model request of the session's loops, rebuilt from its ``llm_request`` records.

    A record with ``extends`` continues the previous request of the same loop run (same ``loop`` and
    ``run``): its ``messages`` are appended to that request's, and ``system`` / ``tools`` are that
    request's unless the record has them. A record without it is complete (see :mod:`baf.reasoning.turn`).
    """
    rebuilt: list[FullRequest] = []
    last: dict[tuple[str, int], FullRequest] = {}
    for record in records:
        if record.kind != RecordKind.LLM_REQUEST:
            continue
        data = record.data
        key = (str(data["loop"]), int(data["run"]))
        base = last.get(key) if data.get("extends") else None
        messages = (base.messages if base is not None else []) + copy.deepcopy(data.get("messages") or [])
        system = data["system"] if "system" in data else (base.system if base is not None else None)
        tools = copy.deepcopy(data["tools"]) if "tools" in data else (base.tools if base is not None else [])
        request = FullRequest(int(data["step"]), messages, system, tools, dict(data.get("parameters") or {}),
                              data.get("model"), record.seq, key[0], int(data["turn"]))  # fmt: skip
        last[key] = request
        rebuilt.append(request)
    return rebuilt
