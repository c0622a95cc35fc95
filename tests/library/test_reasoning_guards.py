"""What the reasoning state shares with the patterns: a token/cost budget with prices, context
compaction, a typed final answer, an output reviewer, and earlier tool results in memory."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest

from baf import Agent
from baf.library.state.reasoning_guards import plan_compaction
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm.base import LLMResponse, ToolCall, Usage
from baf.log import Record
from baf.reasoning.effects import rebuild_requests
from baf.reasoning.patterns import Budget, ContextCompactor, Price, PriceTable
from baf.reasoning.patterns.compaction import turn_start
from baf.replay import build_timeline
from baf.replay.rerun import assert_replays
from baf.replay.timeline import flatten
from baf.testing import FunctionLLM, RecordingPlatform, ScriptedLLM


def agent_with(llm: Any, ran: list[str], **options: Any) -> Agent:
    agent = Agent("guards", log="memory://")
    state = new_reasoning_state(agent, llm, enable_task_planning=False, **options)
    state.when_event().go_to(state)

    @agent.tool
    def fetch(key: str) -> str:
        """Fetch a value.

        Args:
            key: The key.
        """
        ran.append(key)
        return f"value of {key} " + "." * 400

    return agent


async def converse(agent: Agent, *messages: str) -> tuple[list[Record], RecordingPlatform]:
    platform = RecordingPlatform()
    async with agent:
        for text in messages:
            await agent.receive_message("s", text, platform)
        records = await agent.log.read("s")
    return records, platform


def steps(records: list[Record], kind: str) -> list[dict[str, Any]]:
    return [r.data for r in records if r.kind == "reasoning_step" and r.data["kind"] == kind]


def scratchpad(records: list[Record]) -> dict[str, Any]:
    pads = [r.data["value"] for r in records if r.kind == "variable_set" and r.data["name"] == "reasoning_scratchpad"]
    return pads[-1]  # type: ignore[no-any-return]


PRICES = PriceTable({"priced": Price(input_per_million=1.0, output_per_million=2.0)})


async def test_a_budget_spent_by_a_response_asking_for_parallel_tool_calls_runs_none_of_them() -> None:
    calls = [ToolCall(f"c{i}", "fetch", json.dumps({"key": f"k{i}"})) for i in range(3)]
    llm = ScriptedLLM([LLMResponse(tool_calls=calls, usage=Usage(900, 300))], name="priced")
    ran: list[str] = []
    records, platform = await converse(agent_with(llm, ran, budget=Budget(max_tokens=1000), prices=PRICES), "go")
    assert ran == []  # the calls of the response that spent the budget never ran
    results = [r.data for r in records if r.kind == "tool_result"]
    assert [d["call_id"] for d in results] == ["c0", "c1", "c2"]  # every call has its result: still paired
    assert all(d["is_error"] and "token budget spent: 1200 of 1000 tokens used" in d["content"] for d in results)
    (reply,) = platform.replies["s"]
    assert reply.startswith("I stopped before finishing (token budget spent: 1200 of 1000 tokens used)")
    (finished,) = steps(records, "reasoning_finished")
    assert finished["details"]["outcome"] == "budget"
    assert finished["details"]["usage"] == {"prompt_tokens": 900, "completion_tokens": 300}
    assert finished["details"]["cost"] == (900 * 1.0 + 300 * 2.0) / 1e6
    assert len(steps(records, "budget_spent")) == 1
    assert [e.status for _, e in flatten(build_timeline(records)) if e.title.startswith("budget_spent")] == ["error"]


async def test_a_budget_crossed_between_two_turns_of_parallel_calls_keeps_the_log_paired_and_replayable() -> None:
    def calls(turn: int) -> list[ToolCall]:
        return [ToolCall(f"t{turn}c{i}", "fetch", json.dumps({"key": f"t{turn}k{i}"})) for i in range(3)]

    def build(llm: Any, ran: list[str]) -> Agent:
        return agent_with(llm, ran, budget=Budget(max_tokens=1000), max_parallel_tools=3)

    llm = ScriptedLLM([LLMResponse(tool_calls=calls(1), usage=Usage(400, 100)),
                       LLMResponse(tool_calls=calls(2), usage=Usage(400, 100))])  # fmt: skip
    ran: list[str] = []
    agent = build(llm, ran)
    records, platform = await converse(agent, "go")
    assert sorted(ran) == ["t1k0", "t1k1", "t1k2"]  # the first turn's calls ran together, the second's never
    results = {r.data["call_id"]: r.data for r in records if r.kind == "tool_result"}
    asked = [c["id"] for r in records if r.kind == "llm_response" for c in r.data["tool_calls"]]
    assert sorted(results) == sorted(asked)
    assert [results[f"t2c{i}"]["content"] for i in range(3)] == ["Error: not run (token budget spent: 1000 of "
                                                                "1000 tokens used)."] * 3  # fmt: skip
    assert platform.replies["s"][0].startswith("I stopped before finishing (token budget spent")
    # The stop is decided from recorded usage: a re-run over the log stops at the same point.
    await assert_replays(agent.log, "s", build(ScriptedLLM([]), []))


async def test_cost_is_recorded_per_call_and_per_invocation() -> None:
    llm = ScriptedLLM([LLMResponse(tool_calls=[ToolCall("c1", "fetch", '{"key": "a"}')], usage=Usage(100, 10)),
                       LLMResponse(text="done", usage=Usage(200, 20))], name="priced")  # fmt: skip
    records, _ = await converse(agent_with(llm, [], prices=PRICES, budget=Budget(max_cost=1.0)), "go")
    costs = [r.data["cost"] for r in records if r.kind == "llm_response"]
    assert costs == [(100 + 20) / 1e6, (200 + 40) / 1e6]
    (finished,) = steps(records, "reasoning_finished")
    assert finished["details"]["outcome"] == "answered" and finished["details"]["cost"] == sum(costs)
    pad = scratchpad(records)
    assert pad["cost"] == sum(costs)


def looping_model(rounds: int) -> FunctionLLM:
    """Fetches ``rounds`` pairs of keys, two calls a turn, then answers; summarises when asked to.
    It counts its own turns: compaction takes old tool results out of what it is sent."""
    turns = [0]

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> LLMResponse | str:
        if messages[-1]["role"] == "user" and messages[-1]["content"].startswith("Summarise"):
            return "earlier: fetched some keys"
        turn = turns[0]
        turns[0] += 1
        if turn < rounds:
            return LLMResponse(tool_calls=[ToolCall(f"a{turn}", "fetch", f'{{"key": "a{turn}"}}'),
                                           ToolCall(f"b{turn}", "fetch", f'{{"key": "b{turn}"}}')])  # fmt: skip
        return "all fetched"

    return FunctionLLM(model)


def assert_paired(messages: list[dict[str, Any]]) -> None:
    """Every tool message answers a call of an assistant message before it, and every call is answered."""
    asked: set[str] = set()
    answered: set[str] = set()
    for message in messages:
        for call in message.get("tool_calls") or []:
            asked.add(call["id"])
        if message["role"] == "tool":
            assert message["tool_call_id"] in asked, message
            answered.add(message["tool_call_id"])
    assert asked == answered


async def test_compaction_drops_old_turns_keeping_calls_and_results_paired() -> None:
    compactor = ContextCompactor(max_tokens=600, keep_last=3, mode="drop")
    records, platform = await converse(agent_with(looping_model(4), [], compactor=compactor), "fetch them all")
    assert platform.replies["s"] == ["all fetched"]
    compactions = steps(records, "compaction")
    assert compactions and all(c["details"]["mode"] == "drop" and c["details"]["removed"] > 0 for c in compactions)
    assert all(c["details"]["tokens_after"] < c["details"]["tokens_before"] for c in compactions)
    requests = rebuild_requests(records)
    for request in requests:
        assert_paired(request.messages)
        assert {"role": "user", "content": "fetch them all"} in request.messages  # the request always stays
    assert max(len(r.messages) for r in requests) < 10  # 4 rounds of 3 messages would be 13
    shown = [e.title for _, e in flatten(build_timeline(records))]
    assert any(t.startswith("compaction: compacted") for t in shown), shown


@pytest.mark.parametrize("mode", ["drop", "summarize"])
async def test_a_cut_landing_on_parallel_tool_results_moves_back_to_their_call(mode: str) -> None:
    # Two calls a turn and keep_last=2: the last two messages are always the results of one turn, so a
    # plain "keep the last two" would keep results whose call was compacted away.
    compactor = ContextCompactor(max_tokens=300, keep_last=2, mode=mode)  # type: ignore[arg-type]
    records, platform = await converse(agent_with(looping_model(4), [], compactor=compactor), "fetch them all")
    assert platform.replies["s"] == ["all fetched"]
    assert len(steps(records, "compaction")) >= 2
    requests = [r for r in rebuild_requests(records) if r.messages[-1].get("role") == "tool"]
    assert len(requests) >= 3
    for request in requests:
        assert_paired(request.messages)
        # What was kept of the last turn: its assistant message with both calls, then both results.
        assert [m["role"] for m in request.messages[-3:]] == ["assistant", "tool", "tool"]


def test_one_cut_rule_serves_the_pattern_compactor_and_the_reasoning_state() -> None:
    # A turn of three parallel calls: a cut anywhere in its results moves back to the assistant message.
    task = {"role": "user", "content": "task"}
    calls = {"role": "assistant", "content": None,
             "tool_calls": [{"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}}
                            for i in ("c1", "c2", "c3")]}  # fmt: skip
    results = [{"role": "tool", "tool_call_id": i, "content": "x" * 400} for i in ("c1", "c2", "c3")]
    messages = [task, {"role": "assistant", "content": "a" * 400}, calls, *results]
    assert [turn_start(messages, cut) for cut in range(len(messages))] == [0, 1, 2, 2, 2, 2]
    assert turn_start(messages, 4, floor=3) == 3  # never below the floor, even inside a turn's results
    compactor = ContextCompactor(max_tokens=100, keep_last=2)
    head, old, tail = compactor.split(messages)
    assert (head, old, tail) == ([task], [messages[1]], [calls, *results])
    plan = plan_compaction(compactor, messages, task)
    assert plan is not None and plan.kept_before == [task] and plan.old == [messages[1]]
    assert plan.tail == [calls, *results]
    assert_paired(plan.messages(None))
    assert_paired(head + tail)


async def test_compaction_by_summary_is_a_recorded_model_turn() -> None:
    compactor = ContextCompactor(max_tokens=600, keep_last=3, mode="summarize")
    records, platform = await converse(agent_with(looping_model(3), [], compactor=compactor), "fetch them all")
    assert platform.replies["s"] == ["all fetched"]
    purposes = [r.data.get("purpose") for r in records if r.kind == "llm_request"]
    assert "compaction" in purposes
    after = [r for r in rebuild_requests(records) if any("Summary of" in str(m.get("content")) for m in r.messages)]
    assert after and "earlier: fetched some keys" in str(after[0].messages)
    for request in rebuild_requests(records):
        assert_paired(request.messages)


class Weather(pydantic.BaseModel):
    city: str
    celsius: float


async def test_a_typed_answer_gets_one_repair_turn() -> None:
    llm = ScriptedLLM(['{"city": "Oslo", "celsius": "cold"}', '{"city": "Oslo", "celsius": -3.5}'])
    records, platform = await converse(agent_with(llm, [], output_type=Weather), "weather?")
    assert platform.replies["s"] == ['{"city": "Oslo", "celsius": -3.5}']
    assert "matching this JSON schema" in (llm.requests[0].system_message or "")
    assert "could not be read as Weather" in llm.requests[1].messages[-1]["content"]
    pad = scratchpad(records)
    assert pad["output"] == {"city": "Oslo", "celsius": -3.5} and pad["outcome"] == "answered"
    assert len(steps(records, "output_invalid")) == 1


async def test_a_typed_answer_is_validated_strictly() -> None:
    # A number written as a string would pass pydantic's lax mode; the typed answer is strict.
    llm = ScriptedLLM(['{"city": "Oslo", "celsius": "-3.5"}', '{"city": "Oslo", "celsius": -3.5}'])
    records, platform = await converse(agent_with(llm, [], output_type=Weather), "weather?")
    assert platform.replies["s"] == ['{"city": "Oslo", "celsius": -3.5}']
    (invalid,) = steps(records, "output_invalid")
    assert "celsius" in invalid["details"]["error"]


async def test_a_typed_answer_wrong_twice_ends_with_a_clear_error() -> None:
    llm = ScriptedLLM(["sunny", '{"city": "Oslo"}'])
    records, platform = await converse(agent_with(llm, [], output_type=Weather), "weather?")
    (reply,) = platform.replies["s"]
    assert reply.startswith("Sorry, I could not give the answer in the required form (Weather)")
    errors = [r.data for r in records if r.kind == "error"]
    assert [(e["source"], e["type"]) for e in errors] == [("output", "StructuredOutputError")]
    (finished,) = steps(records, "reasoning_finished")
    assert finished["details"]["outcome"] == "output_error"


async def test_the_reviewer_sends_an_answer_back_until_it_passes() -> None:
    llm = ScriptedLLM(["It is cold.", "It is -3.5 °C in Oslo."])

    def has_number(answer: str) -> str | None:
        return None if any(ch.isdigit() for ch in answer) else "give the temperature as a number"

    records, platform = await converse(agent_with(llm, [], reviewer=has_number), "weather?")
    assert platform.replies["s"] == ["It is -3.5 °C in Oslo."]
    assert "give the temperature as a number" in llm.requests[1].messages[-1]["content"]
    assert [s["details"]["passed"] for s in steps(records, "review")] == [False, True]


async def test_a_reviewer_that_never_passes_keeps_the_last_answer() -> None:
    llm = ScriptedLLM(["a", "b"])
    records, platform = await converse(agent_with(llm, [], reviewer=lambda answer: "no", review_retries=1), "q")
    assert platform.replies["s"] == ["b"]
    (finished,) = steps(records, "reasoning_finished")
    assert finished["details"]["outcome"] == "review_failed"


def remembering_model() -> FunctionLLM:
    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> LLMResponse | str:
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        if not any(m["role"] == "tool" for m in messages[last_user:]) and messages[last_user]["content"] == "first":
            return LLMResponse(tool_calls=[ToolCall("c1", "fetch", '{"key": "secret-sauce"}')])
        return "ok"

    return FunctionLLM(model)


async def test_earlier_tool_results_are_in_memory_when_asked_for() -> None:
    llm = remembering_model()
    records, _ = await converse(agent_with(llm, [], memory_tool_results=True), "first", "second")
    assert any(r.kind == "variable_set" and r.data["name"] == "reasoning_tool_memory" for r in records)
    second = llm.requests[-1].messages
    assert [m["role"] for m in second] == ["user", "assistant", "tool", "assistant", "user"]
    assert second[2]["content"].startswith("value of secret-sauce")
    assert_paired(second)

    plain = remembering_model()
    await converse(agent_with(plain, []), "first", "second")
    assert [m["role"] for m in plain.requests[-1].messages] == ["user", "assistant", "user"]


async def test_a_pattern_whose_budget_is_spent_by_parallel_calls_records_them_as_not_run() -> None:
    from baf.library.state.pattern_state import new_pattern_state
    from baf.reasoning.patterns import ReAct

    calls = [ToolCall(f"c{i}", "fetch", json.dumps({"key": f"k{i}"})) for i in range(3)]
    llm = ScriptedLLM([LLMResponse(tool_calls=calls, usage=Usage(900, 300))])
    agent = Agent("guards", log="memory://")
    ran: list[str] = []

    @agent.tool
    def fetch(key: str) -> str:
        """Fetch a value.

        Args:
            key: The key.
        """
        ran.append(key)
        return key

    state = new_pattern_state(agent, llm, ReAct(budget=Budget(max_tokens=1000), max_parallel_tools=3))
    state.when_event().go_to(state)
    records, _ = await converse(agent, "go")
    assert ran == []
    results = [r.data for r in records if r.kind == "tool_result"]
    assert [d["call_id"] for d in results] == ["c0", "c1", "c2"] and all(d["is_error"] for d in results)
    (finished,) = steps(records, "reasoning_finished")
    assert finished["details"]["outcome"] == "budget"
