"""The reasoning loop's behaviour as the user sees it: replies, the step stream, the task list."""

from __future__ import annotations

from typing import Any

from baf import Agent, Session
from baf.errors import LLMStatusError
from baf.library.state.reasoning_state_library import (
    DEFAULT_FALLBACK_MESSAGE,
    ReasoningStep,
    ReasoningStepKind,
    new_reasoning_state,
)
from baf.llm.base import LLMResponse, ToolCall
from baf.testing import FunctionLLM, RecordingPlatform, ScriptedLLM

from .helpers import normalized_events, reasoning_agent, records_of, streamed_kinds, tool_messages, trail

FINAL = "Sunny in Paris (21 C). I could not book a table: I have no booking tool."


def weather(city: str, unit: str | None = None) -> str:
    """The current weather in a city.

    Args:
        city: The city.
        unit: "C" or "F"; Celsius when left out.
    """
    return f"sunny, 21 {unit or 'C'} in {city}"


def planned_conversation() -> ScriptedLLM:
    """plan (2 tasks) → a tool → a premature answer → (push-back) → complete 1 + skip 2 → final answer."""
    return ScriptedLLM([
        ScriptedLLM.tool_call("add_tasks", {"descriptions": ["Check the weather in Paris", "Book a table"]}),
        ScriptedLLM.tool_call("weather", {"city": "Paris"}),
        "It is sunny in Paris.",
        ScriptedLLM.tool_calls([
            ("complete_task", {"task_id": 1, "result": "sunny, 21 C"}),
            ("skip_task", {"task_id": 2, "reason": "no booking tool"}),
        ]),
        FINAL,
    ])  # fmt: skip


async def test_simple_request_is_answered_directly(log_url: str, platform: RecordingPlatform) -> None:
    llm = ScriptedLLM(["Hello! How can I help?"])
    agent, _ = reasoning_agent(llm, log_url)
    async with agent:
        # The reasoning state is the initial state: entering it at session start has no message to
        # answer, so the model is not called and no trace is opened.
        await agent.get_or_create_session("s", platform)
        await agent.wait_idle("s")
        assert llm.calls == 0
        assert platform.events == []
        assert [r.kind for r in await records_of(agent, "s")] == ["session_started", "step_started", "step_finished"]

        await agent.receive_message("s", "hi", platform)
        records = await records_of(agent, "s")

    assert llm.calls == 1
    assert platform.replies["s"] == ["Hello! How can I help?"]
    assert streamed_kinds(platform, "s") == ["reasoning_started", "llm_text", "reasoning_finished"]
    final = platform.steps["s"][1]
    assert final.details == {"text": "Hello! How can I help?", "final": True}
    assert platform.steps["s"][2].details == {"outcome": "answered", "steps": 1}
    after_message = records[[r.kind for r in records].index("message_received") :]
    assert trail(after_message) == [
        "message_received", "step_started", "transition", "step:reasoning_started", "llm_request",
        "llm_response", "step:llm_text", "reply", "step:reasoning_finished", "variable_set", "step_finished",
    ]  # fmt: skip
    assert [r.data for r in records if r.kind == "reasoning_step"] == [s.to_dict() for s in platform.steps["s"]]
    # No planning happened, so the task panel is never updated.
    assert platform.task_lists["s"] == []


