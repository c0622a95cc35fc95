"""Patterns as state bodies: steps recorded and streamed, the answer replied, failures contained."""

from __future__ import annotations

from pathlib import Path

from baf import Agent
from baf.library.state.pattern_state import RESULT_VARIABLE, new_pattern_state
from baf.llm.base import LLMResponse, ToolCall
from baf.log import open_log
from baf.reasoning.patterns import ChainOfThought, PatternStepKind, ReAct
from baf.reasoning.step import ReasoningStepKind
from baf.testing import RecordingPlatform, ScriptedLLM

from .helpers import js


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def test_react_state_records_streams_and_replies(log_url: str, platform: RecordingPlatform) -> None:
    llm = ScriptedLLM([
        ScriptedLLM.tool_calls([("add", {"a": 2, "b": 3})], text="Add them."),
        ScriptedLLM.tool_call("final_answer", {"answer": "It is 5."}),
    ])  # fmt: skip
    agent = Agent("patterns", log=log_url)
    agent.new_tool(add)
    state = new_pattern_state(agent, llm, ReAct())
    state.when_event().go_to(state)
    async with agent:
        await agent.receive_message("s", "2+3?", platform)
        records = await agent.log.read("s")
        session = await agent.get_or_create_session("s", platform)
        summary = session.get(RESULT_VARIABLE)

    assert platform.replies["s"] == ["It is 5."]
    streamed = [step.kind for step in platform.steps["s"]]
    assert streamed == ["reasoning_started", "thought", "action", "observation", "llm_text", "reasoning_finished"]
    logged = [r.data for r in records if r.kind == "reasoning_step"]
    assert logged == [step.to_dict() for step in platform.steps["s"]]
    kinds = [r.kind for r in records]
    # Write-ahead: each request is recorded before its response, the tool result before the next request.
    first_request = kinds.index("llm_request")
    assert kinds[first_request + 1] == "llm_response"
    assert kinds.index("tool_result") < len(kinds) - 1 - kinds[::-1].index("llm_request")
    assert kinds.index("reply") > kinds.index("tool_result")
    assert summary["success"] is True and summary["output"]["answer"] == "It is 5."
    assert {PatternStepKind.THOUGHT, PatternStepKind.ACTION, PatternStepKind.OBSERVATION} <= set(streamed)
    assert ReasoningStepKind.THOUGHT == PatternStepKind.THOUGHT and ReasoningStepKind.PLAN == PatternStepKind.PLAN


async def test_unreadable_model_output_is_contained_and_explained(platform: RecordingPlatform) -> None:
    agent = Agent("patterns", log="memory://")
    state = new_pattern_state(agent, ScriptedLLM(["no json", "still none"]), ChainOfThought())
    state.when_event().go_to(state)
    async with agent:
        await agent.receive_message("s", "?", platform)
        records = await agent.log.read("s")
    assert "StructuredOutputError" in platform.replies["s"][0]
    assert any(r.kind == "error" and r.data["source"] == "pattern" for r in records)
    assert platform.steps["s"][-1].kind == "reasoning_finished"


async def test_a_run_without_an_answer_replies_the_failure_message(platform: RecordingPlatform) -> None:
    agent = Agent("patterns", log="memory://")
    llm = ScriptedLLM([js(content="x", is_final=False), js(content="y", is_final=False)])
    state = new_pattern_state(agent, llm, ChainOfThought(max_steps=2), failure_message="gave up")
    state.when_event().go_to(state)
    async with agent:
        await agent.receive_message("s", "?", platform)
        session = await agent.get_or_create_session("s", platform)
        assert session.get(RESULT_VARIABLE)["stop_reason"] == "max_steps"
    assert platform.replies["s"] == ["gave up"]  # no answer was reached: the failure message


async def test_the_response_asking_for_a_tool_is_durable_before_the_tool_runs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'wa.db'}"
    seen: list[bool] = []

    async def lookup(key: str) -> str:
        """Look a key up.

        Args:
            key: The key.
        """
        async with open_log(url) as reader:  # a second connection: only committed records are visible
            records = await reader.read("s")
        calls = [call["id"] for r in records if r.kind == "llm_response" for call in r.data.get("tool_calls") or []]
        seen.append("c-lookup" in calls)
        return "found"

    llm = ScriptedLLM([
        LLMResponse(text=None, tool_calls=[ToolCall("c-lookup", "lookup", '{"key": "k"}')]),
        ScriptedLLM.tool_call("final_answer", {"answer": "found"}),
    ])  # fmt: skip
    agent = Agent("patterns", log=url)
    agent.new_tool(lookup)
    state = new_pattern_state(agent, llm, ReAct())
    state.when_event().go_to(state)
    async with agent:
        await agent.receive_message("s", "look k up")
    assert seen == [True]


async def test_a_secret_cut_by_a_step_summary_does_not_leak_half(tmp_path: Path) -> None:
    secret = "canary-secret-ABCDEFGHIJ"
    thought = "x" * 110 + secret + " and more words after it, past the summary limit"
    llm = ScriptedLLM([
        ScriptedLLM.tool_calls([("add", {"a": 2, "b": 3})], text=thought),
        ScriptedLLM.tool_call("final_answer", {"answer": "5"}),
    ])  # fmt: skip
    agent = Agent("patterns", log=f"sqlite:///{tmp_path / 's.db'}")
    agent.new_tool(add)
    agent.mark_secret(secret)
    state = new_pattern_state(agent, llm, ReAct())
    state.when_event().go_to(state)
    platform = RecordingPlatform()
    async with agent:
        await agent.receive_message("s", "2+3?", platform)
        records = await agent.log.read("s")
    summaries = [r.data["summary"] for r in records if r.kind == "reasoning_step"]
    assert any(summary.startswith("x" * 110 + "[RED") for summary in summaries), summaries
    dumped = str([r.data for r in records]) + str([step.summary for step in platform.steps["s"]])
    for cut in range(6, len(secret)):
        assert secret[:cut] not in dumped, secret[:cut]
