"""An agent that does its arithmetic with the tools of an MCP server (``calculator_server.py``).

``python examples/mcp/calculator_agent.py`` runs offline: a scripted model plays the assistant, so the
example needs no API key. It starts the server as a subprocess, lists its tools (``calc__add``,
``calc__multiply``, ``calc__divide``), asks two questions, prints the tool calls and the answers, stops
the server, and then re-runs the recorded session from the log without starting the server again.
Needs the mcp extra: ``pip install -e ".[mcp]"`` (in a clone of baf).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from baf import Agent
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.replay.rerun import rerun
from baf.testing import ScriptedLLM

SERVER = Path(__file__).with_name("calculator_server.py")

# What a model would answer, one item per model call: a tool call, then an answer from its result.
model = ScriptedLLM([
    ScriptedLLM.tool_call("calc__multiply", {"a": 12.5, "b": 8}),
    "12.5 × 8 = 100.",
    ScriptedLLM.tool_call("calc__divide", {"a": 1, "b": 0}),
    "That cannot be done: the calculator says it is a division by zero.",
])  # fmt: skip


def build(log: str) -> Agent:
    agent = Agent("calculator_agent", log=log)
    state = new_reasoning_state(agent, model, enable_task_planning=False)
    state.when_event().go_to(state)
    # The server's tools are listed when the agent starts and offered as calc__<tool>.
    agent.add_mcp_server("calc", command=[sys.executable, str(SERVER)])
    return agent


async def main() -> None:
    log = f"sqlite:///{Path(tempfile.mkdtemp()) / 'calculator.db'}"
    agent = build(log)
    async with agent:
        print("tools:", ", ".join(agent.tools))
        for question in ("What is 12.5 times 8?", "And 1 divided by 0?"):
            await agent.receive_message("demo", question)
        for record in await agent.log.read("demo"):
            if record.kind == "tool_result":
                status = "error" if record.data["is_error"] else "ok"
                print(f"  {record.data['name']} -> {record.data['content']} ({status})")
            elif record.kind == "reply":
                print("assistant:", record.data["text"])
    report = await rerun(log, "demo", agent)  # every tool result from the log: the server is not started
    print(report)


if __name__ == "__main__":
    asyncio.run(main())