async def test_plan_tools_pushback_skip_answer_exact_order(log_url: str, platform: RecordingPlatform) -> None:
    llm = planned_conversation()
    agent, _ = reasoning_agent(llm, log_url)
    agent.add_tool(weather)
    async with agent:
        await agent.receive_message("s", "Weather in Paris, and book me a table?", platform)
        records = await records_of(agent, "s")

    assert llm.remaining == 0
    assert platform.replies["s"] == [FINAL]
    # Steps, task-panel updates and the reply, exactly as the platform received them.
    assert normalized_events(platform, "s") == [
        ("step", "reasoning_started", 0),
        ("step", "llm_tool_calls", 0),
        ("step", "task_added", 0),
        ("step", "task_added", 0),
        ("tasks", [(1, "in_progress"), (2, "pending")]),
        ("step", "llm_tool_calls", 1),
        ("step", "tool_result", 1),
        ("step", "llm_text", 2),
        ("step", "pushback", 2),
        ("step", "llm_tool_calls", 3),
        ("step", "task_completed", 3),
        ("tasks", [(1, "completed"), (2, "in_progress")]),
        ("step", "task_skipped", 3),
        ("tasks", [(1, "completed"), (2, "skipped")]),
        ("step", "llm_text", 4),
        ("reply", FINAL),
        ("step", "reasoning_finished", 4),
    ]
    steps: list[ReasoningStep] = platform.steps["s"]
    assert steps[6].details == {"text": "It is sunny in Paris.", "final": False}
    assert [t["id"] for t in steps[7].details["pending"]] == [1, 2]
    assert steps[-2].details == {"text": FINAL, "final": True}
    assert steps[-1].details == {"outcome": "answered", "steps": 5}
    assert steps[5].details["result"] == "sunny, 21 C in Paris" and steps[5].details["is_error"] is False
    assert platform.task_lists["s"][-1] == [
        {"id": 1, "description": "Check the weather in Paris", "status": "completed", "result": "sunny, 21 C"},
        {"id": 2, "description": "Book a table", "status": "skipped", "result": "no booking tool"},
    ]

    # The log holds the same steps and snapshots, each recorded before it was streamed, in this order.
    assert [r.data for r in records if r.kind == "reasoning_step"] == [s.to_dict() for s in steps]
    assert [r.data["tasks"] for r in records if r.kind == "task_list"] == platform.task_lists["s"]
    start = [r.kind for r in records].index("message_received")
    assert trail(records[start:]) == [
        "message_received", "step_started", "transition", "step:reasoning_started",
        "llm_request", "llm_response", "step:llm_tool_calls",
        "tool_result", "step:task_added", "step:task_added", "task_list",
        "llm_request", "llm_response", "step:llm_tool_calls", "tool_result", "step:tool_result",
        "llm_request", "llm_response", "step:llm_text", "step:pushback",
        "llm_request", "llm_response", "step:llm_tool_calls",
        "tool_result", "step:task_completed", "task_list", "tool_result", "step:task_skipped", "task_list",
        "llm_request", "llm_response", "step:llm_text", "reply", "step:reasoning_finished",
        "variable_set", "step_finished",
    ]  # fmt: skip

    # The model saw its refused answer and the push-back naming the open tasks.
    pushed = llm.requests[3].messages
    assert pushed[-2] == {"role": "assistant", "content": "It is sunny in Paris."}
    assert pushed[-1]["role"] == "system"
    assert "not accepted" in pushed[-1]["content"]
    assert "1. Check the weather in Paris (in_progress)" in pushed[-1]["content"]
    assert "2. Book a table (pending)" in pushed[-1]["content"]
    assert [m["content"] for m in tool_messages(llm.requests[4])][-2:] == ["Task 1 completed.", "Task 2 skipped."]


async def test_scratchpad_holds_final_tasks_and_trace(log_url: str, platform: RecordingPlatform) -> None:
    agent, _ = reasoning_agent(planned_conversation(), log_url)
    agent.add_tool(weather)
    async with agent:
        session = await agent.receive_message("s", "Weather in Paris, and book me a table?", platform)
        scratchpad = session["reasoning_scratchpad"]
    assert scratchpad["request"] == "Weather in Paris, and book me a table?"
    assert scratchpad["outcome"] == "answered"
    assert [(t["id"], t["status"], t["result"]) for t in scratchpad["tasks"]] == [
        (1, "completed", "sunny, 21 C"),
        (2, "skipped", "no booking tool"),
    ]
    assert scratchpad["trace"] == [step.to_dict() for step in platform.steps["s"]]
    assert scratchpad["trace"][-1]["kind"] == ReasoningStepKind.REASONING_FINISHED


async def test_without_task_planning_first_text_wins(platform: RecordingPlatform) -> None:
    llm = ScriptedLLM([
        # Planning tools do not exist in a pure ReAct loop: a call to one is an unknown tool.
        ScriptedLLM.tool_call("add_tasks", {"descriptions": ["a", "b"]}),
        "Here is my answer.",
    ])  # fmt: skip
    agent, _ = reasoning_agent(llm, enable_task_planning=False)
    agent.add_tool(weather)
    async with agent:
        session = await agent.receive_message("s", "Plan something", platform)
    assert llm.remaining == 0
    assert platform.replies["s"] == ["Here is my answer."]
    for request in llm.requests:
        assert request.tool_names == ["weather"]
        assert request.system_message is not None
        assert "Task planning" not in request.system_message
        assert "task list" not in request.system_message.lower()
    assert "there is no tool named 'add_tasks'" in tool_messages(llm.requests[1])[0]["content"]
    assert streamed_kinds(platform, "s") == [
        "reasoning_started", "llm_tool_calls", "tool_result", "llm_text", "reasoning_finished",
    ]  # fmt: skip
    assert platform.task_lists["s"] == []
    assert session["reasoning_scratchpad"]["tasks"] == []


