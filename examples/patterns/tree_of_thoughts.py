"""TreeOfThoughts: run with ``python examples/patterns/tree_of_thoughts.py`` (offline unless OPENAI_API_KEY is set)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _model import model

from baf.reasoning.patterns import TreeOfThoughts
from baf.reasoning.tool import Tool  # noqa: F401
from baf.testing import ScriptedLLM  # noqa: F401

SCRIPT = [
    '{"branches": ["/tasks with nested /comments", "one flat /items endpoint"]}',
    '{"score": 0.9, "reasoning": "clear"}',
    '{"score": 0.3, "reasoning": "vague"}',
]


async def main() -> None:
    pattern = TreeOfThoughts(branching_factor=2, max_depth=1)
    result = await pattern.execute(model(SCRIPT), "Name a task-management API resource layout.")
    for step in result.trace:
        print(f"[{step.kind}] {step.summary}")
    print("answer:", result.text)
    print("success:", result.success, "| steps:", result.steps_taken, "| tokens:", result.usage.total_tokens)


if __name__ == "__main__":
    asyncio.run(main())
