"""The LLM layer: the interface every model implements, its response shapes, and an OpenAI-compatible client.

Test models that need no server (``ScriptedLLM``, ``FunctionLLM``) live in :mod:`baf.testing.llms`.
"""

from __future__ import annotations

from baf.llm.base import LLM, LLMResponse, ToolCall, Usage
from baf.llm.openai_llm import LLMOpenAI

__all__ = ["LLM", "LLMOpenAI", "LLMResponse", "ToolCall", "Usage"]
