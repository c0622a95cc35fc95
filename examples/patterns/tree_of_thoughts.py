"""TreeOfThoughts: run with ``python examples/patterns/tree_of_thoughts.py`` (offline unless OPENAI_API_KEY is set)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _model import model, show

from baf.reasoning.patterns import TreeOfThoughts

SCRIPT = [
    '{"branches": ["/tasks with nested /comments", "one flat /items endpoint"]}',
    '{"score": 0.9, "reasoning": "clear"}',
    '{"score": 0.3, "reasoning": "vague"}',
]


async def main() -> None:
    pattern = TreeOfThoughts(branching_factor=2, max_depth=1)
    result = await pattern.execute(model(SCRIPT), "Name a task-management API resource layout.")
    show(result)


if __name__ == "__main__":
    asyncio.run(main())
