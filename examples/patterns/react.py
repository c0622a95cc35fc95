"""ReAct: run with ``python examples/patterns/react.py`` (offline unless OPENAI_API_KEY is set)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _model import model, show

from baf.reasoning.patterns import ReAct
from baf.reasoning.tool import Tool
from baf.testing import ScriptedLLM


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


TOOLS = [Tool(multiply)]

SCRIPT = [
    ScriptedLLM.tool_call("multiply", {"a": 17, "b": 23}),
    ScriptedLLM.tool_call("final_answer", {"answer": "391"}),
]


async def main() -> None:
    pattern = ReAct()
    result = await pattern.execute(model(SCRIPT), "What is 17 * 23?", tools=TOOLS)
    show(result)


if __name__ == "__main__":
    asyncio.run(main())
