"""ReAct: thought → action (the agent's tools) → observation, until a final answer."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ClassVar, Literal

from baf.errors import ConfigurationError, StructuredOutputError, ToolArgumentError
from baf.llm.base import LLMResponse, ToolCall
from baf.reasoning.patterns.base import BasePattern
from baf.reasoning.patterns.models import ConfidenceReport, ReActOutput
from baf.reasoning.patterns.run import PatternRun
from baf.reasoning.patterns.steps import PatternStepKind
from baf.reasoning.patterns.structured import parse_structured
from baf.reasoning.tool import Tool
from baf.reasoning.tool_calls import assistant_message, schema_of, step_arguments

__all__ = ["ReAct", "Termination"]

Termination = Literal["tool", "confidence", "hybrid"]
Hook = Callable[..., Any]

_SYSTEM = (
    "You solve tasks by reasoning and acting. Each turn, first write your reasoning about what to do next, "
    "then call one or more tools to gather what you need. Base your answer on what the tools returned; "
    "do not guess what a tool could tell you.\n{termination}"
)
_TERMINATION = {
    "tool": "When you can answer, call the `{tool}` tool with the answer.",
    "confidence": 'When you can answer, end your reasoning with a JSON object {{"answer": ..., "confidence": 0..1}}.',
    "hybrid": 'When you can answer, call the `{tool}` tool, or end your reasoning with a JSON object '
              '{{"answer": ..., "confidence": 0..1}}.',
}  # fmt: skip
_NUDGE = "You neither called a tool nor gave a final answer. Call a tool, or give your final answer as instructed."


class ReAct(BasePattern[ReActOutput]):
    """Reasoning interleaved with tool calls; one model call per step.

    Args:
        termination: ``"tool"`` (the model calls ``final_answer``), ``"confidence"`` (a thought ends with
            ``{"answer", "confidence"}`` at or above ``confidence_threshold``) or ``"hybrid"`` (both,
            whichever comes first).
        confidence_threshold: The confidence that ends a run under confidence termination.
        final_answer_tool: The name of the answering tool.
        hide_reasoning: Leave the thoughts out of the output (they stay in the trace and the log).
        on_thought, on_action, on_observation: Hooks, sync or async, called with ``(run, text)``,
            ``(run, tool_call)`` and ``(run, tool_call, result)``.
        **options: Those of :class:`BasePattern`; ``compactor`` keeps the conversation within a limit.
    """

    default_name = "react"
    default_prompts: ClassVar[dict[str, str]] = {"system": _SYSTEM, "task": "{task}"}
    prompt_fields: ClassVar[dict[str, frozenset[str]]] = {
        "system": frozenset({"termination", "tool_names"}),
        "task": frozenset({"task"}),
    }

    def __init__(
        self,
        *,
        termination: Termination = "tool",
        confidence_threshold: float = 0.9,
        final_answer_tool: str = "final_answer",
        hide_reasoning: bool = False,
        on_thought: Hook | None = None,
        on_action: Hook | None = None,
        on_observation: Hook | None = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        if termination not in _TERMINATION:
            raise ConfigurationError(f"termination must be 'tool', 'confidence' or 'hybrid', got {termination!r}")
        if not 0.0 <= confidence_threshold <= 1.0:
            raise ConfigurationError(f"confidence_threshold must be within 0..1, got {confidence_threshold}")
        self.termination = termination
        self.confidence_threshold = confidence_threshold
        self.hide_reasoning = hide_reasoning
        self.hooks = {"thought": on_thought, "action": on_action, "observation": on_observation}

        def final_answer(answer: str, confidence: float | None = None) -> str:
            """Give the final answer to the task and stop.

            Args:
                answer: The complete answer.
                confidence: How sure you are, from 0 to 1.
            """
            return answer

        self.final_tool = Tool(final_answer, name=final_answer_tool)

    async def _hook(self, name: str, *args: Any) -> None:
        hook = self.hooks[name]
        if hook is not None:
            outcome = hook(*args)
            if inspect.isawaitable(outcome):
                await outcome

    async def reason(self, run: PatternRun) -> None:
        if "messages" not in run.state:
            run.state.update(messages=[{"role": "user", "content": run.prompt("task", task=run.input)}],
                             thoughts=[], final=None)  # fmt: skip
        run.state["messages"] = await run.compact(run.state["messages"])
        offered = [schema_of(tool) for tool in run.tools.values()]
        if self.termination != "confidence":
            offered.append(schema_of(self.final_tool))
        system = run.prompt("system", tool_names=", ".join(run.tools) or "none",
                            termination=_TERMINATION[self.termination].format(tool=self.final_tool.name))  # fmt: skip
        response = await run.call(run.state["messages"], purpose="thought", system=system, tools=offered)
        run.state["response"] = response
        text = (response.text or "").strip()
        if text:
            run.state["thoughts"].append(text)
            run.emit(PatternStepKind.THOUGHT, text, content=text)
            await self._hook("thought", run, text)
        run.state["final"] = self._final(response, text)
        if run.state["final"] is not None:
            answer, confidence, how, call = run.state["final"]
            run.partial = self._output(run, answer, confidence, how)
            if call is not None:  # the final answer call ends the run instead of running: record its result
                run.record_tool_result(call, answer, False)

    def _final(self, response: LLMResponse, text: str) -> tuple[str, float | None, str, ToolCall | None] | None:
        """The answer, its confidence, how the run ended and the final answer call (if one ended it)."""
        if self.termination != "confidence":
            for call in response.tool_calls:
                if call.name == self.final_tool.name:
                    try:
                        args = self.final_tool.validate_args(call.arguments)
                    except ToolArgumentError:
                        continue  # act() hands the error to the model, which can call again
                    return str(args["answer"]), args.get("confidence"), "final_answer_tool", call
        if self.termination != "tool" and text:
            try:
                report = parse_structured(text, ConfidenceReport)
            except StructuredOutputError:
                return None  # an ordinary thought, not a conclusion
            if report.confidence >= self.confidence_threshold:
                return report.answer, report.confidence, "confidence", None
        return None

    async def should_stop(self, run: PatternRun) -> bool:
        return run.state["final"] is not None

    async def act(self, run: PatternRun) -> list[tuple[ToolCall, str, bool]]:
        response: LLMResponse = run.state["response"]
        tools = {**run.tools, self.final_tool.name: self.final_tool}

        async def announce(call: ToolCall) -> None:
            shown = step_arguments(call)  # a step keeps a shortened copy; the llm_response has them whole
            sizes = {"arguments_size": shown["arguments_size"]} if "arguments_size" in shown else {}
            run.emit(PatternStepKind.ACTION, f"{call.name}({shown['arguments']})", tool=call.name,
                     arguments=shown["arguments"], call_id=call.id, **sizes)  # fmt: skip
            await self._hook("action", run, call)

        outcomes = await run.run_tools(response.tool_calls, tools, before_call=announce)
        return [(o.call, o.content, o.is_error) for o in outcomes]

    async def observe(self, run: PatternRun, action: list[tuple[ToolCall, str, bool]]) -> None:
        response: LLMResponse = run.state["response"]
        messages = run.state["messages"]
        if not action:
            messages += [{"role": "assistant", "content": response.text or ""}, {"role": "user", "content": _NUDGE}]
            return
        messages.append(assistant_message(response, self.max_tool_arguments))
        for call, content, is_error in action:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
            run.emit(PatternStepKind.OBSERVATION, f"{call.name}: {content}", tool=call.name,
                     call_id=call.id, result=content, is_error=is_error)  # fmt: skip
            await self._hook("observation", run, call, content)

    async def should_continue(self, run: PatternRun) -> bool:
        return True  # only a final answer (should_stop) or max_steps ends the loop

    def _output(self, run: PatternRun, answer: str, confidence: float | None, how: str) -> ReActOutput:
        reasoning = [] if self.hide_reasoning else list(run.state["thoughts"])
        return ReActOutput(answer=answer, confidence=confidence, terminated_by=how, reasoning=reasoning)
