"""A session dropped because its log refused a write comes back by itself once the log answers: its open
step resumes and its user gets the answer, without a new message or a restart (``baf.core.recovery``)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from baf import Agent
from baf.core import recovery
from baf.core.events import ReceiveTextEvent
from baf.errors import LogError
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm.base import LLMResponse, ToolCall
from baf.log.memory import MemoryLog
from baf.log.record import Record
from baf.reasoning.tool import Tool
from baf.testing import FunctionLLM, RecordingPlatform


class FlakyLog(MemoryLog):
    """Refuses the appends holding a record of ``kind`` while ``failures`` lasts (a database away)."""

    def __init__(self, kind: str, failures: int) -> None:
        super().__init__()
        self.kind = kind
        self.failures = failures

    async def append(self, records: list[Record]) -> None:
        if self.failures and any(r.kind == self.kind for r in records):
            self.failures -= 1
            raise OSError("the database is away")
        await super().append(records)


def reasoning_agent(log: MemoryLog) -> tuple[Agent, FunctionLLM]:
    agent = Agent("a", log=log)
    llm = FunctionLLM(lambda messages, tools, **_: "The answer.")
    state = new_reasoning_state(agent, llm, enable_task_planning=False)
    state.when_event().go_to(state)
    return agent, llm


async def wait_for(condition: Any, within: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not condition():
        assert loop.time() < deadline, "never happened"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("failures", [1, 3])
async def test_a_step_cut_by_a_refused_write_resumes_once_the_log_answers(
    failures: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recovery, "FIRST_DELAY", 0.05)
    log = FlakyLog("llm_response", failures)
    agent, llm = reasoning_agent(log)
    platform = RecordingPlatform()
    agent.add_platform(platform)
    async with agent:
        with pytest.raises(Exception, match="the database is away"):
            await agent.receive_message("s", "question", platform)
        # No new message: the session comes back by itself, resumes its step and answers.
        await wait_for(lambda: platform.replies.get("s") == ["The answer."])
        records = await log.read("s")
    kinds = [r.kind for r in records]
    assert kinds.count("message_received") == 1 and kinds.count("reply") == 1
    assert "step_resumed" in kinds and kinds.count("llm_response") == 1
    assert [r.data["text"] for r in records if r.kind == "reply"] == ["The answer."]
    assert log.failures == 0 and len(llm.requests) == failures + 1  # the refused answers were asked again


async def test_a_session_whose_own_step_keeps_failing_is_given_up_after_a_few_rounds(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(recovery, "FIRST_DELAY", 0.01)
    log = FlakyLog("llm_response", 10**6)  # every answer refused: the step fails again each time it resumes
    agent, llm = reasoning_agent(log)
    async with agent:
        with pytest.raises(Exception, match="the database is away"):
            await agent.receive_message("s", "question")
        with caplog.at_level(logging.ERROR, logger="baf.runtime"):
            await wait_for(lambda: "dropped 5 times in a row" in caplog.text)
        asked = len(llm.requests)
        await asyncio.sleep(0.3)
        assert len(llm.requests) == asked  # given up: nothing runs any more
    assert asked == recovery.MAX_ROUNDS + 1


async def test_a_stop_ends_the_tries_and_the_next_start_resumes_the_step() -> None:
    log = FlakyLog("llm_response", 1)
    agent, _ = reasoning_agent(log)
    async with agent:
        with pytest.raises(Exception, match="the database is away"):
            await agent.receive_message("s", "question")
    # Stopped before the first try (0.5 s): the step waits in the log, and the next start resumes it.
    await log.start()  # a MemoryLog reopens with its records
    assert [r.kind for r in await log.read("s")].count("reply") == 0
    async with agent:
        await agent.wait_idle()
        replies = [r.data["text"] for r in await log.read("s") if r.kind == "reply"]
    assert replies == ["The answer."]


async def test_a_load_whose_own_writes_fail_leaves_nothing_cached_and_is_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reply is refused twice: once in the step, once as the load closes the step it cannot resume (a
    plain body). The failed load leaves no broken session in memory: the next try closes the step, telling
    the user, and the next message is answered."""
    monkeypatch.setattr(recovery, "FIRST_DELAY", 0.05)
    log = FlakyLog("reply", 2)
    agent = Agent("a", log=log)
    state = agent.new_state("s0", initial=True)
    state.set_body(lambda session: session.reply("hello") if session.event is not None else None)
    state.when_event().go_to(state)
    platform = RecordingPlatform()
    agent.add_platform(platform)
    async with agent:
        with pytest.raises(Exception, match="the database is away"):
            await agent.receive_message("s", "q1", platform)
        await wait_for(lambda: log.failures == 0 and len(platform.replies.get("s", [])) == 1)
        await agent.receive_message("s", "q2", platform)
        records = await log.read("s")
    replies = [r.data["text"] for r in records if r.kind == "reply"]
    assert replies[0].startswith("Your last request was interrupted") and replies[1:] == ["hello"]
    assert [r.data["text"] for r in records if r.kind == "message_received"] == ["q1", "q2"]


