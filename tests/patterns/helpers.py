"""Helpers for the pattern tests."""

from __future__ import annotations

import json
from typing import Any

from baf.llm.base import LLMResponse, Usage


def js(**fields: Any) -> str:
    """A JSON answer, as a model following the schema instructions would give it."""
    return json.dumps(fields)


def used(text: str, prompt: int = 10, completion: int = 5) -> LLMResponse:
    """A text answer that reports token usage."""
    return LLMResponse(text=text, usage=Usage(prompt, completion))
