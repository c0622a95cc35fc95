"""Bridges benchmark (issue 14): what an MCP tool call costs, and what the OpenTelemetry hooks cost.

Part 1, MCP over stdio. A trivial local MCP server (``examples/mcp/calculator_server.py``, tool ``add``)
against a plain async Python tool doing the same sum, in the same run, alternating in blocks:

- *direct*: ``await tool.call({"a": 1, "b": 2})``, µs per call (median of blocks); the MCP figure is a
  JSON-RPC round trip to the server process and back;
- *in a turn*: a reasoning state answering one message with N tool-call turns (a zero-latency model asks
  for the tool N times, then answers), µs per turn, memory log; overhead = MCP - plain.

Part 2, OpenTelemetry. The same reasoning agent (N tool-call turns per message, zero-latency model)
with and without ``OpenTelemetryHooks`` (spans to the SDK's in-memory exporter through a
``SimpleSpanProcessor``, and through a ``BatchSpanProcessor``; content capture off), alternating message
by message in one run. Per turn: the wall time the agent takes (the hooks' span thread works beside it),
and the CPU time of the whole process (every thread) until that message's spans are made, which is what
the hooks really cost; both with their on/off ratio (issue 14 target: <= 1.2x with content capture off).

    python bench/bench_bridges.py            # about 10 s
    python bench/bench_bridges.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import console

from baf import Agent
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm.base import LLMResponse
from baf.reasoning.tool import Tool
from baf.testing import FunctionLLM
from baf.testing.llms import tool_call_response

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "examples" / "mcp" / "calculator_server.py"


async def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


def looping_model(tool_name: str, turns: int) -> FunctionLLM:
    """A zero-latency model: ``turns`` calls of ``tool_name``, then an answer."""

    def answer(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> LLMResponse | str:
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        done = sum(1 for m in messages[last_user:] if m["role"] == "tool")
        if done >= turns:
            return "done"
        from baf.llm.base import ToolCall

        return tool_call_response([ToolCall(id="", name=tool_name, arguments='{"a": 1, "b": 2}')])

    return FunctionLLM(answer)


def reasoning_agent(name: str, model: FunctionLLM) -> Agent:
    agent = Agent(name, log="memory://")
    state = new_reasoning_state(agent, model, enable_task_planning=False, stream_steps=False, memory=0)
    state.when_event().go_to(state)
    return agent


async def per_turn(agent: Agent, session: str, turns: int) -> float:
    """µs per model turn for one message of ``turns`` tool-call turns plus the answer."""
    started = time.perf_counter()
    await agent.receive_message(session, "go")
    return (time.perf_counter() - started) / (turns + 1) * 1e6


# -- part 1: MCP ------------------------------------------------------------------------------


async def bench_mcp(calls: int, block: int, turns: int, messages: int) -> Table:
    from baf.reasoning.mcp import MCPToolset

    toolset = MCPToolset("calc", [sys.executable, str(SERVER)])
    plain = Tool(add)
    await toolset.start()
    try:
        remote = toolset.tools["calc__add"]
        direct: dict[str, list[float]] = {"plain": [], "mcp": []}
        for tool in (plain, remote):  # warm up
            for _ in range(20):
                await tool.call({"a": 1, "b": 2})
        for _ in range(max(1, calls // block)):
            for label, tool in (("plain", plain), ("mcp", remote)):
                started = time.perf_counter()
                for _ in range(block):
                    await tool.call({"a": 1, "b": 2})
                direct[label].append((time.perf_counter() - started) / block * 1e6)
    finally:
        await toolset.stop()

    plain_agent = reasoning_agent("plain", looping_model("add", turns))
    plain_agent.add_tool(plain)
    mcp_agent = reasoning_agent("mcp", looping_model("calc__add", turns))
    mcp_agent.add_mcp_server("calc", command=[sys.executable, str(SERVER)])
    loop: dict[str, list[float]] = {"plain": [], "mcp": []}
    async with plain_agent, mcp_agent:
        for index in range(messages + 2):
            for label, agent in (("plain", plain_agent), ("mcp", mcp_agent)):
                value = await per_turn(agent, f"s{index}", turns)
                if index >= 2:  # two warm-up messages
                    loop[label].append(value)

    table = Table(title=f"MCP tool call over stdio vs a plain Python tool (µs; load {_load()})")
    for column in ("measure", "plain tool", "MCP tool", "MCP overhead"):
        table.add_column(column, justify="right")
    for label, values in ((f"direct call (median of {len(direct['mcp'])} blocks of {block})", direct),
                          (f"per turn, {turns} tool turns + answer, {messages} messages", loop)):  # fmt: skip
        p, m = statistics.median(values["plain"]), statistics.median(values["mcp"])
        table.add_row(label, f"{p:,.0f}", f"{m:,.0f}", f"{m - p:,.0f}")
    return table


# -- part 2: OpenTelemetry --------------------------------------------------------------------


async def bench_otel(turns: int, blocks: int, block: int) -> Table:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import NoOpTracerProvider

    from baf.telemetry import OpenTelemetryHooks

    def provider(processor: Callable[[InMemorySpanExporter], Any]) -> tuple[TracerProvider, InMemorySpanExporter]:
        exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider(shutdown_on_exit=False)
        tracer_provider.add_span_processor(processor(exporter))
        return tracer_provider, exporter

    variants: dict[str, Agent] = {"off": reasoning_agent("off", looping_model("add", turns))}
    providers = {"simple": provider(SimpleSpanProcessor), "batch": provider(BatchSpanProcessor)}
    # A no-op tracer makes no spans: what is left is baf's own share (queue, span thread, mapping).
    tracer_providers: dict[str, Any] = {"no-op tracer": NoOpTracerProvider()}
    tracer_providers.update((label, tracer_provider) for label, (tracer_provider, _) in providers.items())
    hooks: dict[str, OpenTelemetryHooks] = {}
    for label, tracer_provider in tracer_providers.items():
        agent = reasoning_agent(label, looping_model("add", turns))
        hooks[label] = OpenTelemetryHooks(tracer_provider=tracer_provider)
        agent.add_hook(hooks[label])
        variants[label] = agent
    for agent in variants.values():
        agent.add_tool(Tool(add))
    sdk_tracer_provider, sdk_exporter = provider(SimpleSpanProcessor)
    sdk_tracer = sdk_tracer_provider.get_tracer("bench")
    wall: dict[str, list[float]] = {label: [] for label in variants}
    cpu: dict[str, list[float]] = {label: [] for label in variants}
    sdk_alone: list[float] = []
    for agent in variants.values():
        await agent.start()
    try:
        for index in range(blocks + 1):  # block 0 warms up
            labels = list(variants)
            for label in labels[index % len(labels) :] + labels[: index % len(labels)]:  # each goes first in turn
                agent = variants[label]
                # A block of messages back to back, as a busy agent gets them: the span thread wakes on its
                # own timer meanwhile (it may run beside the agent), then flush() makes what is left.
                cpu_before = time.process_time()  # every thread of the process: the span thread's work too
                started = time.perf_counter()
                for message in range(block):
                    await agent.receive_message(f"s{index}-{message}", "go")
                elapsed = time.perf_counter() - started
                if label in hooks:
                    hooks[label].flush()
                cpu_spent = time.process_time() - cpu_before
                if label == "simple":  # the same spans made again by the SDK alone, without baf
                    made = providers[label][1].get_finished_spans()
                    sdk_before = time.process_time()
                    _make_spans(sdk_tracer, made)
                    sdk_spent = time.process_time() - sdk_before
                    sdk_exporter.clear()
                    if index:
                        sdk_alone.append(sdk_spent / (block * (turns + 1)) * 1e6)
                if label in providers:
                    providers[label][1].clear()
                if index:
                    wall[label].append(elapsed / (block * (turns + 1)) * 1e6)
                    cpu[label].append(cpu_spent / (block * (turns + 1)) * 1e6)
    finally:
        for agent in variants.values():
            await agent.stop()
        for tracer_provider, _ in (*providers.values(), (sdk_tracer_provider, None)):
            tracer_provider.shutdown()

    table = Table(title=f"OpenTelemetry hooks, content capture off, per turn ({turns} tool turns + answer, "
                        f"zero-latency model; {blocks} blocks of {block} messages each, alternating; "
                        f"load {_load()})")  # fmt: skip
    for column in ("hooks", "wall µs (median)", "on / off", "CPU µs, all threads (median)", "on / off"):
        table.add_column(column, justify="right")
    off_wall, off_cpu = statistics.median(wall["off"]), statistics.median(cpu["off"])
    table.add_row("off", f"{off_wall:,.0f}", "1.00", f"{off_cpu:,.0f}", "1.00")
    for label in tracer_providers:
        on_wall, on_cpu = statistics.median(wall[label]), statistics.median(cpu[label])
        name = label if label == "no-op tracer" else f"{label} span processor"
        table.add_row(f"on, {name}", f"{on_wall:,.0f}", f"{on_wall / off_wall:.2f}",
                      f"{on_cpu:,.0f}", f"{on_cpu / off_cpu:.2f}")  # fmt: skip
    floor = statistics.median(sdk_alone)
    table.add_row("SDK alone: the simple row's spans made without baf (added to off)", "", "",
                  f"+{floor:,.0f}", f"{(off_cpu + floor) / off_cpu:.2f}")  # fmt: skip
    return table


def _make_spans(tracer: Any, spans: Any) -> None:
    """Start and end ``spans`` (finished SDK spans) again on ``tracer``, nested as they were, with their
    attributes and events: the SDK's own cost for these spans, with no baf code around it."""
    from opentelemetry import context, trace

    made: dict[int, Any] = {}
    root = context.Context()
    for span in sorted(spans, key=lambda s: s.start_time):
        parent = made.get(span.parent.span_id) if span.parent is not None else None
        parent_context = trace.set_span_in_context(parent) if parent is not None else root
        new = tracer.start_span(
            span.name, context=parent_context, kind=span.kind, attributes=span.attributes, start_time=span.start_time
        )
        made[span.context.span_id] = new
        for event in span.events:
            new.add_event(event.name, event.attributes, event.timestamp)
    for span in sorted(spans, key=lambda s: s.end_time):
        made[span.context.span_id].end(end_time=span.end_time)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run with few repetitions")
    parser.add_argument("--only", choices=("mcp", "otel"), help="run one part")
    args = parser.parse_args()
    out = console()
    calls, messages = (200, 5) if args.quick else (3000, 40)
    blocks = 4 if args.quick else 40
    if args.only in (None, "mcp"):
        out.print(await bench_mcp(calls=calls, block=50, turns=10, messages=messages))
    if args.only in (None, "otel"):
        out.print(await bench_otel(turns=10, blocks=blocks, block=10))


if __name__ == "__main__":
    asyncio.run(main())
