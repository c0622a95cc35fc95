"""A model that plays a fixed list of answers: for agents that must run offline (demos, examples).

Unlike ``baf.testing.ScriptedLLM`` (a test double whose exhaustion fails the test), running out of
answers here is an ordinary model failure (:class:`~baf.errors.LLMResponseError`), recorded and
contained like an outage, with a message saying how to use a real model instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from baf.errors import LLMResponseError
from baf.llm.base import LLM, LLMResponse

__all__ = ["OfflineScriptLLM"]


class OfflineScriptLLM(LLM):
    """Answers with ``answers`` in order, one per call, text only (no tool calls)."""

    def __init__(self, answers: Sequence[str], *, name: str = "offline-script", hint: str = "") -> None:
        self.answers = [str(answer) for answer in answers]
        self.name = name
        self.hint = hint
        self.calls = 0

    async def predict_with_tools(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        parameters: dict[str, Any] | None = None,
        system_message: str | None = None,
    ) -> LLMResponse:
        """The next answer; :class:`LLMResponseError` once all were played."""
        if self.calls >= len(self.answers):
            more = f"; {self.hint}" if self.hint else ""
            raise LLMResponseError(f"the offline script of {self.name!r} has no answer #{self.calls + 1}{more}")
        self.calls += 1
        return LLMResponse(text=self.answers[self.calls - 1])
