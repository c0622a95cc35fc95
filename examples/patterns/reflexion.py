"""Reflexion: run with ``python examples/patterns/reflexion.py`` (offline unless OPENAI_API_KEY is set)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _model import model

from baf.reasoning.patterns import Reflexion
from baf.reasoning.tool import Tool  # noqa: F401
from baf.testing import ScriptedLLM  # noqa: F401

SCRIPT = [
    "Searches.",
    '{"satisfactory": false, "issues": ["too vague"], "suggestions": ["say what it returns"]}',
    "Return the index of target in a sorted list, or -1 if absent.",
    '{"satisfactory": true}',
]


async def main() -> None:
    pattern = Reflexion(max_rounds=2)
    result = await pattern.execute(model(SCRIPT), "Write a one-line docstring for a binary search function.")
    for step in result.trace:
        print(f"[{step.kind}] {step.summary}")
    print("answer:", result.text)
    print("success:", result.success, "| steps:", result.steps_taken, "| tokens:", result.usage.total_tokens)


if __name__ == "__main__":
    asyncio.run(main())