async def test_planning_tools_are_offered_with_planning(platform: RecordingPlatform) -> None:
    llm = ScriptedLLM(["ok"])
    agent, _ = reasoning_agent(llm)
    agent.add_tool(weather)
    async with agent:
        await agent.receive_message("s", "hi", platform)
    assert llm.requests[0].tool_names == ["weather", "add_tasks", "complete_task", "skip_task"]


async def test_max_steps_exhausted_sends_the_fallback(log_url: str, platform: RecordingPlatform) -> None:
    llm = FunctionLLM(lambda messages, tools, **_: ScriptedLLM.tool_call("weather", {"city": "Rome"}))
    agent, _ = reasoning_agent(llm, log_url, max_steps=3)
    agent.add_tool(weather)
    async with agent:
        session = await agent.receive_message("s", "weather forever", platform)
    assert llm.calls == 3
    assert platform.replies["s"] == [DEFAULT_FALLBACK_MESSAGE]
    assert streamed_kinds(platform, "s") == [
        "reasoning_started",
        "llm_tool_calls", "tool_result",
        "llm_tool_calls", "tool_result",
        "llm_tool_calls", "tool_result",
        "max_steps", "reasoning_finished",
    ]  # fmt: skip
    max_steps = platform.steps["s"][-2]
    assert max_steps.step == 2 and max_steps.details == {"max_steps": 3}
    assert platform.steps["s"][-1].details["outcome"] == "max_steps"
    assert session["reasoning_scratchpad"]["outcome"] == "max_steps"
    assert [kind for _, kind, _ in platform.events][-3:] == ["step", "reply", "step"]


async def test_max_steps_with_open_tasks_and_custom_fallback(platform: RecordingPlatform) -> None:
    """A model that keeps answering while a task is open is pushed back until the budget runs out."""
    llm = ScriptedLLM([
        ScriptedLLM.tool_call("add_tasks", {"descriptions": ["Do the thing"]}),
        "Done!",
        "Really done!",
    ])  # fmt: skip
    agent, _ = reasoning_agent(llm, max_steps=3, fallback_message="Out of steps.")
    async with agent:
        await agent.receive_message("s", "do it", platform)
    assert platform.replies["s"] == ["Out of steps."]
    assert streamed_kinds(platform, "s") == [
        "reasoning_started", "llm_tool_calls", "task_added",
        "llm_text", "pushback", "llm_text", "pushback", "max_steps", "reasoning_finished",
    ]  # fmt: skip


async def test_empty_model_reply_is_nudged_not_sent(platform: RecordingPlatform) -> None:
    llm = ScriptedLLM([LLMResponse(text="   "), "Now with words."])
    agent, _ = reasoning_agent(llm)
    async with agent:
        await agent.receive_message("s", "hi", platform)
    assert platform.replies["s"] == ["Now with words."]
    assert llm.requests[1].messages[-1]["role"] == "system"
    assert "empty" in llm.requests[1].messages[-1]["content"]


async def test_llm_failure_tells_the_user_and_the_session_goes_on(log_url: str, platform: RecordingPlatform) -> None:
    llm = ScriptedLLM([LLMStatusError("server said 503 Service Unavailable", 503), "Back again."])
    agent, _ = reasoning_agent(llm, log_url)
    async with agent:
        await agent.receive_message("s", "first", platform)
        session = await agent.receive_message("s", "second", platform)
        errors = await records_of(agent, "s", "error")
    first_reply, second_reply = platform.replies["s"]
    assert "could not get an answer from the language model" in first_reply
    assert "503 Service Unavailable" in first_reply
    assert second_reply == "Back again."
    assert len(errors) == 1
    assert errors[0].data["source"] == "llm"
    assert errors[0].data["type"] == "LLMStatusError"
    assert errors[0].data["model"] == "scripted"
    finished = [s for s in platform.steps["s"] if s.kind == ReasoningStepKind.REASONING_FINISHED]
    assert [s.details["outcome"] for s in finished] == ["llm_error", "answered"]
    assert session["reasoning_scratchpad"]["outcome"] == "answered"
    # The failed exchange is part of the conversation the model sees next time.
    assert llm.requests[1].messages[-2] == {"role": "assistant", "content": first_reply}


