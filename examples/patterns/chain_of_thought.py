"""ChainOfThought: run with ``python examples/patterns/chain_of_thought.py`` (offline unless OPENAI_API_KEY is set)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _model import model

from baf.reasoning.patterns import ChainOfThought
from baf.reasoning.tool import Tool  # noqa: F401
from baf.testing import ScriptedLLM  # noqa: F401

SCRIPT = [
    '{"content": "Distance is speed times time.", "is_final": false}',
    '{"content": "60 * 2.5 = 150", "is_final": true, "final_answer": "150 km"}',
]


async def main() -> None:
    pattern = ChainOfThought()
    result = await pattern.execute(model(SCRIPT), "If a train travels 60 km/h for 2.5 hours, how far does it go?")
    for step in result.trace:
        print(f"[{step.kind}] {step.summary}")
    print("answer:", result.text)
    print("success:", result.success, "| steps:", result.steps_taken, "| tokens:", result.usage.total_tokens)


if __name__ == "__main__":
    asyncio.run(main())
