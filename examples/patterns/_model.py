"""The model the pattern examples use: OpenAI (``BAF_MODEL``, default gpt-4o-mini) when OPENAI_API_KEY is
set, else a scripted offline model that plays the given answers."""

from __future__ import annotations

import os
from typing import Any

from baf.llm.base import LLM, LLMResponse
from baf.llm.openai_llm import LLMOpenAI
from baf.testing import ScriptedLLM


def model(offline_script: list[LLMResponse | str]) -> LLM:
    """The real model when a key is set, else ``ScriptedLLM(offline_script)``."""
    if os.environ.get("OPENAI_API_KEY"):
        return LLMOpenAI(
            os.environ.get("BAF_MODEL") or "gpt-4o-mini", base_url=os.environ.get("OPENAI_BASE_URL") or None
        )
    print("(offline: a scripted model plays the assistant; set OPENAI_API_KEY for a real one)")
    return ScriptedLLM(offline_script)


def show(result: Any) -> None:
    """Print a pattern result: its trace, its answer and what it cost."""
    for step in result.trace:
        print(f"[{step.kind}] {step.summary}")
    print("answer:", result.text)
    print("success:", result.success, "| steps:", result.steps_taken, "| tokens:", result.usage.total_tokens)