async def test_an_exhausted_test_script_is_not_turned_into_an_outage(platform: RecordingPlatform) -> None:
    """A too-short script is a broken test: it must not be reported to the user as a model outage."""
    llm = ScriptedLLM([])
    agent, _ = reasoning_agent(llm)
    async with agent:
        await agent.receive_message("s", "hi", platform)
        errors = await records_of(agent, "s", "error")
    assert platform.replies["s"] == []
    assert [(e.data["source"], e.data["type"]) for e in errors] == [("body", "ScriptExhaustedError")]


class PlainPlatform:
    """A platform that can only send text: no streaming methods at all."""

    name = "plain"

    def __init__(self) -> None:
        self.replies: list[str] = []

    async def reply(self, session: Session, message: str) -> None:
        self.replies.append(message)


class BrokenStreamingPlatform(RecordingPlatform):
    """Streaming methods that always raise."""

    async def reply_reasoning_step(self, session: Session, step: Any) -> None:
        raise RuntimeError("UI crashed on a step")

    async def reply_task_list_update(self, session: Session, tasks: list[dict[str, Any]]) -> None:
        raise RuntimeError("UI crashed on the task panel")


async def test_platform_without_streaming_methods_still_gets_the_answer() -> None:
    platform = PlainPlatform()
    agent, _ = reasoning_agent(planned_conversation())
    agent.add_tool(weather)
    async with agent:
        await agent.receive_message("s", "Weather in Paris, and book me a table?", platform)  # type: ignore[arg-type]
        errors = await records_of(agent, "s", "error")
        steps = await records_of(agent, "s", "reasoning_step")
    assert platform.replies == [FINAL]
    assert errors == []
    assert len(steps) == 13  # still recorded, just not streamed


async def test_platform_whose_streaming_raises_never_breaks_the_loop(log_url: str) -> None:
    platform = BrokenStreamingPlatform()
    agent, _ = reasoning_agent(planned_conversation(), log_url)
    agent.add_tool(weather)
    async with agent:
        await agent.receive_message("s", "Weather in Paris, and book me a table?", platform)
        errors = await records_of(agent, "s", "error")
    assert platform.replies["s"] == [FINAL]
    # Each failed delivery is recorded (13 steps, 3 task-list updates) and contained.
    assert len(errors) == 16
    assert {e.data["source"] for e in errors} == {"platform"}
    assert {e.data["message"] for e in errors} == {"UI crashed on a step", "UI crashed on the task panel"}


async def test_stream_steps_off_records_but_does_not_stream(platform: RecordingPlatform) -> None:
    agent, _ = reasoning_agent(planned_conversation(), stream_steps=False)
    agent.add_tool(weather)
    async with agent:
        await agent.receive_message("s", "Weather in Paris, and book me a table?", platform)
        steps = await records_of(agent, "s", "reasoning_step")
        task_lists = await records_of(agent, "s", "task_list")
    assert platform.replies["s"] == [FINAL]
    assert platform.steps["s"] == [] and platform.task_lists["s"] == []
    assert len(steps) == 13
    # The records say they were not shown: a worker following the session does not show them either.
    assert {step.data.get("streamed") for step in steps} == {False}
    assert [r.data.get("streamed") for r in task_lists] == [False] * 3


async def test_reasoning_state_reached_by_a_transition_answers_the_message(platform: RecordingPlatform) -> None:
    """Not initial, reached from another state on a message: it answers that message."""
    llm = ScriptedLLM(["answered"])
    agent = Agent("a", log="memory://")
    idle = agent.new_state("idle", initial=True)
    thinking = new_reasoning_state(agent, llm, name="thinking", initial=False)
    idle.when_event().go_to(thinking)
    thinking.when_event().go_to(thinking)
    async with agent:
        session = await agent.receive_message("s", "question", platform)
    assert session.current_state.name == "thinking"
    assert platform.replies["s"] == ["answered"]
    assert llm.requests[0].messages == [{"role": "user", "content": "question"}]


async def test_tool_call_ids_from_the_model_are_kept(platform: RecordingPlatform) -> None:
    llm = ScriptedLLM([
        LLMResponse(text="Let me look.", tool_calls=[ToolCall("abc-1", "weather", '{"city": "Oslo"}')]),
        "Cold.",
    ])  # fmt: skip
    agent, _ = reasoning_agent(llm)
    agent.add_tool(weather)
    async with agent:
        await agent.receive_message("s", "Oslo?", platform)
    assistant, result = llm.requests[1].messages[-2:]
    assert assistant["content"] == "Let me look."
    assert assistant["tool_calls"][0]["id"] == "abc-1"
    assert result == {"role": "tool", "tool_call_id": "abc-1", "content": "sunny, 21 C in Oslo"}
    assert platform.steps["s"][1].details["text"] == "Let me look."
