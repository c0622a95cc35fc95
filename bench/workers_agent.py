"""The agent bench_workers.py runs: a reasoning state whose model asks for ``BAF_BENCH_TOOL_TURNS`` tool
calls, one per turn, then answers; each model call sleeps ``BAF_BENCH_DELAY`` seconds."""

from __future__ import annotations

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
