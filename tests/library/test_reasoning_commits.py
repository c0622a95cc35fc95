"""Which records the reasoning state commits together: its durable points, and no more round trips than
they need (each commit is a round trip to the database on PostgreSQL)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from baf import ReceiveTextEvent
from baf.log import open_log
from baf.log.memory import MemoryLog
from baf.log.record import Record, RecordKind
from baf.testing import RecordingPlatform, ScriptedLLM

from .helpers import reasoning_agent


class CommitsSeen(MemoryLog):
    """A memory log that keeps the kinds of each append (one append is one commit)."""

    def __init__(self) -> None:
        super().__init__()
        self.commits: list[list[str]] = []

    async def append(self, records: Sequence[Record]) -> None:
        await super().append(records)
        self.commits.append([record.kind for record in records])


def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    return f"value of {key}"


async def test_the_step_start_is_committed_with_the_first_model_request(platform: RecordingPlatform) -> None:
    """The message is committed alone before the step runs; the step's start and transition then go with the
    loop's first commit (the model request, before the model is called) rather than in a round trip of
    their own: nothing acts between them."""
    log = CommitsSeen()
    llm = ScriptedLLM([ScriptedLLM.tool_call("lookup", {"key": "a"}), "done"])
    agent, _ = reasoning_agent(llm, log=log, enable_task_planning=False)
    agent.new_tool(lookup)
    async with agent:
        await agent.get_or_create_session("s", platform)
        await agent.wait_idle()
        log.commits.clear()
        await agent.receive_message("s", "look a up", platform)
    assert platform.replies["s"] == ["done"]
    assert log.commits == [
        [RecordKind.MESSAGE_RECEIVED],
        [RecordKind.STEP_STARTED, RecordKind.TRANSITION, RecordKind.REASONING_STEP, RecordKind.LLM_REQUEST],
        [RecordKind.LLM_RESPONSE, RecordKind.REASONING_STEP],  # before the tool runs
        [RecordKind.TOOL_RESULT, RecordKind.REASONING_STEP, RecordKind.LLM_REQUEST],  # before the model sees it
        [RecordKind.LLM_RESPONSE, RecordKind.REASONING_STEP, RecordKind.REPLY, RecordKind.REASONING_STEP,
         RecordKind.VARIABLE_SET, RecordKind.STEP_FINISHED],
    ]  # fmt: skip


async def test_a_body_without_the_mark_still_has_its_step_start_committed_first(platform: RecordingPlatform) -> None:
    """A plain body may act at once (send an email): the step's start is durable before it runs."""
    log = CommitsSeen()
    agent, state = reasoning_agent(ScriptedLLM([]), log=log)
    committed_before_body: list[list[list[str]]] = []
    state.set_body(lambda session: committed_before_body.append([list(c) for c in log.commits]))
    async with agent:
        await agent.get_or_create_session("s", platform)
        await agent.wait_idle()
        log.commits.clear()
        await agent.receive_message("s", "hello", platform)
    step_start = [RecordKind.STEP_STARTED, RecordKind.TRANSITION]
    assert committed_before_body[-1] == [[RecordKind.MESSAGE_RECEIVED], step_start]


async def test_a_crash_before_the_first_model_request_is_committed_answers_the_message_anew(
    tmp_path: Path, platform: RecordingPlatform
) -> None:
    """What a crash between the message's commit and the loop's first commit leaves: the message, and
    no step for it. The restarted runtime handles it anew, once: the model is asked once, one reply."""
    url = f"sqlite:///{tmp_path / 'crash.db'}"
    async with reasoning_agent(ScriptedLLM(["hello there"]), log=url)[0] as agent:
        await agent.get_or_create_session("s", platform)
        await agent.wait_idle()
        before = await agent.log.read("s")
    # The message record the runtime commits on receipt, and nothing after it (the step's first commit lost).
    event = ReceiveTextEvent("s", message="hi")
    message = Record(session_id="s", seq=before[-1].seq + 1, kind=RecordKind.MESSAGE_RECEIVED, ts=time.time(),
                     data={"event": event.to_data(), "text": event.text})  # fmt: skip
    log = open_log(url)
    async with log:
        await log.append([message])
    llm = ScriptedLLM(["hello again"])
    agent, _ = reasoning_agent(llm, log=url)
    async with agent:
        await agent.get_or_create_session("s", platform)
        await agent.wait_idle()
        records = await agent.log.read("s")
    assert len(llm.requests) == 1
    assert [r.data["text"] for r in records if r.kind == RecordKind.REPLY] == ["hello again"]
    assert [r.kind for r in records].count(RecordKind.STEP_STARTED) == 2  # the session's start, and this one
