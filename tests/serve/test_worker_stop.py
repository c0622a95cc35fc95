"""A worker stopped (SIGTERM, Ctrl-C, a rolling restart) while a step runs past its grace period: the step is
left open in the log, and the worker that takes the session next resumes it. The user gets the answer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from baf import Agent
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm.base import LLMResponse, ToolCall
from baf.log.postgres import PostgresLog
from baf.log.postgres_inbox import Inbox
from baf.testing import FunctionLLM

from .helpers import eventually, message, owner_of, two_workers

pytestmark = pytest.mark.slow


def slow_first_lookup_agent(lookups: list[str], models: list[str], started: asyncio.Event) -> Agent:
    """A reasoning agent whose first ``lookup`` outlasts any grace period; later ones answer at once."""

    async def lookup(key: str) -> str:
        """Look a key up."""
        lookups.append(key)
        if len(lookups) == 1:
            started.set()
            await asyncio.sleep(600)
        return f"value of {key}"

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> LLMResponse:
        models.append(messages[-1]["role"])
        if messages[-1]["role"] == "tool":
            return LLMResponse(text=f"Found {messages[-1]['content']}.")
        return LLMResponse(tool_calls=[ToolCall("call_1", "lookup", '{"key": "k"}')])

    agent = Agent("stopping", log="memory://")
    agent.new_tool(lookup, idempotent=True)
    state = new_reasoning_state(agent, FunctionLLM(model), enable_task_planning=False)
    state.when_event().go_to(state)
    return agent


async def test_a_step_cut_by_a_workers_stop_is_resumed_by_the_other_worker(postgres_dsn: str) -> None:
    lookups: list[str] = []
    models: list[str] = []
    started = asyncio.Event()
    agents = (slow_first_lookup_agent(lookups, models, started), slow_first_lookup_agent(lookups, models, started))
    async with two_workers(postgres_dsn, agents) as (a, b):
        async with PostgresLog(postgres_dsn, worker_id="forwarder") as log:
            await Inbox(log).post("s", message("s", "find k"))
        await asyncio.wait_for(started.wait(), 30)
        owner = {"a": a, "b": b}[str(await owner_of(postgres_dsn, "s"))]
        await owner.stop()  # its grace period (10 s) runs out: the step is cut, left open, the lease given up

        async def answered() -> bool:
            async with PostgresLog(postgres_dsn, read_only=True) as reader:
                return any(r.kind == "reply" for r in await reader.read("s"))

        await eventually(answered, "the other worker resumed the step and answered", within=60)
    async with PostgresLog(postgres_dsn, read_only=True) as log:
        records = await log.read("s")
    kinds = [r.kind for r in records]
    assert [r.data["text"] for r in records if r.kind == "reply"] == ["Found value of k."]
    assert kinds.count("step_resumed") == 1 and kinds.count("error") == 0 and kinds[-1] == "step_finished"
    assert models == ["user", "tool"]  # the recorded answer asking for the lookup was not asked for again
    assert lookups == ["k", "k"]  # idempotent, its result never recorded: run again by the resumed step
