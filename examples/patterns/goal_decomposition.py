"""GoalDecomposition: run with ``python examples/patterns/goal_decomposition.py`` (offline without OPENAI_API_KEY)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _model import model, show

from baf.reasoning.patterns import GoalDecomposition

SCRIPT = [
    '{"goal": "pipeline", "phases": [{"name": "collect", "tasks": ["Pick sources"]}, {"name": "analyse", "tasks": ["Cluster themes"]}]}',  # noqa: E501
    "Surveys and support tickets.",
    "Embed and cluster comments weekly.",
    "Collect surveys and tickets, cluster them weekly.",
]


async def main() -> None:
    pattern = GoalDecomposition()
    result = await pattern.execute(model(SCRIPT), "Plan a customer feedback pipeline.")
    show(result)


if __name__ == "__main__":
    asyncio.run(main())
