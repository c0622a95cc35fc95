"""What a pattern run tells its observer about model calls, and when it skips building that."""

from __future__ import annotations

from typing import Any, ClassVar

from baf import Agent
from baf.library.state.pattern_state import SessionObserver, new_pattern_state
from baf.llm.base import LLMResponse
from baf.reasoning.patterns import LLMCallInfo, PatternStep, ReAct
from baf.reasoning.tool import Tool
from baf.testing import RecordingPlatform, ScriptedLLM


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _llm() -> ScriptedLLM:
    return ScriptedLLM([
        ScriptedLLM.tool_calls([("add", {"a": 2, "b": 3})], text="Add them."),
        ScriptedLLM.tool_call("final_answer", {"answer": "It is 5."}),
    ])  # fmt: skip


class Watcher:
    """A plain observer: every method of the protocol, and what it was given."""

    def __init__(self, observes: bool | None = None) -> None:
        if observes is not None:
            self.observes_llm_calls = observes
        self.before: list[LLMCallInfo] = []
        self.after: list[tuple[LLMCallInfo, LLMResponse]] = []
        self.steps: list[str] = []

    def on_step(self, step: PatternStep) -> None:
        self.steps.append(step.kind)

    async def before_llm_call(self, call: LLMCallInfo) -> None:
        self.before.append(call)

    def after_llm_call(self, call: LLMCallInfo, response: LLMResponse, latency_ms: float) -> None:
        self.after.append((call, response))

    def on_tool_result(self, call_id: str, name: str, content: str, is_error: bool) -> None:
        pass


async def test_an_observer_sees_each_model_call_as_it_was_sent() -> None:
    watcher = Watcher()
    result = await ReAct().execute(_llm(), "2+3?", tools=[Tool(add)], observer=watcher)
    assert result.output.answer == "It is 5."
    calls = [(c.pattern, c.call, c.purpose) for c in watcher.before]
    assert calls == [("react", 1, "thought"), ("react", 2, "thought")]
    assert [call for call, _ in watcher.after] == watcher.before
    # A snapshot: the run appended to its conversation after the first call, the info kept what was sent.
    assert [m["role"] for m in watcher.before[0].messages] == ["user"]
    assert [m["role"] for m in watcher.before[1].messages] == ["user", "assistant", "tool"]
    assert watcher.after[1][1].tool_calls[0].name == "final_answer"


async def test_an_observer_without_model_calls_is_not_told_of_them() -> None:
    watcher = Watcher(observes=False)
    result = await ReAct().execute(_llm(), "2+3?", tools=[Tool(add)], observer=watcher)
    assert result.output.answer == "It is 5."
    assert watcher.before == [] and watcher.after == []
    assert watcher.steps  # steps still come


class CallCounting(SessionObserver):
    """A session observer that also wants the model calls."""

    seen: ClassVar[list[str]] = []

    def after_llm_call(self, call: LLMCallInfo, response: LLMResponse, latency_ms: float) -> None:
        CallCounting.seen.append(call.purpose)


async def test_a_session_observer_observes_model_calls_only_when_a_subclass_overrides_them(
    platform: RecordingPlatform,
) -> None:
    agent = Agent("patterns", log="memory://")
    agent.new_tool(add)
    state = new_pattern_state(agent, _llm(), ReAct())
    state.when_event().go_to(state)
    async with agent:
        session = await agent.get_or_create_session("s", platform)
        assert SessionObserver(session).observes_llm_calls is False
        assert CallCounting(session).observes_llm_calls is True
        CallCounting.seen = []
        pattern: Any = ReAct()
        result = await pattern.execute(_llm(), "2+3?", tools=[Tool(add)], observer=CallCounting(session))
    assert result.output.answer == "It is 5."
    assert CallCounting.seen == ["thought", "thought"]
