"""Ids for the tool calls of models that play answers (test models, the offline demo model).

A real model gives each tool call an id; a scripted answer is written without one. The model that plays
it numbers them ``<prefix>1``, ``<prefix>2``, ... in the order it produces them: unique within that model,
and the same on every run, so a recorded session re-runs with the same ids.
"""

from __future__ import annotations

import dataclasses

from baf.llm.base import LLMResponse, ToolCall

__all__ = ["ToolCallNumbering"]


class ToolCallNumbering:
    """Numbers the id-less tool calls of the responses one model plays (see the module docstring)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._next = 1

    def number(self, response: LLMResponse) -> LLMResponse:
        """``response`` with every tool call that has no id given the next one; the same object when
        every call has one."""
        if all(not isinstance(call, ToolCall) or call.id for call in response.tool_calls):
            return response
        numbered = []
        for call in response.tool_calls:
            if isinstance(call, ToolCall) and not call.id:
                call = dataclasses.replace(call, id=f"{self.prefix}{self._next}")
                self._next += 1
            numbered.append(call)
        return dataclasses.replace(response, tool_calls=numbered)
