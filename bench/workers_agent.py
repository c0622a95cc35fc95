"""The agent bench_workers.py runs: a reasoning state whose model asks for ``BAF_BENCH_TOOL_TURNS`` tool
calls, one per turn, then answers; each model call sleeps ``BAF_BENCH_DELAY`` seconds.

It has no platform by design (the bench posts its messages to the inbox), so the worker's warning that
no client can reach it is filtered out here, for these workers only.

With ``BAF_BENCH_TIMELINE`` set to a file, each model call appends a line to it: the calling task (one per
session's step), when the call began and when it returned (wall clock), for ``bench_workers.py --timeline``."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_reasoning import BenchLLM, lookup

from baf import Agent
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm.base import LLMResponse

TOOL_TURNS = int(os.environ.get("BAF_BENCH_TOOL_TURNS", "5"))
DELAY = float(os.environ.get("BAF_BENCH_DELAY", "0.05"))

TIMELINE = os.environ.get("BAF_BENCH_TIMELINE")


class TimedLLM(BenchLLM):
    """``BenchLLM`` writing ``<pid>:<task> <began> <returned>`` per call to the file ``path``."""

    def __init__(self, tool_turns: int, delay: float, path: str) -> None:
        super().__init__(tool_turns, delay=delay)
        self._out = open(path, "a", buffering=1)  # for the worker's life

    async def predict_with_tools(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        parameters: dict[str, Any] | None = None,
        system_message: str | None = None,
    ) -> LLMResponse:
        began = time.time()
        response = await super().predict_with_tools(messages, tools, parameters, system_message)
        self._out.write(f"{os.getpid()}:{id(asyncio.current_task())} {began:.6f} {time.time():.6f}\n")
        return response


model = TimedLLM(TOOL_TURNS, DELAY, TIMELINE) if TIMELINE else BenchLLM(TOOL_TURNS, delay=DELAY)
agent = Agent("bench_workers", log="memory://")
agent.new_tool(lookup)
state = new_reasoning_state(agent, model, max_steps=100, enable_task_planning=False)
state.when_event().go_to(state)


class _PlatformlessByDesign(logging.Filter):
    """Drops ``baf.serve``'s warning that this agent has no platform (the bench needs none)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(f"agent {agent.name!r} has no platform")


logging.getLogger("baf.serve").addFilter(_PlatformlessByDesign())
