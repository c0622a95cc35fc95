"""``PatternRun``: one execution of a pattern, and the helpers every pattern calls.

All model calls, tool calls, steps, guards and accounting go through here, so each pattern is only its
own strategy. Model calls and tool calls go through the reasoning kernel (``baf.reasoning.turn``,
``baf.reasoning.tool_calls``), like the reasoning state's; records go through the observer's
:class:`~baf.reasoning.recorder.Recorder` when it has one (the session observer of ``pattern_body``).
A nested run (a pipeline stage, a delegated task) shares the parent's meter, observer, recorder, tools
and session, so budgets and the log cover the whole tree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pydantic

from baf.errors import (
    PatternBudgetError,
    PatternStepLimitError,
    PatternStepTimeoutError,
    StructuredOutputError,
)
from baf.llm.base import LLM, LLMResponse, ToolCall
from baf.log.record import RecordKind
from baf.reasoning.patterns.accounting import Meter
from baf.reasoning.patterns.compaction import estimate_tokens
from baf.reasoning.patterns.memory import WorkingMemory
from baf.reasoning.patterns.steps import (
    LLMCallInfo,
    PatternObserver,
    PatternStep,
    PatternStepKind,
)
from baf.reasoning.patterns.structured import parse_structured, response_format, schema_instructions
from baf.reasoning.recorder import Recorder
from baf.reasoning.tool import Tool
from baf.reasoning.tool_calls import ToolOutcome, ToolRunner
from baf.reasoning.turn import ModelTurns

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
        memory: WorkingMemory | None = None,
    ) -> None:
        self.pattern = pattern
        self.llm = llm
        self.input = input
        self.tools = dict(tools)
        self.session = session
        self.observer = observer
        self.meter = meter
        self.depth = depth
        #: The run's working-memory scope (``execute(..., memory=...)``), or ``None``.
        self.memory = memory
        self.trace: list[PatternStep] = []
        self.steps_taken = 0
        self.partial: Any = None
        self.state: dict[str, Any] = {}
        #: Set by a pattern that finished without succeeding (e.g. a critic that never approved).
        self.failure: str | None = None
        self._calls = 0
        # The observer of model calls, unless it says it has none (then no LLMCallInfo, with its copies of
        # the messages and tools, is built: 2.4 % of a ReAct turn, bench/ab_instructions.py).
        self._call_observer = observer if getattr(observer, "observes_llm_calls", True) else None
        recorder = getattr(observer, "recorder", None)
        #: Where the run's records go (nothing is recorded without a session observer).
        self.recorder: Recorder = recorder if isinstance(recorder, Recorder) else Recorder()
        self.turns = ModelTurns(self.recorder, llm, loop=pattern.name, prices=pattern.prices)
        self.runner = ToolRunner(self.recorder, session=session, max_parallel=pattern.max_parallel_tools,
                                 timeout=pattern.tool_timeout, max_output=pattern.max_tool_output,
                                 max_arguments=pattern.max_tool_arguments)  # fmt: skip

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
        if self.memory is not None:
            self.memory.persist_step(step)
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
        """One model turn of the kernel, with the step timeout, the observer, usage accounting, the budget
        and, with a working memory, its context at the top of the system message."""
        model = llm or self.llm
        self._check_budget()
        if self.memory is not None:
            system = self.memory.enrich(system)
        merged = {**(self.pattern.parameters or {}), **(parameters or {})} or None
        self._calls += 1
        observer = self._call_observer
        if observer is not None:
            info = LLMCallInfo(self.pattern.name, self._calls, purpose, model.name, list(messages),
                               list(tools or []), system, merged)  # fmt: skip
            await observer.before_llm_call(info)
        timeout = self.pattern.step_timeout
        try:
            turn = await self.turns.take(messages, step=self.steps_taken, system=system, tools=tools, parameters=merged,
                                         purpose=purpose, llm=model, time_limit=timeout)  # fmt: skip
        except TimeoutError:
            raise PatternStepTimeoutError(
                f"{self.pattern.name}: the model call for {purpose!r} took longer than step_timeout={timeout:g}s"
            ) from None
        response = turn.response
        if observer is not None:
            observer.after_llm_call(info, response, turn.latency_ms)
        self.meter.add(self.pattern.name, purpose, model.name, response.usage)
        spent = self.meter.exceeded()
        if spent is not None:
            # The run stops before acting on this response: its tool calls get results saying they were
            # not run, so every call in the log has its result.
            for tool_call in response.tool_calls:
                self.record_tool_result(tool_call, f"Error: not run ({spent}).", True)
            raise PatternBudgetError(f"{self.pattern.name}: {spent}")
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
        (outcome,) = await self.run_tools([call], tools)
        return outcome.content, outcome.is_error

    async def run_tools(
        self,
        calls: Sequence[ToolCall],
        tools: Mapping[str, Tool] | None = None,
        before_call: Callable[[ToolCall], Any] | None = None,
    ) -> list[ToolOutcome]:
        """Run a response's tool calls with the kernel's runner (``max_parallel_tools`` at once); the
        outcomes in call order. ``before_call(call)`` runs just before each call may start."""
        available = self.tools if tools is None else tools

        def after_call(outcome: ToolOutcome) -> None:
            if self.observer is not None:
                self.observer.on_tool_result(outcome.call.id, outcome.call.name, outcome.content, outcome.is_error)

        return await self.runner.run(self.steps_taken, calls, available, before_call=before_call,
                                     after_call=after_call)  # fmt: skip

    def record_tool_result(self, call: ToolCall, content: str, is_error: bool) -> None:
        """Record the result of a call that ends the run instead of running (like ReAct's final answer),
        as the runner records the others."""
        self.recorder.record(RecordKind.TOOL_RESULT, {
            "step": self.steps_taken, "call_id": call.id, "name": call.name, "content": content,
            "is_error": is_error, "original_size": len(content),
        })  # fmt: skip
        if self.observer is not None:
            self.observer.on_tool_result(call.id, call.name, content, is_error)

    # -- nesting and compaction ---------------------------------------------------------------------

    async def delegate(self, pattern: Any, input: Any) -> ReasoningResult[Any]:
        """Run another pattern on ``input`` as part of this run (same meter, observer, tools, session and
        working memory: the other pattern gets a scope of its own in it)."""
        result: ReasoningResult[Any] = await pattern.execute(
            self.llm, input, tools=self.tools, session=self.session, observer=self.observer,
            meter=self.meter, depth=self.depth + 1, memory=self.memory.manager if self.memory is not None else None,
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


def _one_line(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= _SUMMARY_CHARS else f"{line[: _SUMMARY_CHARS - 1]}…"
