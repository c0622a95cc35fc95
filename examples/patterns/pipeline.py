"""ReasoningPipeline: run with ``python examples/patterns/pipeline.py`` (offline unless OPENAI_API_KEY is set)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _model import model, show

from baf.reasoning.patterns import ChainOfThought, ReasoningPipeline, Reflexion

SCRIPT = [
    '{"content": "Rayleigh scattering favours short wavelengths.", "is_final": true, "final_answer": "Rayleigh scattering"}',  # noqa: E501
    "Air molecules scatter blue light more than red (Rayleigh scattering).",
    '{"satisfactory": true}',
]


async def main() -> None:
    pattern = ReasoningPipeline([ChainOfThought(), Reflexion(max_rounds=1)])
    result = await pattern.execute(model(SCRIPT), "Why is the sky blue?")
    show(result)


if __name__ == "__main__":
    asyncio.run(main())
