"""Shared by the multi-worker tests: the fixture agent, sending messages, waiting for answers."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from baf.core.agent import Agent
from baf.core.events import ReceiveTextEvent
from baf.log import Record
from baf.log.postgres import PostgresLog

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "serve_agent.py"


def fresh_agent() -> Agent:
    """A new instance of the fixture agent (one per worker in one process)."""
    return load_agent(FIXTURE.name)


def load_agent(name: str) -> Agent:
    """A new instance of the agent in ``tests/fixtures/<name>``."""
    spec = importlib.util.spec_from_file_location(f"serve_agent_{id(object())}", FIXTURE.with_name(name))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    agent: Agent = module.agent
    return agent


async def eventually(condition: Callable[[], Awaitable[bool] | bool], what: str, within: float = 60.0) -> None:
    """Wait until ``condition()`` holds, checking every 20 ms: the tests wait for the state they mean, not
    for a time. ``within`` only bounds a hung run (it is no measure): it fails saying ``what`` never came."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        held = condition()
        if not isinstance(held, bool):
            held = await held
        if held:
            return
        if loop.time() > deadline:
            raise AssertionError(f"never happened within {within} s: {what}")
        await asyncio.sleep(0.02)


def message(session_id: str, text: str) -> dict[str, Any]:
    """``message_received`` data, as a platform's worker forwards it."""
    return {"event": ReceiveTextEvent(session_id, message=text).to_data(), "text": text}


async def wait_for_answers(dsn: str, expected: dict[str, list[str]], within: float = 60.0) -> dict[str, list[Record]]:
    """Poll the log until every session has a reply per question (for at most ``within`` seconds);
    return each session's records."""
    reader = PostgresLog(dsn, read_only=True)
    await reader.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            records = {session_id: await reader.read(session_id) for session_id in expected}
            answered = {
                session_id: [r.data.get("text") for r in rs if r.kind == "reply"] for session_id, rs in records.items()
            }
            if all(len(answered[s]) >= len(questions) for s, questions in expected.items()):
                return records
            if loop.time() > deadline:
                missing = {s: (q, answered[s]) for s, q in expected.items() if len(answered[s]) < len(q)}
                raise AssertionError(f"not answered in {within} s: {missing}")
            await asyncio.sleep(0.2)
    finally:
        await reader.close()


def assert_each_question_answered_once(records: dict[str, list[Record]], expected: dict[str, list[str]]) -> None:
    """Every question recorded once, handled in one step, answered once, in the order it was sent."""
    for session_id, questions in expected.items():
        rs = records[session_id]
        received = [r.data["text"] for r in rs if r.kind == "message_received"]
        assert received == questions, (session_id, received)
        replies = [r.data["text"] for r in rs if r.kind == "reply"]
        assert replies == [f"answer to {q}" for q in questions], (session_id, replies)
        seqs = [r.seq for r in rs]
        assert seqs == list(range(1, len(rs) + 1)), f"{session_id}: seqs have gaps or repeats"


__all__ = [
    "FIXTURE",
    "assert_each_question_answered_once",
    "eventually",
    "fresh_agent",
    "load_agent",
    "message",
    "wait_for_answers",
]
