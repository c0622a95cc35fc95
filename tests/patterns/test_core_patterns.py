"""Chain of Thought and ReAct: happy paths, guards, structured output, accounting, the registry."""

from __future__ import annotations

import ast
import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import baf.reasoning.patterns as patterns_pkg
from baf.errors import (
    ConfigurationError,
    PatternBudgetError,
    PatternNotFoundError,
    PatternStepLimitError,
    PatternStepTimeoutError,
    StructuredOutputError,
)
from baf.llm.base import LLMResponse, ToolCall, Usage
from baf.reasoning.patterns import (
    Budget,
    ChainOfThought,
    ContextCompactor,
    OutputReviewer,
    Price,
    PriceTable,
    ReAct,
    StopReason,
    pattern_registry,
)
from baf.reasoning.patterns.accounting import CallUsage, Meter
from baf.reasoning.patterns.models import ChainOfThoughtOutput, ConfidenceReport
from baf.reasoning.tool import Tool
from baf.testing import FunctionLLM, ScriptedLLM

from .helpers import js, used


def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b


# -- Chain of Thought ------------------------------------------------------------------------------


async def test_chain_of_thought_thinks_until_a_final_thought() -> None:
    llm = ScriptedLLM([
        js(content="60 km/h for 2.5 h", is_final=False),
        "Sure:\n```json\n" + js(content="60 * 2.5 = 150", is_final=True, final_answer="150 km") + "\n```",
    ])  # fmt: skip
    result = await ChainOfThought(thinking_format="first_principles",
                                  few_shot=[{"problem": "1+1?", "thinking": "one and one", "answer": "2"}]
                                  ).execute(llm, "How far does the train go?")  # fmt: skip
    assert result.success and result.stop_reason == StopReason.COMPLETED
    assert result.output == ChainOfThoughtOutput(thinking="60 km/h for 2.5 h\n60 * 2.5 = 150", answer="150 km")
    assert result.steps_taken == 2 and llm.calls == 2
    assert [s.kind for s in result.trace] == ["thought", "thought", "llm_text"]
    first = llm.requests[0].messages[0]["content"]
    assert "basic facts" in first and "one and one" in first and "JSON schema" in first
    assert "60 km/h for 2.5 h" in llm.requests[1].messages[0]["content"]  # each step sees the earlier ones


async def test_max_steps_gives_a_partial_result_or_a_typed_error() -> None:
    endless = [js(content=f"thought {i}") for i in range(3)]
    result = await ChainOfThought(max_steps=3).execute(ScriptedLLM(endless), "?")
    assert not result.success and result.stop_reason == StopReason.MAX_STEPS
    assert isinstance(result.error, PatternStepLimitError)
    assert result.output is not None and result.output.thinking == "thought 0\nthought 1\nthought 2"
    assert result.steps_taken == 3

    with pytest.raises(PatternStepLimitError) as caught:
        await ChainOfThought(max_steps=3, on_limit="raise").execute(ScriptedLLM(endless), "?")
    assert caught.value.partial.output.answer == ""  # type: ignore[attr-defined]


async def test_malformed_structured_output_fails_clearly_after_the_cascade_and_a_retry() -> None:
    llm = ScriptedLLM(["I think the answer is 4", '{"content": 4'])
    with pytest.raises(StructuredOutputError) as caught:
        await ChainOfThought().execute(llm, "2+2?")
    message = str(caught.value)
    assert "Thought" in message and "whole answer as JSON" in message and "embedded JSON object" in message
    assert "gave up after 2 answer(s)" in message
    assert caught.value.text == '{"content": 4'
    assert "could not be read" in llm.requests[1].messages[-1]["content"]  # the model was told why


async def test_schema_mismatch_names_the_field() -> None:
    llm = ScriptedLLM([js(confidence=0.3)], name="m")
    with pytest.raises(StructuredOutputError, match=r"content: Field required"):
        await ChainOfThought(parse_retries=0).execute(llm, "?")


