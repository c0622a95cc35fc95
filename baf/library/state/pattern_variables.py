"""The session variables a pattern run sets: the names The Edge Agent's ``reason.*`` actions document.

:func:`reasoning_variables` turns a :class:`~baf.reasoning.patterns.ReasoningResult` into

=====================  ====================================================================================
``reasoning_trace``    every step of the run (``{kind, step, summary, details}``, as recorded)
``reasoning_thinking`` the reasoning as text: Chain of Thought's thinking, ReAct's thoughts, the best path of
                       Tree of Thoughts; empty for the other patterns
``reasoning_answer``   the answer (the output's ``answer``, else the output as JSON)
``react_steps``        ReAct's ``{step, thought, action, action_input, observation}`` steps (ReAct only)
``improvement_history`` Reflexion's rounds, ``{round, answer, critique}`` (self-correction only)
=====================  ====================================================================================

``pattern_body(..., export_variables=True)`` sets them after each run; YAML ``reason.*`` actions do.
"""

from __future__ import annotations

import json
from typing import Any

from baf.reasoning.patterns import ReasoningResult, as_text
from baf.reasoning.patterns.models import ChainOfThoughtOutput, ReActOutput, ReflexionOutput, TreeOfThoughtsOutput
from baf.reasoning.patterns.steps import PatternStepKind

__all__ = ["REASONING_VARIABLES", "reasoning_variables"]

#: The variable names, in the order they are set.
REASONING_VARIABLES = ("reasoning_trace", "reasoning_thinking", "reasoning_answer", "react_steps",
                       "improvement_history")  # fmt: skip


def reasoning_variables(result: ReasoningResult[Any]) -> dict[str, Any]:
    """The documented variables for ``result`` (only those that apply to its pattern)."""
    output = result.output
    variables: dict[str, Any] = {
        "reasoning_trace": [_jsonable(step.to_dict()) for step in result.trace],
        "reasoning_thinking": _thinking(output),
        "reasoning_answer": as_text(output),
    }
    if isinstance(output, ReActOutput) or result.pattern == "react":
        variables["react_steps"] = _react_steps(result)
    if isinstance(output, ReflexionOutput):
        variables["improvement_history"] = [
            {"round": number, "answer": r.answer, "critique": r.critique.model_dump(mode="json")}
            for number, r in enumerate(output.rounds, 1)
        ]
    return variables


def _thinking(output: object) -> str:
    if isinstance(output, ChainOfThoughtOutput):
        return output.thinking
    if isinstance(output, ReActOutput):
        return "\n".join(output.reasoning)
    if isinstance(output, TreeOfThoughtsOutput):
        return output.reasoning
    return ""


def _react_steps(result: ReasoningResult[Any]) -> list[dict[str, Any]]:
    """Thought → action → observation triples from the trace; a thought opens a new step."""
    steps: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for step in result.trace:
        details = step.details
        if step.kind == PatternStepKind.THOUGHT or current is None:
            current = {"step": len(steps) + 1, "thought": "", "action": None, "action_input": None,
                       "observation": None}  # fmt: skip
            steps.append(current)
        if step.kind == PatternStepKind.THOUGHT:
            current["thought"] = str(details.get("content", step.summary))
        elif step.kind == PatternStepKind.ACTION:
            current["action"] = details.get("tool")
            current["action_input"] = _arguments(details.get("arguments"))
        elif step.kind == PatternStepKind.OBSERVATION:
            current["observation"] = details.get("result", step.summary)
    return [s for s in steps if s["thought"] or s["action"]]


def _arguments(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw  # the model's arguments as it wrote them, when they are not JSON


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
