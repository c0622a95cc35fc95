"""PlanAndExecute: run with ``python examples/patterns/plan_and_execute.py`` (offline unless OPENAI_API_KEY is set)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _model import model, show

from baf.reasoning.patterns import PlanAndExecute

SCRIPT = [
    '{"goal": "compare", "steps": [{"id": "s1", "description": "List candidates"}, {"id": "s2", "description": "Compare them", "dependencies": ["s1"]}]}',  # noqa: E501
    '{"success": true, "output": "Flask, FastAPI, Django"}',
    '{"success": true, "output": "FastAPI fits a small typed API best."}',
]


async def main() -> None:
    pattern = PlanAndExecute(allow_replan=True)
    result = await pattern.execute(model(SCRIPT), "Compare Python web frameworks for a small API.")
    show(result)


if __name__ == "__main__":
    asyncio.run(main())
