"""GoalDecomposition: run with ``python examples/patterns/goal_decomposition.py`` (offline without OPENAI_API_KEY)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _model import model

from baf.reasoning.patterns import GoalDecomposition
from baf.reasoning.tool import Tool  # noqa: F401
from baf.testing import ScriptedLLM  # noqa: F401

SCRIPT = [
    '{"goal": "pipeline", "phases": [{"name": "collect", "tasks": ["Pick sources"]}, {"name": "analyse", "tasks": ["Cluster themes"]}]}',  # noqa: E501
    "Surveys and support tickets.",
    "Embed and cluster comments weekly.",
    "Collect surveys and tickets, cluster them weekly.",
]


async def main() -> None:
    pattern = GoalDecomposition()
    result = await pattern.execute(model(SCRIPT), "Plan a customer feedback pipeline.")
    for step in result.trace:
        print(f"[{step.kind}] {step.summary}")
    print("answer:", result.text)
    print("success:", result.success, "| steps:", result.steps_taken, "| tokens:", result.usage.total_tokens)


if __name__ == "__main__":
    asyncio.run(main())
