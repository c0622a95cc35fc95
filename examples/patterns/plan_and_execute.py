"""PlanAndExecute: run with ``python examples/patterns/plan_and_execute.py`` (offline unless OPENAI_API_KEY is set)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _model import model

from baf.reasoning.patterns import PlanAndExecute
from baf.reasoning.tool import Tool  # noqa: F401
from baf.testing import ScriptedLLM  # noqa: F401

SCRIPT = [
    '{"goal": "compare", "steps": [{"id": "s1", "description": "List candidates"}, {"id": "s2", "description": "Compare them", "dependencies": ["s1"]}]}',  # noqa: E501
    '{"success": true, "output": "Flask, FastAPI, Django"}',
    '{"success": true, "output": "FastAPI fits a small typed API best."}',
]


async def main() -> None:
    pattern = PlanAndExecute(allow_replan=True)
    result = await pattern.execute(model(SCRIPT), "Compare Python web frameworks for a small API.")
    for step in result.trace:
        print(f"[{step.kind}] {step.summary}")
    print("answer:", result.text)
    print("success:", result.success, "| steps:", result.steps_taken, "| tokens:", result.usage.total_tokens)


if __name__ == "__main__":
    asyncio.run(main())
