"""ChainOfThought: run with ``python examples/patterns/chain_of_thought.py`` (offline unless OPENAI_API_KEY is set)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _model import model, show

from baf.reasoning.patterns import ChainOfThought

SCRIPT = [
    '{"content": "Distance is speed times time.", "is_final": false}',
    '{"content": "60 * 2.5 = 150", "is_final": true, "final_answer": "150 km"}',
]


async def main() -> None:
    pattern = ChainOfThought()
    result = await pattern.execute(model(SCRIPT), "If a train travels 60 km/h for 2.5 hours, how far does it go?")
    show(result)


if __name__ == "__main__":
    asyncio.run(main())
