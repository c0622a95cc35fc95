"""The LLM layer: the interface every model implements, its response shapes, and an OpenAI-compatible client.

Test models that need no server (``ScriptedLLM``, ``FunctionLLM``) live in :mod:`baf.testing.llms`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from baf.llm.base import LLM, LLMResponse, ToolCall, Usage

if TYPE_CHECKING:
    from baf.llm.openai_llm import LLMOpenAI

__all__ = ["LLM", "LLMOpenAI", "LLMResponse", "ToolCall", "Usage"]


def __getattr__(name: str) -> Any:
    # The openai package takes most of a second to import: load it only when a client is asked for,
    # so `baf replay` and agents without a real model start fast.
    if name == "LLMOpenAI":
        from baf.llm.openai_llm import LLMOpenAI

        return LLMOpenAI
    raise AttributeError(f"module 'baf.llm' has no attribute {name!r}")
