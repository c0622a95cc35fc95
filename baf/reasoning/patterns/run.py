"""``PatternRun``: one execution of a pattern, and the helpers every pattern calls.

All model calls, tool calls, steps, guards and accounting go through here, so each pattern is only its
own strategy. A nested run (a pipeline stage, a delegated task) shares the parent's meter, observer,
tools and session, so budgets and the log cover the whole tree.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import pydantic

from baf.errors import (
    PatternBudgetError,
    PatternStepLimitError,
    PatternStepTimeoutError,
    StructuredOutputError,
    ToolError,
)
from baf.llm.base import LLM, LLMResponse, ToolCall
from baf.reasoning.effects import FullRequest, current_effect_source
from baf.reasoning.patterns.accounting import Meter
from baf.reasoning.patterns.compaction import estimate_tokens
from baf.reasoning.patterns.steps import (
    LLMCallInfo,
    PatternObserver,
    PatternStep,
    PatternStepKind,
    before_tool_call,
)
from baf.reasoning.patterns.structured import parse_structured, response_format, schema_instructions
from baf.reasoning.tool import Tool

if TYPE_CHECKING:
    from baf.reasoning.patterns.base import BasePattern
    from baf.reasoning.patterns.result import ReasoningResult

__all__ = ["PatternRun"]

M = TypeVar("M", bound=pydantic.BaseModel)
_SUMMARY_CHARS = 120


class PatternRun:
    """The state of one pattern execution.

    Patterns keep their own working data in :attr:`state`, and set :attr:`partial` to the best output
    so far: it is what a guard returns when it stops the run early.
    """

    def __init__(
        self,
        pattern: BasePattern[Any],
        llm: LLM,
        input: str,
        *,
        tools: Mapping[str, Tool],
        session: Any,
        observer: PatternObserver | None,
        meter: Meter,
        depth: int,
    ) -> None:
        self.pattern = pattern
        self.llm = llm
        self.input = input
        self.tools = dict(tools)
        self.session = session
        self.observer = observer
        self.meter = meter
        self.depth = depth
        self.trace: list[PatternStep] = []
        self.steps_taken = 0
        self.partial: Any = None
        self.state: dict[str, Any] = {}
        #: Set by a pattern that finished without succeeding (e.g. a critic that never approved).
        self.failure: str | None = None
        self._calls = 0

    # -- guards and steps -------------------------------------------------------------------------

    def begin_step(self) -> int:
        """Count one step; past ``max_steps`` the run stops with :class:`PatternStepLimitError`."""
        limit = self.pattern.max_steps
        if self.steps_taken >= limit:
            raise PatternStepLimitError(f"{self.pattern.name} did not finish within max_steps={limit}")
        self.steps_taken += 1
        return self.steps_taken

    def emit(self, kind: str, summary: str, **details: Any) -> PatternStep:
        """Add a step to the trace and hand it to the observer."""
        # Redact before shortening: a secret cut in half would no longer be recognised at write time.
        redact = getattr(self.observer, "redact", None)
        text = redact(str(summary)) if redact is not None else str(summary)
        step = PatternStep(kind, self.steps_taken, _one_line(text),
                           {"pattern": self.pattern.name, "depth": self.depth, **details})  # fmt: skip
        self.trace.append(step)
        if self.observer is not None:
            self.observer.on_step(step)
        return step

    def prompt(self, slot: str, **values: Any) -> str:
        """Render the pattern's template for ``slot``."""
        return self.pattern.prompts[slot].render(**values)

    # -- model calls ------------------------------------------------------------------------------

    async def call(
        self,
        messages: list[dict[str, Any]],
        *,
        purpose: str,
        system: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        parameters: dict[str, Any] | None = None,
        llm: LLM | None = None,
    ) -> LLMResponse:
        """One model call, with the step timeout, the observer, usage accounting and the budget."""
        model = llm or self.llm
        self._check_budget()
        merged = {**(self.pattern.parameters or {}), **(parameters or {})} or None
        self._calls += 1
        info = LLMCallInfo(self.pattern.name, self._calls, purpose, model.name, list(messages),
                           list(tools or []), system, merged)  # fmt: skip
        if self.observer is not None:
            await self.observer.before_llm_call(info)
        started = time.perf_counter()
        timeout = self.pattern.step_timeout
        source = current_effect_source()  # a re-run (or a resume) answers from the log, never the model
        served = None
        if source is not None:
            request = FullRequest(self._calls, list(messages), system, list(tools or []), dict(merged or {}),
                                  model.name)  # fmt: skip
            served = source.llm_response(request)
        try:
            async with asyncio.timeout(timeout):
                response = served if served is not None else await model.predict_with_tools(
                    list(messages), list(tools or []), parameters=merged, system_message=system
                )  # fmt: skip
        except TimeoutError:
            raise PatternStepTimeoutError(
                f"{self.pattern.name}: the model call for {purpose!r} took longer than step_timeout={timeout:g}s"
            ) from None
        latency_ms = round((time.perf_counter() - started) * 1000, 3)
        if self.observer is not None:
            self.observer.after_llm_call(info, response, latency_ms)
        self.meter.add(self.pattern.name, purpose, model.name, response.usage)
        self._check_budget()
        return response

    async def ask(self, prompt: str, *, purpose: str, system: str | None = None, llm: LLM | None = None) -> str:
        """A single-message text call; returns the answer's text."""
        response = await self.call([{"role": "user", "content": prompt}], purpose=purpose, system=system, llm=llm)
        return (response.text or "").strip()

    async def structured(
        self, prompt: str, model: type[M], *, purpose: str, system: str | None = None, llm: LLM | None = None
    ) -> M:
        """Ask for an answer that fits ``model`` (see :mod:`baf.reasoning.patterns.structured`).

        An answer that does not parse is shown to the model with the reason, ``parse_retries`` times;
        then :class:`~baf.errors.StructuredOutputError` is raised.
        """
        target = llm or self.llm
        native = self.pattern.native_structured
        if native is None:
            native = bool(getattr(target, "supports_response_format", False))
        parameters = {"response_format": response_format(model)} if native else None
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"{prompt}\n\n{schema_instructions(model)}"}]
        for attempt in range(self.pattern.parse_retries + 1):
            response = await self.call(messages, purpose=purpose, system=system, parameters=parameters, llm=target)
            try:
                return parse_structured(response.text, model)
            except StructuredOutputError as exc:
                self.emit(PatternStepKind.OBSERVATION, f"unreadable {model.__name__} answer",
                          purpose=purpose, error=str(exc), attempt=attempt)  # fmt: skip
                if attempt == self.pattern.parse_retries:
                    raise StructuredOutputError(
                        f"{self.pattern.name} ({purpose}): {exc} "
                        f"[gave up after {attempt + 1} answer(s)]", exc.text, exc.attempts,
                    ) from None  # fmt: skip
                messages = [*messages, {"role": "assistant", "content": response.text or ""},
                            {"role": "user", "content": f"Your answer could not be read: {exc}\n"
                             "Reply again with only the JSON object."}]  # fmt: skip
        raise AssertionError("unreachable")  # the loop returns or raises

    # -- tools --------------------------------------------------------------------------------------

    async def run_tool(self, call: ToolCall, tools: Mapping[str, Tool] | None = None) -> tuple[str, bool]:
        """Run one tool call; every failure becomes an error text for the model (the run goes on)."""
        available = self.tools if tools is None else tools
        tool = available.get(call.name)
        if tool is None:
            content, is_error = (f"Error: there is no tool named '{call.name}'. "
                                 f"Available tools: {', '.join(available) or 'none'}."), True  # fmt: skip
        else:
            timeout = tool.timeout if tool.timeout is not None else self.pattern.tool_timeout
            source = current_effect_source()
            await before_tool_call(self.observer, call.id, call.name)  # write-ahead: the request is durable
            try:
                served = None
                if source is not None:  # a re-run serves the recorded result; the tool must not run
                    served = source.tool_result(self.steps_taken, call, tool) if _valid(tool, call) else None
                if served is not None:
                    content, is_error = served.content, served.is_error
                else:
                    async with asyncio.timeout(timeout):
                        content, is_error = await tool.run(call.arguments, session=self.session), False
            except ToolError as exc:
                content, is_error = f"Error: {exc}", True
            except TimeoutError:
                content, is_error = f"Error: tool '{call.name}' did not finish within {timeout:g} seconds.", True
        self.record_tool_result(call, content, is_error)
        return content, is_error

    def record_tool_result(self, call: ToolCall, content: str, is_error: bool) -> None:
        """Report a tool call's result to the observer (``run_tool`` does; a pattern whose call ends the
        run instead of running, like ReAct's final answer, reports it itself)."""
        if self.observer is not None:
            self.observer.on_tool_result(call.id, call.name, content, is_error)

    # -- nesting and compaction ---------------------------------------------------------------------

    async def delegate(self, pattern: Any, input: Any) -> ReasoningResult[Any]:
        """Run another pattern on ``input`` as part of this run (same meter, observer, tools, session)."""
        result: ReasoningResult[Any] = await pattern.execute(
            self.llm, input, tools=self.tools, session=self.session, observer=self.observer,
            meter=self.meter, depth=self.depth + 1,
        )  # fmt: skip
        self.trace.extend(step for step in result.trace if step not in self.trace)
        return result

    async def compact(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Compact ``messages`` when the pattern's compactor says they near the token limit."""
        compactor = self.pattern.compactor
        if compactor is None or not compactor.needs_compaction(messages):
            return messages
        head, old, tail = compactor.split(messages)
        if not old:
            return messages
        before = estimate_tokens(messages)
        if compactor.mode == "summarize":
            transcript = "\n".join(f"{m.get('role')}: {m.get('content')}" for m in old)
            summary = await self.ask(self.pattern.compaction_prompt.format(transcript=transcript),
                                     purpose="compaction")  # fmt: skip
            compacted = [*head, compactor.summary_message(summary, len(old)), *tail]
        else:
            compacted = [*head, *tail]
        self.emit(PatternStepKind.COMPACTION, f"compacted {len(old)} old messages ({compactor.mode})",
                  mode=compactor.mode, removed=len(old), tokens_before=before,
                  tokens_after=estimate_tokens(compacted))  # fmt: skip
        return compacted

    def _check_budget(self) -> None:
        reason = self.meter.exceeded()
        if reason is not None:
            raise PatternBudgetError(f"{self.pattern.name}: {reason}")


def _valid(tool: Tool, call: ToolCall) -> bool:
    """Whether the tool, as it is now, accepts the call's arguments (if not, ``tool.run`` reports why)."""
    try:
        tool.validate_args(call.arguments)
    except ToolError:
        return False
    return True


def _one_line(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= _SUMMARY_CHARS else f"{line[: _SUMMARY_CHARS - 1]}…"
