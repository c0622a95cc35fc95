"""TEA-style ``reason.*`` actions: a state body that runs a pattern of the catalogue on a templated input.

Each action builds the pattern from its ``with`` inputs (``baf.declarative.models``) and runs it with
``pattern_body(pattern, llm, request=..., reply=False, export_variables=True)``: every step is recorded
and streamed like any pattern state's, and the run sets the variables The Edge Agent documents
(``reasoning_trace``, ``reasoning_thinking``, ``reasoning_answer``, ``react_steps``,
``improvement_history``; see ``baf.library.state.pattern_variables``). A later ``reply`` template (or
a later state) shows the answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from baf.declarative.models import (
    CoTInputs,
    DecomposeInputs,
    PlanExecuteInputs,
    ReActInputs,
    SelfCorrectInputs,
    TreeOfThoughtsInputs,
    _ActionInputs,
)
from baf.declarative.templates import CompiledTemplate
from baf.errors import ConfigurationError
from baf.library.state.pattern_state import pattern_body
from baf.llm.base import LLM
from baf.reasoning.patterns import (
    ChainOfThought,
    GoalDecomposition,
    PlanAndExecute,
    ReAct,
    ReasoningPattern,
    Reflexion,
    TreeOfThoughts,
)
from baf.reasoning.tool import Tool

if TYPE_CHECKING:
    from baf.core.agent import Agent
    from baf.core.session import Session

__all__ = ["action_body", "action_pattern"]


def action_pattern(action: str, inputs: _ActionInputs, critic: LLM | None = None) -> ReasoningPattern[Any]:
    """The pattern an action runs, built from its inputs."""
    common: dict[str, Any] = {"prompts": inputs.prompts or None, "native_structured": inputs.native_structured}
    if inputs.max_steps is not None:
        common["max_steps"] = inputs.max_steps
    if inputs.step_timeout is not None:
        common["step_timeout"] = inputs.step_timeout
    if isinstance(inputs, CoTInputs):
        examples = [example.model_dump() for example in inputs.few_shot_examples]
        return ChainOfThought(thinking_format=inputs.thinking_format, few_shot=examples, **common)
    if isinstance(inputs, ReActInputs):
        return ReAct(termination=inputs.termination, **common)
    if isinstance(inputs, SelfCorrectInputs):
        return Reflexion(max_rounds=inputs.improvement_rounds, critic=critic, **common)
    if isinstance(inputs, DecomposeInputs):
        return GoalDecomposition(max_depth=inputs.max_depth, **common)
    if isinstance(inputs, PlanExecuteInputs):
        return PlanAndExecute(allow_replan=inputs.allow_replan, max_replans=inputs.max_replans, **common)
    if isinstance(inputs, TreeOfThoughtsInputs):
        return TreeOfThoughts(branching_factor=inputs.branching_factor, max_depth=inputs.max_depth,
                              good_enough=inputs.good_enough, **common)  # fmt: skip
    raise ConfigurationError(f"unknown action {action!r}")


def action_body(
    action: str,
    inputs: _ActionInputs,
    llm: LLM,
    request: CompiledTemplate,
    agent: Agent,
    critic: LLM | None = None,
) -> Callable[[Session], Awaitable[None]]:
    """The body running ``action``: ``request`` is rendered on entry and is what the pattern works on."""
    pattern = action_pattern(action, inputs, critic)
    tools: list[Tool] | None = None
    if isinstance(inputs, ReActInputs) and inputs.tools is not None:
        missing = [name for name in inputs.tools if name not in agent.tools]
        if missing:
            known = ", ".join(agent.tools) or "none"
            raise ConfigurationError(f"tools {missing} are not registered (the agent's tools: {known})")
        tools = [agent.tools[name] for name in inputs.tools]

    def render(session: Session) -> str:
        return str(request.render(session))

    return pattern_body(pattern, llm, tools=tools, stream_steps=inputs.stream_steps, request=render, reply=False,
                        export_variables=True)  # fmt: skip
