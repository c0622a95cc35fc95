"""Plan-and-Execute, Reflexion, Tree of Thoughts, Goal Decomposition and pipelines."""

from __future__ import annotations

from typing import Any

import pytest

from baf.errors import LLMStatusError, StructuredOutputError
from baf.reasoning.patterns import (
    ChainOfThought,
    GoalDecomposition,
    PlanAndExecute,
    ReAct,
    ReasoningPipeline,
    Reflexion,
    StopReason,
    TreeOfThoughts,
    pattern_registry,
)
from baf.reasoning.patterns.models import Critique, StepStatus
from baf.reasoning.patterns.structured import parse_structured
from baf.testing import FunctionLLM, ScriptedLLM

from .helpers import js

PLAN = js(goal="g", steps=[
    {"id": "s1", "description": "gather"},
    {"id": "s2", "description": "analyse", "dependencies": ["s1"]},
    {"id": "s3", "description": "report", "dependencies": ["s2"]},
    {"id": "s4", "description": "independent note"},
])  # fmt: skip


async def test_plan_and_execute_runs_steps_in_dependency_order() -> None:
    plan = js(goal="g", steps=[
        {"id": "b", "description": "second", "dependencies": ["a"]}, {"id": "a", "description": "first"},
    ])  # fmt: skip
    llm = ScriptedLLM([plan, js(success=True, output="A done"), js(success=True, output="B done")])
    result = await PlanAndExecute().execute(llm, "g")
    assert result.success and result.output is not None
    assert [(s.id, s.status) for s in result.output.steps] == [("b", StepStatus.COMPLETED), ("a", StepStatus.COMPLETED)]
    assert "carry out this step: first" in llm.requests[1].messages[0]["content"].lower()
    assert "A done" in llm.requests[2].messages[0]["content"]  # a dependency's result is passed on
    assert result.output.answer == "B done" and result.steps_taken == 3


async def test_failed_step_without_replan_skips_its_dependents_and_keeps_the_rest() -> None:
    llm = ScriptedLLM([PLAN, js(success=True, output="data"), js(success=False, error="no access"),
                       js(success=True, output="note")])  # fmt: skip
    result = await PlanAndExecute().execute(llm, "g")
    assert not result.success and result.stop_reason == StopReason.STEP_FAILED
    assert result.output is not None
    status = {s.id: s.status for s in result.output.steps}
    assert status == {"s1": "completed", "s2": "failed", "s3": "skipped", "s4": "completed"}
    assert result.output.steps[0].output == "data"  # completed work is kept


async def test_failed_step_with_replan_keeps_completed_work() -> None:
    revised = js(goal="g", steps=[
        {"id": "s1", "description": "REWRITTEN, must not run again"},
        {"id": "s2b", "description": "analyse another way", "dependencies": ["s1"]},
        {"id": "s3", "description": "report", "dependencies": ["s2b"]},
    ])  # fmt: skip
    llm = ScriptedLLM([PLAN, js(success=True, output="data"), LLMStatusError("overloaded", 503), revised,
                       js(success=True, output="analysis"), js(success=True, output="report")])  # fmt: skip
    result = await PlanAndExecute(allow_replan=True).execute(llm, "g")
    assert result.success and result.output is not None and result.output.replans == 1
    steps = {s.id: s for s in result.output.steps}
    assert steps["s1"].output == "data" and steps["s1"].description == "gather"
    assert steps["s2b"].status is StepStatus.COMPLETED and result.output.answer == "report"
    assert "gather): data" in llm.requests[3].messages[0]["content"]  # the replan sees completed work
    assert "s4" not in steps and llm.remaining == 0


async def test_critic_that_never_approves_ends_with_the_best_answer() -> None:
    def critique(score: float) -> str:
        return js(satisfactory=False, issues=["too vague"], suggestions=["add numbers"], score=score)

    writer = ScriptedLLM(["draft 1", "draft 2", "draft 3"])
    critic = ScriptedLLM([critique(0.4), critique(0.7), critique(0.5)], name="critic")
    result = await Reflexion(max_rounds=3, critic=critic).execute(writer, "write a summary")
    assert not result.success and result.stop_reason == StopReason.NOT_APPROVED
    assert result.output is not None and result.output.answer == "draft 2" and len(result.output.rounds) == 3
    assert writer.calls == 3 and critic.calls == 3
    assert "too vague" in writer.requests[1].messages[0]["content"]


async def test_reflexion_stops_when_approved() -> None:
    llm = ScriptedLLM(["v1", js(satisfactory=False, issues=["typo"]), "v2", js(satisfactory=True)])
    result = await Reflexion().execute(llm, "t")
    assert result.success and result.output is not None and result.output.answer == "v2"
    assert [s.kind for s in result.trace] == ["thought", "reflection", "thought", "reflection", "llm_text"]


