"""A session dropped because its log refused a write comes back by itself once the log answers: its open
step resumes and its user gets the answer, without a new message or a restart (``baf.core.recovery``)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from baf import Agent
from baf.core import recovery
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.log.memory import MemoryLog
from baf.log.record import Record
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
