"""Intents benchmark (issue 16): what routing by intent costs per message, and loading a YAML agent.

Three agents, each a state that answers a text message and comes back, one session, memory log, in the
same run and alternating in blocks of messages:

- *text*: ``when_event(ReceiveTextEvent)`` (no intents anywhere: the engine's check costs nothing);
- *intents*: ``when_intent_matched`` over 8 intents of 4 sentences each, with the offline
  ``WordOverlapClassifier``, plus one global state: each message is classified and recorded
  (``intent_predicted``);
- *yaml*: the same intent agent, loaded from a YAML file (a ``reply`` template instead of a Python body).

µs per message is the median over blocks; the ratios are against *text*. Loading the YAML file
(parse, validate, build) is timed separately.

    python bench/bench_intents.py            # about 30 s
    python bench/bench_intents.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import console

from baf import Agent, ReceiveTextEvent, Session
from baf.declarative import build_agent

TOPICS = ["hours", "delivery", "prices", "returns", "payment", "stock", "contact", "jobs"]


def sentences(topic: str) -> list[str]:
    return [f"tell me about {topic}", f"what about {topic} please", f"{topic} question", f"I need {topic} info"]


def text_agent() -> Agent:
    agent = Agent("text", log="memory://")
    start = agent.new_state("start", initial=True)
    answer = agent.new_state("answer")
    answer.set_body(_reply)
    start.when_event(ReceiveTextEvent).go_to(answer)
    answer.go_to(start)
    return agent


def intent_agent() -> Agent:
    agent = Agent("intents", log="memory://")
    start = agent.new_state("start", initial=True)
    answer = agent.new_state("answer")
    answer.set_body(_reply)
    for topic in TOPICS:
        start.when_intent_matched(agent.new_intent(topic, sentences(topic))).go_to(answer)
    start.when_no_intent_matched().go_to(answer)
    answer.go_to(start)
    helping = agent.new_state("help")
    helping.set_body(_reply)
    helping.set_global(agent.new_intent("help", ["help", "what can you do"]))
    return agent


YAML = "\n".join([
    "name: yaml", "log: memory://", "intents:",
    *[f"  {t}: {{training_sentences: [{', '.join(repr(s) for s in sentences(t))}]}}" for t in TOPICS],
    "  help: {training_sentences: [help, what can you do]}",
    "states:", "  - name: start", "    initial: true", "    transitions:",
    *[f"      - {{on: {{intent: {t}}}, to: answer}}" for t in TOPICS],
    "      - {on: no_intent, to: answer}",
    "  - name: answer", "    reply: 'ok {{ event.text }}'", "    transitions: [{on: auto, to: start}]",
    "  - {name: help, global: help, reply: 'I can help'}",
])  # fmt: skip


async def _reply(session: Session) -> None:
    session.reply("ok")


async def per_message(agent: Agent, messages: int) -> float:
    """Seconds per message over ``messages`` messages to one session."""
    async with agent:
        await agent.get_or_create_session("s")
        await agent.wait_idle("s")
        started = time.perf_counter()
        for index in range(messages):
            await agent.receive_message("s", f"tell me about {TOPICS[index % len(TOPICS)]}")
        return (time.perf_counter() - started) / messages


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    blocks, messages = (2, 100) if args.quick else (7, 400)
    makers = {"text": text_agent, "intents": intent_agent, "yaml": lambda: build_agent(YAML, "bench.yaml")}
    timings: dict[str, list[float]] = {name: [] for name in makers}
    for _ in range(blocks):
        for name, make in makers.items():
            timings[name].append(await per_message(make(), messages))
    loads = []
    for _ in range(20 if not args.quick else 3):
        started = time.perf_counter()
        build_agent(YAML, "bench.yaml")
        loads.append(time.perf_counter() - started)
    out = console()
    table = Table(title=f"per message, one session, memory log ({blocks} blocks of {messages})")
    for column in ("agent", "µs per message", "× text"):
        table.add_column(column, justify="right")
    base = statistics.median(timings["text"])
    for name, values in timings.items():
        value = statistics.median(values)
        table.add_row(name, f"{value * 1e6:.0f}", f"{value / base:.2f}")
    out.print(table)
    out.print(f"loading the YAML agent ({len(YAML.splitlines())} lines): {statistics.median(loads) * 1e3:.1f} ms "
              f"(median of {len(loads)})")  # fmt: skip
    out.print(f"load average: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