async def test_tree_of_thoughts_selects_and_expands_the_best_branch() -> None:
    llm = ScriptedLLM([
        js(branches=["A", "B", "C"]), js(score=0.3), js(score=0.8, reasoning="solid"), js(score=0.5),
        js(branches=["B1", "B2", "B3"]), js(score=0.6), js(score=0.9), js(score=0.2),
    ])  # fmt: skip
    result = await TreeOfThoughts(branching_factor=3, max_depth=2).execute(llm, "design an API")
    assert result.success and result.output is not None
    assert result.output.answer == "B2" and [b.thought for b in result.output.path] == ["B", "B2"]
    assert "B" in llm.requests[4].messages[0]["content"] and llm.calls == 8  # depth × (1 + branching)


async def test_tree_of_thoughts_depth_guard_and_early_stop() -> None:
    llm = FunctionLLM(lambda messages, tools, **_: js(branches=["x"]) if "Propose" in messages[0]["content"]
                      else js(score=0.5 + 0.1 * len(messages[0]["content"]) % 0.4))  # fmt: skip
    result = await TreeOfThoughts(branching_factor=1, max_depth=3).execute(llm, "p")
    assert llm.calls <= 6 and result.output is not None  # never deeper than max_depth levels


async def test_goal_decomposition_recurses_to_max_depth_and_synthesises() -> None:
    def model(messages: list[dict[str, Any]], tools: Any, **_: Any) -> str:
        prompt = messages[0]["content"]
        if prompt.startswith("Goal:") and "Break the goal" in prompt:
            # Every goal claims a complex task: only max_depth stops the recursion.
            return js(goal="g", phases=[{"name": "p", "tasks": [{"description": "deeper", "complex": True}, "simple"]}])
        if "Combine them" in prompt:
            return "synthesised"
        return "done"

    llm = FunctionLLM(model)
    result = await GoalDecomposition(max_depth=2).execute(llm, "big goal")
    assert result.success and result.output is not None and result.output.answer == "synthesised"
    deeper = result.output.phases[0].tasks[0]
    assert deeper.subgoal is not None and deeper.subgoal.phases[0].tasks[0].subgoal is None  # stopped at depth 2
    # level 1: decompose + (level 2: decompose + 2 tasks + synthesis) + 1 task + synthesis
    assert llm.calls == 1 + 4 + 1 + 1


async def test_goal_decomposition_plans_empty_phases_and_delegates_tasks() -> None:
    llm = ScriptedLLM([
        js(goal="g", phases=[{"name": "only", "tasks": []}]), js(tasks=["t1"]),
        ScriptedLLM.tool_call("final_answer", {"answer": "t1 via react"}), "all done",
    ])  # fmt: skip
    result = await GoalDecomposition(task_pattern=ReAct(max_steps=2)).execute(llm, "g")
    assert result.output is not None and result.output.phases[0].tasks[0].answer == "t1 via react"
    assert any(s.details["pattern"] == "react" and s.details["depth"] == 1 for s in result.trace)


async def test_pipeline_of_three_patterns_chains_outputs_and_adds_up() -> None:
    llm = ScriptedLLM([
        js(content="think", is_final=True, final_answer="draft answer"),
        js(branches=["polished answer"]), js(score=0.97),
        "final text", js(satisfactory=True),
    ])  # fmt: skip
    pipeline = ReasoningPipeline([ChainOfThought(), TreeOfThoughts(branching_factor=1), Reflexion()])
    result = await pipeline.execute(llm, "question")
    assert result.success and result.output is not None and result.output.answer == "final text"
    assert "draft answer" in llm.requests[1].messages[0]["content"]
    assert "polished answer" in llm.requests[3].messages[0]["content"]
    assert len(result.calls) == 5 and result.steps_taken == 3
    assert {s.details["pattern"] for s in result.trace} == {"pipeline", "chain_of_thought", "tree_of_thoughts",
                                                             "reflexion"}  # fmt: skip


async def test_pipeline_stops_at_a_failing_stage() -> None:
    llm = ScriptedLLM([js(content="a"), js(content="b")])
    pipeline = ReasoningPipeline([ChainOfThought(max_steps=2), Reflexion()])
    result = await pipeline.execute(llm, "q")
    assert not result.success and result.stop_reason == StopReason.MAX_STEPS and llm.calls == 2


def test_every_built_in_pattern_is_registered() -> None:
    assert set(pattern_registry.names()) >= {
        "chain_of_thought", "react", "plan_and_execute", "reflexion", "tree_of_thoughts", "goal_decomposition",
        "pipeline",
    }  # fmt: skip
    assert isinstance(pattern_registry.create("tree_of_thoughts", branching_factor=2), TreeOfThoughts)


def test_a_malformed_answer_does_not_yield_one_of_its_nested_objects() -> None:
    with pytest.raises(StructuredOutputError):
        parse_structured('Result: {"x": {"satisfactory": true}, }', Critique)
    # a later, separate object after the malformed one is still found
    assert parse_structured('{"x": {"a": 1}, } then {"satisfactory": true}', Critique).satisfactory is True


def test_values_are_not_coerced() -> None:
    with pytest.raises(StructuredOutputError):
        parse_structured('{"satisfactory": "yes"}', Critique)
    with pytest.raises(StructuredOutputError):
        parse_structured('Verdict: {"satisfactory": "true", "score": "0.5"}', Critique)
    assert parse_structured('{"satisfactory": false, "score": 1}', Critique).score == 1.0
