"""The small parts of the reasoning state: tasks, steps, and the state factory."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from baf import Agent
from baf.library.state.reasoning_state_library import (
    ReasoningStep,
    ReasoningStepKind,
    TaskList,
    new_reasoning_state,
    reasoning_body,
)
from baf.testing import ScriptedLLM


def test_task_list_marks_the_first_open_task_in_progress() -> None:
    tasks = TaskList()
    assert tasks.all_resolved() and tasks.to_prompt() == "No tasks yet."
    one, two = tasks.add("one"), tasks.add("two")
    assert (one.id, one.status, two.id, two.status) == (1, "in_progress", 2, "pending")
    assert not tasks.all_resolved()
    tasks.update(1, "completed", "did it")
    assert two.status == "in_progress" and [t.id for t in tasks.pending()] == [2]
    tasks.update(2, "skipped", "not needed")
    assert tasks.all_resolved() and tasks.pending() == []
    assert tasks.to_prompt() == "- [x] 1. one (completed) — did it\n- [-] 2. two (skipped) — not needed"
    assert tasks.get(3) is None
    assert TaskList.from_snapshot(tasks.snapshot()).to_dict() == tasks.to_dict()
    with pytest.raises(ValueError, match="unknown task status 'done'"):
        tasks.update(1, "done")
    with pytest.raises(KeyError):
        tasks.update(9, "completed")


def test_reasoning_step_round_trips() -> None:
    step = ReasoningStep(ReasoningStepKind.TOOL_RESULT, 2, "weather returned", {"is_error": False})
    assert step.to_dict() == {"kind": "tool_result", "step": 2, "summary": "weather returned",
                              "details": {"is_error": False}}  # fmt: skip
    assert ReasoningStep.from_dict(step.to_dict()) == step
    assert ReasoningStep("llm_text", 0, "hi").details == {}


def test_new_reasoning_state_follows_the_documented_signature() -> None:
    parameters = list(inspect.signature(new_reasoning_state).parameters)
    assert parameters[:9] == [
        "agent", "llm", "name", "initial", "max_steps", "system_prompt", "fallback_message",
        "enable_task_planning", "stream_steps",
    ]  # fmt: skip
    agent = Agent("a", log="memory://")
    state = new_reasoning_state(agent, ScriptedLLM([]), "thinker", True, 3)
    assert agent.initial_state is state and state.name == "thinker"
    assert state.transitions == []  # wiring is left to the caller


def test_bad_max_steps_is_refused_before_a_state_is_created() -> None:
    agent = Agent("a", log="memory://")
    with pytest.raises(ValueError, match="max_steps must be at least 1"):
        new_reasoning_state(agent, ScriptedLLM([]), max_steps=0)
    assert agent.states == []
    bad: list[tuple[str, dict[str, Any]]] = [
        ("max_parallel_tools", {"max_parallel_tools": 0}),
        ("max_tool_output", {"max_tool_output": 0}),
        ("tool_timeout", {"tool_timeout": 0}),
        ("memory", {"memory": -1}),
    ]
    for option, kwargs in bad:
        with pytest.raises(ValueError, match=option):
            reasoning_body(ScriptedLLM([]), **kwargs)
    with pytest.raises(TypeError):
        reasoning_body(ScriptedLLM([]), no_such_option=1)  # type: ignore[call-arg]
