"""The agent bench_workers.py runs: a reasoning state whose model asks for ``BAF_BENCH_TOOL_TURNS`` tool
calls, one per turn, then answers; each model call sleeps ``BAF_BENCH_DELAY`` seconds.

It has no platform by design (the bench posts its messages to the inbox), so the worker's warning that
no client can reach it is filtered out here, for these workers only."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_reasoning import BenchLLM, lookup

from baf import Agent
from baf.library.state.reasoning_state_library import new_reasoning_state

TOOL_TURNS = int(os.environ.get("BAF_BENCH_TOOL_TURNS", "5"))
DELAY = float(os.environ.get("BAF_BENCH_DELAY", "0.05"))

agent = Agent("bench_workers", log="memory://")
agent.new_tool(lookup)
state = new_reasoning_state(agent, BenchLLM(TOOL_TURNS, delay=DELAY), max_steps=100, enable_task_planning=False)
state.when_event().go_to(state)


class _PlatformlessByDesign(logging.Filter):
    """Drops ``baf.serve``'s warning that this agent has no platform (the bench needs none)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(f"agent {agent.name!r} has no platform")


logging.getLogger("baf.serve").addFilter(_PlatformlessByDesign())