async def test_native_response_format_when_the_model_supports_it() -> None:
    llm = ScriptedLLM([js(content="x", is_final=True, final_answer="y")])
    llm.supports_response_format = True  # type: ignore[attr-defined]
    await ChainOfThought().execute(llm, "?")
    fmt = llm.requests[0].parameters["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "Thought"


async def test_step_timeout_stops_a_hung_call() -> None:
    llm = ScriptedLLM([js(content="late")], delay=5)
    result = await ChainOfThought(step_timeout=0.05).execute(llm, "?")
    assert result.stop_reason == StopReason.TIMEOUT and isinstance(result.error, PatternStepTimeoutError)


async def test_usage_cost_and_token_budget() -> None:
    llm = ScriptedLLM([used(js(content=f"t{i}"), 100, 50) for i in range(5)], name="priced")
    prices = PriceTable({"priced": Price(input_per_million=1.0, output_per_million=2.0)})
    result = await ChainOfThought(budget=Budget(max_tokens=300), prices=prices).execute(llm, "?")
    assert llm.calls == 2  # the second call crosses 300 tokens; the run stops there, cleanly
    assert result.stop_reason == StopReason.BUDGET and isinstance(result.error, PatternBudgetError)
    assert result.usage == Usage(200, 100)
    assert [c.usage.total_tokens for c in result.calls] == [150, 150]
    assert result.cost == pytest.approx(2 * (100 * 1.0 + 50 * 2.0) / 1e6)


def test_a_meter_totals_every_call_however_often_it_is_read() -> None:
    """The meter keeps a running total (read after every call) that always equals the sum of its calls."""
    meter = Meter(budget=Budget(max_tokens=1000))
    assert meter.usage == Usage() and meter.exceeded() is None
    for number in range(1, 6):
        meter.add("p", "turn", "m", Usage(100 * number, number))
        assert meter.usage == Usage(sum(100 * n for n in range(1, number + 1)), sum(range(1, number + 1)))
    assert meter.exceeded() == "token budget spent: 1515 of 1000 tokens used"
    del meter.calls[2:]  # the list is public: what it holds is what is counted
    assert meter.usage == Usage(300, 3)
    meter.calls.append(CallUsage("p", "turn", "m", Usage(7, 0), 0.0))
    assert meter.usage == Usage(307, 3)
    priced = Meter(PriceTable({"m": Price(0.1, 0.3)}))
    for number in range(1, 8):
        priced.add("p", "turn", "m", Usage(1000 * number + 1, 7 * number))
    assert priced.cost == sum(call.cost for call in priced.calls)  # the same float, added in the same order


async def test_cost_budget() -> None:
    llm = ScriptedLLM([used(js(content=f"t{i}"), 1000, 0) for i in range(5)], name="priced")
    pattern = ChainOfThought(budget=Budget(max_cost=0.0025), prices=PriceTable({"priced": Price(1.0, 1.0)}))
    result = await pattern.execute(llm, "?")
    assert llm.calls == 3 and result.stop_reason == StopReason.BUDGET


async def test_prompt_overrides_are_checked_up_front() -> None:
    llm = ScriptedLLM([js(content="ok", is_final=True, final_answer="ok")])
    await ChainOfThought(prompts={"step": "Q: {problem}"}).execute(llm, "what?")
    assert llm.requests[0].messages[0]["content"].startswith("Q: what?")
    with pytest.raises(ConfigurationError, match="no prompt slot"):
        ChainOfThought(prompts={"nope": "x"})
    with pytest.raises(ConfigurationError, match="does not provide"):
        ChainOfThought(prompts={"step": "{question}"})


async def test_output_reviewer_retries_then_passes_or_gives_up() -> None:
    reviewer = OutputReviewer(ConfidenceReport, max_retries=1)
    llm = ScriptedLLM([js(content="c", is_final=True, final_answer="plain"), js(answer="plain", confidence=0.8)])
    result = await ChainOfThought(reviewer=reviewer).execute(llm, "?")
    assert result.success and result.output == ConfidenceReport(answer="plain", confidence=0.8)

    llm = ScriptedLLM([js(content="c", is_final=True, final_answer="plain"), "still plain"])
    result = await ChainOfThought(reviewer=reviewer).execute(llm, "?")
    assert not result.success and result.stop_reason == StopReason.REVIEW_FAILED
    assert result.output is not None and result.output.answer == "plain"  # kept, never invented


# -- ReAct -----------------------------------------------------------------------------------------


async def test_react_thought_action_observation_final_answer_tool() -> None:
    seen: list[str] = []
    llm = ScriptedLLM([
        ScriptedLLM.tool_calls([("add", {"a": 2, "b": 3})], text="I should add."),
        ScriptedLLM.tool_call("final_answer", {"answer": "5", "confidence": 0.95}),
    ])  # fmt: skip
    pattern = ReAct(on_thought=lambda run, text: seen.append(f"thought:{text}"),
                    on_action=lambda run, call: seen.append(f"action:{call.name}"),
                    on_observation=lambda run, call, result: seen.append(f"observation:{result}"))  # fmt: skip
    result = await pattern.execute(llm, "2+3?", tools=[Tool(add)])
    assert result.success and result.output is not None
    output = result.output
    assert (output.answer, output.confidence, output.terminated_by) == ("5", 0.95, "final_answer_tool")
    assert result.output.reasoning == ["I should add."]
    assert seen == ["thought:I should add.", "action:add", "observation:5"]
    assert [s.kind for s in result.trace] == ["thought", "action", "observation", "llm_text"]
    second = llm.requests[1]
    assert second.messages[-1] == {"role": "tool", "tool_call_id": "call_1", "content": "5"}
    assert set(second.tool_names) == {"add", "final_answer"}


async def test_react_tool_errors_go_back_to_the_model() -> None:
    llm = ScriptedLLM([
        ScriptedLLM.tool_call("add", {"a": "x"}),
        ScriptedLLM.tool_call("missing", {}),
        ScriptedLLM.tool_call("final_answer", {"answer": "gave up"}),
    ])  # fmt: skip
    result = await ReAct(hide_reasoning=True).execute(llm, "?", tools=[Tool(add)])
    errors = [s.details["result"] for s in result.trace if s.kind == "observation"]
    assert "Invalid arguments for tool 'add'" in errors[0] and "no tool named 'missing'" in errors[1]
    assert result.output is not None and result.output.reasoning == []


async def test_react_confidence_and_hybrid_termination() -> None:
    text = 'I am sure. {"answer": "Paris", "confidence": 0.95}'
    llm = ScriptedLLM([text])
    result = await ReAct(termination="confidence").execute(llm, "capital?")
    assert result.output is not None and result.output.terminated_by == "confidence"
    assert "final_answer" not in llm.requests[0].tool_names  # no answering tool under confidence only

    unsure = '{"answer": "Lyon", "confidence": 0.4}'
    low = ScriptedLLM([unsure, ScriptedLLM.tool_call("final_answer", {"answer": "Paris"})])
    result = await ReAct(termination="hybrid", confidence_threshold=0.9).execute(low, "capital?")
    assert result.output is not None and result.output.answer == "Paris"
    assert "neither called a tool" in low.requests[1].messages[-1]["content"]  # below threshold: nudged on


async def test_react_max_steps_and_compaction() -> None:
    calls = iter(range(100))

    def loop_forever(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> LLMResponse:
        return ScriptedLLM.tool_call("add", {"a": next(calls), "b": 1})

    llm = FunctionLLM(loop_forever)
    pattern = ReAct(max_steps=6, compactor=ContextCompactor(max_tokens=200, keep_last=2))
    result = await pattern.execute(llm, "count " * 20, tools=[Tool(add)])
    assert result.stop_reason == StopReason.MAX_STEPS and llm.calls == 6
    assert any(s.kind == "compaction" for s in result.trace)
    last = llm.requests[-1].messages
    assert last[0]["content"].startswith("count") and len(last) <= 4  # the task stays, old turns go
    assert last[1]["role"] == "assistant"  # never a tool result without its call


async def test_react_compaction_keeps_parallel_calls_with_their_results() -> None:
    # Two calls a step and keep_last=2: the last two messages are one step's results; the kept tail must
    # start at the assistant message that asked for them.
    calls = iter(range(100))

    def two_at_a_time(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> LLMResponse:
        n = next(calls)
        return LLMResponse(tool_calls=[ToolCall(f"a{n}", "add", json.dumps({"a": n, "b": 1})),
                                       ToolCall(f"b{n}", "add", json.dumps({"a": n, "b": 2}))])  # fmt: skip

    llm = FunctionLLM(two_at_a_time)
    pattern = ReAct(max_steps=5, max_parallel_tools=2, compactor=ContextCompactor(max_tokens=200, keep_last=2))
    result = await pattern.execute(llm, "count " * 20, tools=[Tool(add)])
    assert sum(s.kind == "compaction" for s in result.trace) >= 2
    for request in llm.requests[1:]:
        roles = [m["role"] for m in request.messages]
        assert roles[-3:] == ["assistant", "tool", "tool"], roles
        asked = {c["id"] for m in request.messages for c in m.get("tool_calls") or []}
        assert {m["tool_call_id"] for m in request.messages if m["role"] == "tool"} == asked


# -- registry and package rules ---------------------------------------------------------------------


def test_registry_creates_patterns_by_name() -> None:
    assert {"chain_of_thought", "react"} <= set(pattern_registry.names())
    pattern = pattern_registry.create("react", max_steps=4)
    assert isinstance(pattern, ReAct) and pattern.max_steps == 4
    with pytest.raises(PatternNotFoundError, match=r"no reasoning pattern named 'nope'; registered: .*react"):
        pattern_registry.get("nope")
    with pytest.raises(ConfigurationError, match="already registered"):
        pattern_registry.register("react", ReAct)


def test_patterns_do_not_depend_on_core_or_library() -> None:
    for path in Path(patterns_pkg.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            assert not any(n.startswith(("baf.core", "baf.library")) for n in names), path.name


def test_timeouts_are_finite_by_default() -> None:
    for pattern in (ReAct(), ChainOfThought()):
        assert pattern.step_timeout == 120.0 and pattern.tool_timeout == 60.0
    with pytest.raises(ConfigurationError):
        ReAct(tool_timeout=0)


async def test_a_stuck_tool_without_its_own_timeout_gets_the_tool_timeout() -> None:
    async def stuck(key: str) -> str:
        """Never answers.

        Args:
            key: A key.
        """
        await asyncio.Event().wait()
        return key

    llm = ScriptedLLM([
        ScriptedLLM.tool_call("stuck", {"key": "k"}),
        ScriptedLLM.tool_call("final_answer", {"answer": "gave up on it"}),
    ])  # fmt: skip
    result = await asyncio.wait_for(ReAct(tool_timeout=0.05).execute(llm, "?", tools=[Tool(stuck)]), 5)
    assert result.success and result.output.answer == "gave up on it"
    tool_message = next(m for m in llm.requests[1].messages if m["role"] == "tool")
    assert tool_message["content"] == "Error: tool 'stuck' did not finish within 0.05 seconds."
