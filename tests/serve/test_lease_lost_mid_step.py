"""A worker paused past its lease while a step of the session runs (SIGSTOP, a long GC, a long tool) finds
out when the step commits: in a reply the body awaits, or in the commit before the model's next turn. That
is expected among workers, not a bug: one warning line says which session and worker and what happens next,
with no traceback, no error blamed on the body or the model; the worker that took the session goes on."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import asyncpg
import pytest

from baf import Agent, Session
from baf.core.events import ReceiveTextEvent
from baf.errors import LeaseLostError
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm.base import LLMResponse, ToolCall
from baf.testing import FunctionLLM

from .helpers import two_workers


def replying_agent(started: asyncio.Event, gate: asyncio.Event) -> Agent:
    """A body that waits for the test, then replies and awaits the reply's commit."""
    agent = Agent("gated", log="memory://")
    state = agent.new_state("start", initial=True)

    async def body(session: Session) -> None:
        if session.event is None:
            return
        started.set()
        await gate.wait()
        await session.reply("after the wait")

    state.set_body(body)
    state.when_event().go_to(state)
    return agent


def reasoning_agent(started: asyncio.Event, gate: asyncio.Event) -> Agent:
    """A reasoning state whose one tool waits for the test: the model's next turn commits first."""
    agent = Agent("gated", log="memory://")

    async def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> LLMResponse | str:
        if messages[-1]["role"] == "user":
            return LLMResponse(tool_calls=[ToolCall("wait-1", "wait_here", {})])
        return "done"

    state = new_reasoning_state(agent, FunctionLLM(model), max_steps=4, memory=0)
    state.when_event().go_to(state)

    @agent.tool
    async def wait_here() -> str:
        """Wait for the test."""
        started.set()
        await gate.wait()
        return "waited"

    return agent


@pytest.mark.parametrize("make_agent", [replying_agent, reasoning_agent], ids=["awaited-reply", "next-model-turn"])
async def test_a_lease_lost_mid_step_is_one_warning_line_and_the_new_owner_goes_on(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture, make_agent: Callable[..., Agent]
) -> None:
    started, gate = asyncio.Event(), asyncio.Event()
    async with two_workers(postgres_dsn, (make_agent(started, gate), make_agent(started, gate))) as (a, b):
        # a is paused from now on: no heartbeat tells it that its lease expires and b takes the session.
        next(task for task in a._tasks if task.get_name() == "baf-worker-heartbeat").cancel()
        done = await a.runtime.receive(ReceiveTextEvent("s", message="q1"))
        await started.wait()
        connection = await asyncpg.connect(postgres_dsn)
        try:
            await connection.execute("UPDATE baf_leases SET expires_at = now() - interval '1 second'")
        finally:
            await connection.close()
        assert await b.claim("s")
        caplog.clear()
        gate.set()  # a goes on: its next commit finds the lease lost
        with pytest.raises(LeaseLostError):
            await done
        said = [record for record in caplog.records if record.levelno >= logging.WARNING]
        assert [record.levelname for record in said] == ["WARNING"], caplog.text
        line = said[0].getMessage()
        assert line.startswith("session s: worker 'a' lost its lease (epoch 1) to another"), line
        assert "this worker drops it, and the worker that holds its lease now goes on with it" in line
        assert said[0].exc_info is None and "Traceback" not in caplog.text
        assert "s" not in a.runtime.sessions
        await (await b.runtime.receive(ReceiveTextEvent("s", message="q2")))  # b goes on with the session
        texts = [r.data.get("text") for r in await b.log.read("s") if r.kind == "reply"]
        assert texts[-1] in ("after the wait", "done"), texts
