"""The steps a pattern run emits, and the observer that receives them.

A pattern never writes to a session itself (``baf.reasoning`` does not know sessions); it reports each
step, model call and tool result to a :class:`PatternObserver`. The session-aware observer in
``baf.library.state.pattern_state`` turns them into log records and platform messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from baf.llm.base import LLMResponse
from baf.reasoning.step import ReasoningStep, ReasoningStepKind

__all__ = ["LLMCallInfo", "PatternObserver", "PatternStep", "PatternStepKind", "before_tool_call"]


class PatternStepKind:
    """Kinds of the steps a pattern emits: the catalogue's own kinds of :class:`ReasoningStepKind`, plus
    ``ANSWER`` (the reasoning state's ``llm_text``, with ``final: True``, so a UI shows a pattern's
    answer exactly like a reasoning loop's) and ``COMPACTION``."""

    THOUGHT = ReasoningStepKind.THOUGHT
    ACTION = ReasoningStepKind.ACTION
    OBSERVATION = ReasoningStepKind.OBSERVATION
    REFLECTION = ReasoningStepKind.REFLECTION
    PLAN = ReasoningStepKind.PLAN
    ANSWER = ReasoningStepKind.LLM_TEXT
    COMPACTION = ReasoningStepKind.COMPACTION


#: A pattern's steps are reasoning steps: the same envelope, streamed and recorded the same way. For a
#: pattern, ``step`` is its step counter and ``details`` always carries ``pattern`` and ``depth``.
PatternStep = ReasoningStep


@dataclass(frozen=True, slots=True)
class LLMCallInfo:
    """What a pattern is about to send to the model, as an observer sees it before the call."""

    pattern: str
    call: int
    purpose: str
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    system: str | None
    parameters: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form used in ``llm_request`` records."""
        data: dict[str, Any] = {
            "pattern": self.pattern, "call": self.call, "purpose": self.purpose, "model": self.model,
            "messages": self.messages, "tools": self.tools,
        }  # fmt: skip
        if self.system is not None:
            data["system"] = self.system
        if self.parameters:
            data["parameters"] = self.parameters
        return data


@runtime_checkable
class PatternObserver(Protocol):
    """Receives everything a pattern run does, in order. All methods must be cheap and not raise.

    Two more methods are optional (looked up with ``getattr``): ``async before_tool_call(call_id, name)``,
    awaited just before a tool runs, and ``redact(text) -> str``, applied to a step summary before it is
    shortened (the session observer commits in the first and redacts the agent's secrets in the second).
    So is an attribute, ``observes_llm_calls``: when it is false, a run calls neither
    :meth:`before_llm_call` nor :meth:`after_llm_call` (it does not build their :class:`LLMCallInfo`).
    """

    def on_step(self, step: PatternStep) -> None:
        """A step happened."""

    async def before_llm_call(self, call: LLMCallInfo) -> None:
        """A model call is about to be made (a session observer records it and commits first)."""

    def after_llm_call(self, call: LLMCallInfo, response: LLMResponse, latency_ms: float) -> None:
        """The model answered."""

    def on_tool_result(self, call_id: str, name: str, content: str, is_error: bool) -> None:
        """A tool call finished (``content`` is what the model will read)."""


async def before_tool_call(observer: PatternObserver | None, call_id: str, name: str) -> None:
    """Tell ``observer`` a tool call is about to run, if it wants to know (``before_tool_call`` is optional:
    a session observer commits there, so the response that asked for the call is durable first)."""
    hook = getattr(observer, "before_tool_call", None)
    if hook is not None:
        await hook(call_id, name)
