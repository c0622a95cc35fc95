"""ReasoningPipeline: run with ``python examples/patterns/pipeline.py`` (offline unless OPENAI_API_KEY is set)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _model import model

from baf.reasoning.patterns import ChainOfThought, ReasoningPipeline, Reflexion
from baf.reasoning.tool import Tool  # noqa: F401
from baf.testing import ScriptedLLM  # noqa: F401

SCRIPT = [
    '{"content": "Rayleigh scattering favours short wavelengths.", "is_final": true, "final_answer": "Rayleigh scattering"}',  # noqa: E501
    "Air molecules scatter blue light more than red (Rayleigh scattering).",
    '{"satisfactory": true}',
]


async def main() -> None:
    pattern = ReasoningPipeline([ChainOfThought(), Reflexion(max_rounds=1)])
    result = await pattern.execute(model(SCRIPT), "Why is the sky blue?")
    for step in result.trace:
        print(f"[{step.kind}] {step.summary}")
    print("answer:", result.text)
    print("success:", result.success, "| steps:", result.steps_taken, "| tokens:", result.usage.total_tokens)


if __name__ == "__main__":
    asyncio.run(main())
