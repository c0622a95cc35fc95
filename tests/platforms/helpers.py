"""Helpers for the platform tests: agents with scripted models and a small protocol client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

from baf import Agent
from baf.core.session import Session
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm.base import LLM
from baf.testing import ScriptedLLM

FINAL_ANSWER = "The total is **42** (from `lookup`)."


def planning_script(delay: float = 0.0, final: str = FINAL_ANSWER) -> ScriptedLLM:
    """One reasoning invocation: plan two tasks, call a tool, tick both tasks off, answer ``final``."""
    return ScriptedLLM(
        [
            ScriptedLLM.tool_call("add_tasks", {"descriptions": ["Look up the numbers", "Write the answer"]}),
            ScriptedLLM.tool_call("lookup", {"topic": "sales"}),
            ScriptedLLM.tool_call("complete_task", {"task_id": 1, "result": "found 42"}),
            ScriptedLLM.tool_call("complete_task", {"task_id": 2, "result": "written"}),
            final,
        ],
        delay=delay,
    )


def lookup(topic: str) -> str:
    """Look up figures about a topic.

    Args:
        topic: What to look up.
    """
    return f"{topic}: 42 <b>units</b>"


def reasoning_agent(llm: LLM) -> Agent:
    """An in-memory agent whose only state is a self-looping reasoning state with a ``lookup`` tool."""
    agent = Agent("assistant", log="memory://")
    agent.add_tool(lookup)
    state = new_reasoning_state(agent, llm)
    state.when_event().go_to(state)
    return agent


def body_agent(body: Callable[[Session], Any]) -> Agent:
    """An in-memory agent with one self-looping state running ``body`` on every message."""
    agent = Agent("bodies", log="memory://")
    state = agent.new_state("main", initial=True)

    async def run(session: Session) -> None:
        if session.event is not None and session.event.text is not None:
            result = body(session)
            if asyncio.iscoroutine(result):
                await result

    state.set_body(run)
    state.when_event().go_to(state)
    return agent


def echo(session: Session) -> None:
    """Reply with the message."""
    assert session.event is not None
    session.reply(f"echo: {session.event.text}")


class Client:
    """A protocol client on the real ``websockets`` client: JSON in, JSON out, with timeouts."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.session_id: str | None = None
        self.token: str | None = None

    @classmethod
    async def open(cls, url: str, **options: Any) -> Client:
        """Connect to ``url``."""
        return cls(await connect(url, **options))

    async def send(self, frame: dict[str, Any] | str | bytes) -> None:
        """Send a frame (a dict is JSON-encoded; a str or bytes is sent as is)."""
        await self.ws.send(json.dumps(frame) if isinstance(frame, dict) else frame)

    async def recv(self, wait: float = 5.0) -> dict[str, Any]:
        """The next frame, decoded."""
        raw = await asyncio.wait_for(self.ws.recv(), wait)
        frame: dict[str, Any] = json.loads(raw)
        return frame

    async def until(self, kind: str, wait: float = 5.0, **match: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Frames up to and including the first of type ``kind`` (whose fields equal ``match``)."""
        seen: list[dict[str, Any]] = []
        async with asyncio.timeout(wait):
            while True:
                frame = await self.recv(wait)
                seen.append(frame)
                if frame["type"] == kind and all(frame.get(k) == v for k, v in match.items()):
                    return frame, seen

    async def hello(self, resume: str | None = None) -> dict[str, Any]:
        """Say hello (resuming if a token is given) and return the welcome."""
        await self.send({"type": "hello"} if resume is None else {"type": "hello", "resume": resume})
        welcome, _ = await self.until("welcome")
        self.session_id, self.token = welcome["session_id"], welcome["resume_token"]
        return welcome

    async def drain(self, quiet: float = 0.2) -> list[dict[str, Any]]:
        """Every frame that arrives until none has for ``quiet`` seconds."""
        frames = []
        while True:
            try:
                frames.append(await self.recv(quiet))
            except TimeoutError:
                return frames

    async def close(self) -> None:
        """Close the connection."""
        await self.ws.close()
