"""Reflexion: run with ``python examples/patterns/reflexion.py`` (offline unless OPENAI_API_KEY is set)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _model import model, show

from baf.reasoning.patterns import Reflexion

SCRIPT = [
    "Searches.",
    '{"satisfactory": false, "issues": ["too vague"], "suggestions": ["say what it returns"]}',
    "Return the index of target in a sorted list, or -1 if absent.",
    '{"satisfactory": true}',
]


async def main() -> None:
    pattern = Reflexion(max_rounds=2)
    result = await pattern.execute(model(SCRIPT), "Write a one-line docstring for a binary search function.")
    show(result)


if __name__ == "__main__":
    asyncio.run(main())