async def test_a_step_running_when_another_write_fails_ends_before_the_session_is_loaded_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A second message's append fails while the first message's step is in a slow tool: the step running on
    the dropped session is cancelled, and the step resumed by the new load runs after it, never beside it
    (the tool never runs twice at once), and can be interrupted."""
    monkeypatch.setattr(recovery, "FIRST_DELAY", 0.05)
    running: list[int] = []
    at_once: list[int] = []

    async def slow(x: str) -> str:
        """A slow tool."""
        running.append(1)
        at_once.append(len(running))
        try:
            await asyncio.sleep(0.5)
        finally:
            running.pop()
        return "done"

    def model(messages: list[dict[str, Any]], tools: object, **_: object) -> Any:
        if not any(m.get("role") == "tool" for m in messages):
            return LLMResponse(tool_calls=[ToolCall(id="c1", name="slow", arguments={"x": "1"})])
        return "final"

    class FailSecondMessage(MemoryLog):
        messages = 0

        async def append(self, records: list[Record]) -> None:
            if any(r.kind == "message_received" for r in records):
                self.messages += 1
                if self.messages == 2:
                    raise OSError("the database is away")
            await super().append(records)

    log = FailSecondMessage()
    agent = Agent("a", log=log)
    agent.add_tool(Tool(slow, idempotent=True))
    state = new_reasoning_state(agent, FunctionLLM(model), enable_task_planning=False)
    state.when_event().go_to(state)
    async with agent:
        runtime = agent.runtime
        await runtime.receive(ReceiveTextEvent("s", message="q1"))
        await wait_for(lambda: running == [1])  # the step is in the tool
        with pytest.raises(Exception, match="the database is away"):
            await runtime.receive(ReceiveTextEvent("s", message="q2"))
        await wait_for(lambda: len(at_once) == 2)  # the resumed step runs the tool again (idempotent)
        assert at_once == [1, 1]
        assert runtime.control.in_step("s")
        runtime.interrupt("test")  # the resumed step is the session's step: it can be cut
        await agent.wait_idle()
        records = await log.read("s")
    finished = [r.data for r in records if r.kind == "step_finished"]
    assert finished[-1].get("interrupted_by") == "user"


async def test_after_a_drop_for_a_lost_lease_nothing_is_loaded_or_said(caplog: pytest.LogCaptureFixture) -> None:
    agent = Agent("a", log=MemoryLog())
    state = agent.new_state("s0", initial=True)

    async def body(session: Any) -> None:
        if session.event is not None:
            await asyncio.sleep(5)

    state.set_body(body)
    state.when_event().go_to(state)
    async with agent:
        runtime = agent.runtime
        handled = await runtime.receive(ReceiveTextEvent("s", message="q"))
        await wait_for(lambda: runtime.control.in_step("s"))
        with caplog.at_level(logging.INFO, logger="baf.runtime"):
            runtime.drop("s")  # what a worker does when its heartbeat finds the lease lost
            with pytest.raises(LogError, match="lost its lease"):
                await handled
            await asyncio.sleep(0.7)  # past the first try of a reload
        assert "s" not in runtime.sessions
    assert [r.getMessage() for r in caplog.records if r.name == "baf.runtime"] == []


class TestRounds:
    """The rounds of :class:`Recovery` itself, with a load that only counts."""

    @staticmethod
    async def drops(monkeypatch: pytest.MonkeyPatch, window: float, every: float, drops: int) -> int:
        monkeypatch.setattr(recovery, "FIRST_DELAY", 0.001)
        monkeypatch.setattr(recovery, "AGAIN_WINDOW", window)
        loads: list[str] = []

        async def load(session_id: str) -> None:
            loads.append(session_id)

        brought = recovery.Recovery(load)
        for _ in range(drops):
            brought.schedule("s")
            await wait_for(lambda: "s" not in brought._tasks)
            await asyncio.sleep(every)
        await brought.close()
        return len(loads)

    async def test_drops_soon_after_each_bring_back_are_given_up_after_max_rounds(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        drops = recovery.MAX_ROUNDS + 1  # the last one is not brought back
        assert await self.drops(monkeypatch, window=10.0, every=0.0, drops=drops) == recovery.MAX_ROUNDS

    async def test_drops_far_apart_are_never_given_up(self, monkeypatch: pytest.MonkeyPatch) -> None:
        # A database that fails now and then: each drop comes after the window of the bring-back before.
        assert await self.drops(monkeypatch, window=0.02, every=0.04, drops=8) == 8
