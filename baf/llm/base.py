"""The LLM interface and the shapes it returns."""

from __future__ import annotations

import abc
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

__all__ = ["LLM", "LLMResponse", "TextSink", "ToolCall", "Usage"]

#: Where a streaming model's text goes as it is written: awaited as ``on_text(delta, attempt)`` for each
#: piece, in order. ``attempt`` counts from 1; a retry after a broken stream starts the answer again from
#: its beginning under the next number, so whatever was shown of an earlier attempt is superseded.
TextSink: TypeAlias = Callable[[str, int], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call requested by the model.

    ``arguments`` is the raw string the model produced. It is kept verbatim, even when it is not valid
    JSON, so the log shows exactly what the model said; the tool layer parses and validates it.

    A dict (as a hand-written model, a ``FunctionLLM``, naturally gives) is accepted and kept as its JSON
    text, so the record, a re-run and a crash resume all read the same string. Anything else that is
    not a string is refused with ``TypeError``.
    """

    id: str
    name: str
    arguments: str

    def __post_init__(self) -> None:
        arguments: object = self.arguments
        if isinstance(arguments, str):
            return
        if not isinstance(arguments, Mapping):
            raise TypeError(
                f"ToolCall {self.name!r}: arguments must be the JSON text of an object, or a dict; "
                f"got {type(arguments).__name__}"
            )
        try:
            text = json.dumps(dict(arguments), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            message = f"ToolCall {self.name!r}: arguments given as a dict must be JSON-serialisable ({exc})"
            raise TypeError(message) from exc
        object.__setattr__(self, "arguments", text)  # frozen: the one place the value is normalised

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form used in records."""
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCall:
        """Inverse of :meth:`to_dict`. A dict under ``arguments`` (written by a baf that recorded it as given)
        is read as its JSON text, as a new call would store it, not as a Python repr."""
        arguments = data["arguments"]
        if not isinstance(arguments, Mapping):
            arguments = str(arguments)
        return cls(id=str(data["id"]), name=str(data["name"]), arguments=arguments)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one model call (zeros when the server does not report them)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens)

    def to_dict(self) -> dict[str, int]:
        """The JSON-ready form used in records."""
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Usage:
        """Inverse of :meth:`to_dict`; ``None`` gives zero usage."""
        data = data or {}
        return cls(int(data.get("prompt_tokens", 0)), int(data.get("completion_tokens", 0)))


@dataclass(frozen=True, slots=True)
class LLMResponse:
    """What one model call produced: text, tool calls, or both."""

    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    raw: Any = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form used in records (``raw`` is not kept: it is provider-specific)."""
        return {
            "text": self.text,
            "tool_calls": [call.to_dict() for call in self.tool_calls],
            "usage": self.usage.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LLMResponse:
        """Inverse of :meth:`to_dict`."""
        return cls(
            text=data.get("text"),
            tool_calls=[ToolCall.from_dict(c) for c in data.get("tool_calls", [])],
            usage=Usage.from_dict(data.get("usage")),
        )


class LLM(abc.ABC):
    """A language model that can call tools.

    Messages and tool schemas are OpenAI-shaped: messages are ``{"role": ..., "content": ...}`` dicts
    (plus ``tool_calls`` / ``tool_call_id`` where relevant) and each tool is
    ``{"type": "function", "function": {"name", "description", "parameters"}}``.
    """

    #: The model name, recorded with every response.
    name: str = "llm"
    #: Who serves the model, as OpenTelemetry's ``gen_ai.provider.name`` names it (``"openai"``, ...);
    #: recorded with every response of a reasoning loop.
    provider: str = "unknown"
    #: Whether :meth:`stream_with_tools` gives the text as it is written (``LLMOpenAI(stream=True)``).
    #: The reasoning kernel calls it instead of :meth:`predict_with_tools` when this is true.
    streams: bool = False

    @abc.abstractmethod
    async def predict_with_tools(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        parameters: dict[str, Any] | None = None,
        system_message: str | None = None,
    ) -> LLMResponse:
        """Run one model call. ``system_message``, when given, is sent first.

        The tool calls of one response must have distinct ids: each result is sent back under its call's
        id, and replay matches results to calls by it. An adapter for a server that omits or repeats ids
        fills them in, as ``LLMOpenAI`` does.
        """

    async def stream_with_tools(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        on_text: TextSink,
        parameters: dict[str, Any] | None = None,
        system_message: str | None = None,
    ) -> LLMResponse:
        """Run one model call like :meth:`predict_with_tools`, awaiting ``on_text(delta, attempt)`` with
        each piece of text as the model writes it (see :data:`TextSink`), and return the complete response.

        Tool calls are returned only whole, once the answer is complete. A model that cannot stream (this
        default) answers whole and calls ``on_text`` never: the response carries the text.
        """
        return await self.predict_with_tools(messages, tools, parameters=parameters, system_message=system_message)

    async def predict(
        self,
        message: str,
        parameters: dict[str, Any] | None = None,
        system_message: str | None = None,
    ) -> str:
        """Ask the model one question without tools and return its text."""
        response = await self.predict_with_tools(
            [{"role": "user", "content": message}], [], parameters=parameters, system_message=system_message
        )
        return response.text or ""
