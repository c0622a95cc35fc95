"""The ``ReasoningPattern`` protocol and ``BasePattern``, whose loop the built-in patterns override.

``BasePattern.run`` is the reason → act → observe loop::

    while True:
        run.begin_step()                      # max_steps guard
        await self.reason(run)
        if await self.should_stop(run): break  # e.g. the thought is final
        action = await self.act(run)
        await self.observe(run, action)
        if not await self.should_continue(run): break
    return await self.extract_output(run)

Patterns with another shape (a plan, a tree, a pipeline) override ``run`` and keep everything else:
``execute`` turns guards into typed errors or partial results, applies the reviewer, and adds up usage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar, runtime_checkable

from baf.errors import (
    ConfigurationError,
    PatternBudgetError,
    PatternLimitError,
    PatternStepTimeoutError,
    StructuredOutputError,
)
from baf.llm.base import LLM, Usage
from baf.reasoning.patterns.accounting import Budget, Meter, PriceTable
from baf.reasoning.patterns.compaction import ContextCompactor
from baf.reasoning.patterns.memory import MemoryManager
from baf.reasoning.patterns.prompts import PromptTemplate, resolve_prompts
from baf.reasoning.patterns.result import ReasoningResult, StopReason, as_text
from baf.reasoning.patterns.review import OutputReviewer
from baf.reasoning.patterns.run import PatternRun
from baf.reasoning.patterns.steps import PatternObserver, PatternStepKind
from baf.reasoning.patterns.structured import parse_structured
from baf.reasoning.tool import Tool
from baf.reasoning.tool_calls import DEFAULT_MAX_TOOL_ARGUMENTS

__all__ = ["BasePattern", "ReasoningPattern"]

T = TypeVar("T")

_COMPACTION_PROMPT = (
    "Summarise this part of a working conversation in a few sentences. Keep every fact, number, tool "
    "result and decision that later steps may need.\n\n{transcript}"
)
_REVIEW_PROMPT = (
    "This output does not have the required form.\nProblems: {problems}\n\nOutput:\n{output}\n\n"
    "Rewrite it so that it has the required form, keeping its content."
)


@runtime_checkable
class ReasoningPattern(Protocol[T]):
    """Anything that can run a reasoning strategy: the built-in patterns, pipelines, your own classes.

    ``execute`` must accept (and may ignore) further keyword arguments: nested runs pass ``observer``,
    ``meter``, ``depth`` and ``memory`` so the whole tree shares one log stream, one budget and one
    working memory.
    """

    name: str

    async def execute(
        self, llm: LLM, input: Any, *, tools: Any = None, session: Any = None, **kw: Any
    ) -> ReasoningResult[T]:
        """Run the pattern on ``input`` and return its result."""
        ...


class BasePattern(Generic[T]):
    """Shared machinery of the built-in patterns.

    Args:
        name: The name in traces and records; defaults to the class's ``default_name``.
        max_steps: Steps the run may take (what a step is depends on the pattern: a thought, a plan step,
            a critique round, ...). Past it the run stops with ``PatternStepLimitError``.
        max_depth: How deep a pattern that nests (Tree of Thoughts, Goal Decomposition) may go.
        step_timeout: Seconds one model call may take (default 120; ``None``: no limit). Past it the run
            stops with ``PatternStepTimeoutError`` (the partial result, or the error with ``on_limit="raise"``).
        tool_timeout: Seconds a tool call may take when the tool sets no timeout of its own (default 60,
            like the reasoning state); past it the model gets an error result and the run goes on.
        max_parallel_tools: Tool calls of one model response run at once (default 1: one after the
            other, each step recorded just before its call; the reasoning state runs 8).
        max_tool_output: Characters of a tool result the model reads; longer results are cut.
        max_tool_arguments: Characters of one call's arguments accepted; longer calls are refused.
        prompts: Overrides of the pattern's prompt templates, by slot name (see ``default_prompts``).
        budget: Token and cost limits for the run, nested runs included.
        prices: The price table that turns usage into cost.
        reviewer: Validates the final output (see :class:`OutputReviewer`).
        compactor: Compacts a growing conversation near a token limit (patterns that keep one).
        parameters: Model parameters (temperature, ...) sent with every call.
        parse_retries: How often an unreadable structured answer is sent back to the model.
        native_structured: Ask for a JSON-schema ``response_format``; ``None`` asks the LLM object
            (its ``supports_response_format`` attribute, False when absent).
        on_limit: When a guard stops the run: ``"partial"`` returns the result so far with
            ``success=False``; ``"raise"`` raises the typed error, whose ``partial`` holds that result.
    """

    default_name: ClassVar[str] = "pattern"
    #: Template text per prompt slot; each slot is rendered with the fields in ``prompt_fields``.
    default_prompts: ClassVar[dict[str, str]] = {}
    prompt_fields: ClassVar[dict[str, frozenset[str]]] = {}
    compaction_prompt: ClassVar[str] = _COMPACTION_PROMPT

    def __init__(
        self,
        *,
        name: str | None = None,
        max_steps: int = 10,
        max_depth: int = 3,
        step_timeout: float | None = 120.0,
        tool_timeout: float = 60.0,
        max_parallel_tools: int = 1,
        max_tool_output: int = 20_000,
        max_tool_arguments: int = DEFAULT_MAX_TOOL_ARGUMENTS,
        prompts: Mapping[str, str | PromptTemplate] | None = None,
        budget: Budget | None = None,
        prices: PriceTable | None = None,
        reviewer: OutputReviewer | None = None,
        compactor: ContextCompactor | None = None,
        parameters: dict[str, Any] | None = None,
        parse_retries: int = 1,
        native_structured: bool | None = None,
        on_limit: Literal["partial", "raise"] = "partial",
    ) -> None:
        if max_steps < 1 or max_depth < 1:
            raise ConfigurationError(f"max_steps and max_depth must be at least 1, got {max_steps}, {max_depth}")
        if step_timeout is not None and not step_timeout > 0:
            raise ConfigurationError(f"step_timeout must be a positive number of seconds, got {step_timeout}")
        if isinstance(tool_timeout, bool) or not tool_timeout > 0:
            raise ConfigurationError(f"tool_timeout must be a positive number of seconds, got {tool_timeout}")
        for label, value in (("max_parallel_tools", max_parallel_tools), ("max_tool_output", max_tool_output),
                             ("max_tool_arguments", max_tool_arguments)):  # fmt: skip
            if value < 1:
                raise ConfigurationError(f"{label} must be at least 1, got {value}")
        if parse_retries < 0:
            raise ConfigurationError(f"parse_retries cannot be negative, got {parse_retries}")
        if on_limit not in ("partial", "raise"):
            raise ConfigurationError(f"on_limit must be 'partial' or 'raise', got {on_limit!r}")
        self.name = name or self.default_name
        self.max_steps = max_steps
        self.max_depth = max_depth
        self.step_timeout = step_timeout
        self.tool_timeout = tool_timeout
        self.max_parallel_tools = max_parallel_tools
        self.max_tool_output = max_tool_output
        self.max_tool_arguments = max_tool_arguments
        self.prompts = resolve_prompts(self.name, self.default_prompts, prompts, self.prompt_fields)
        self.budget = budget or Budget()
        self.prices = prices or PriceTable()
        self.reviewer = reviewer
        self.compactor = compactor
        self.parameters = parameters
        self.parse_retries = parse_retries
        self.native_structured = native_structured
        self.on_limit = on_limit

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, max_steps={self.max_steps})"

    # -- running --------------------------------------------------------------------------------

    async def execute(
        self,
        llm: LLM,
        input: Any,
        *,
        tools: Sequence[Tool] | Mapping[str, Tool] | None = None,
        session: Any = None,
        observer: PatternObserver | None = None,
        meter: Meter | None = None,
        depth: int = 0,
        memory: MemoryManager | None = None,
        **kw: Any,
    ) -> ReasoningResult[T]:
        """Run the pattern on ``input`` (text; other values are turned into text with ``as_text``).

        ``tools`` are offered to patterns that act (ReAct); ``session`` is passed to tools that take
        one; ``observer`` receives every step and call (``pattern_body`` passes one that records them
        in the session log). ``memory`` gives the run its working-memory scope ``reasoning:<name>``
        (see :mod:`baf.reasoning.patterns.memory`). ``meter`` and ``depth`` are set by an enclosing run.
        """
        if kw:
            raise TypeError(f"{self.name}.execute() got unexpected arguments {sorted(kw)}")
        if meter is None:
            meter = Meter(self.prices, self.budget)
        run = PatternRun(self, llm, input if isinstance(input, str) else as_text(input),
                         tools=_tool_map(tools), session=session, observer=observer, meter=meter,
                         depth=depth, memory=memory.fork(self.name) if memory is not None else None)  # fmt: skip
        calls_before = len(meter.calls)
        try:
            output = await self.run(run)
            stop_reason = run.failure or StopReason.COMPLETED
            if self.reviewer is not None and run.failure is None:
                output, passed = await self._review(run, output)
                stop_reason = StopReason.COMPLETED if passed else StopReason.REVIEW_FAILED
        except PatternLimitError as exc:
            run.emit(PatternStepKind.OBSERVATION, f"stopped: {exc}", stop_reason=_stop_reason(exc), error=str(exc))
            result = self._result(run, run.partial, _stop_reason(exc), calls_before, exc)
            if run.memory is not None and run.partial is not None:
                run.memory.store_output(as_text(run.partial))
            exc.partial = result
            if self.on_limit == "raise":
                raise
            return result
        text = as_text(output)
        if run.memory is not None:
            run.memory.store_output(text)
        run.emit(PatternStepKind.ANSWER, text or "(no answer)", text=text, final=depth == 0,
                 success=stop_reason == StopReason.COMPLETED, stop_reason=stop_reason)  # fmt: skip
        return self._result(run, output, stop_reason, calls_before, None)

    async def run(self, run: PatternRun) -> T:
        """The reason → act → observe loop (see the module docstring); override for other shapes."""
        while True:
            run.begin_step()
            await self.reason(run)
            if await self.should_stop(run):
                break
            action = await self.act(run)
            await self.observe(run, action)
            if not await self.should_continue(run):
                break
        return await self.extract_output(run)

    # -- the hooks --------------------------------------------------------------------------------

    async def reason(self, run: PatternRun) -> None:
        """Think: usually one model call whose outcome goes into ``run.state``."""
        raise NotImplementedError(f"{type(self).__name__} must override reason() or run()")

    async def act(self, run: PatternRun) -> Any:
        """Act on the thought (call tools, ...); returns what ``observe`` receives. Default: nothing."""
        return None

    async def observe(self, run: PatternRun, action: Any) -> None:
        """Take in the outcome of ``act``. Default: nothing."""

    async def should_stop(self, run: PatternRun) -> bool:
        """Checked right after ``reason``: True ends the loop before acting. Default: False."""
        return False

    async def should_continue(self, run: PatternRun) -> bool:
        """Checked after ``observe``: True runs another iteration. Default: False (one iteration)."""
        return False

    async def extract_output(self, run: PatternRun) -> T:
        """The run's output. Default: ``run.partial``."""
        output: T = run.partial
        return output

    # -- helpers ----------------------------------------------------------------------------------

    async def _review(self, run: PatternRun, output: T) -> tuple[Any, bool]:
        """Validate ``output`` with the reviewer, asking the model to fix it up to ``max_retries`` times."""
        reviewer = self.reviewer
        assert reviewer is not None
        candidate: Any = output
        for attempt in range(reviewer.max_retries + 1):
            problems = _review_problems(reviewer, candidate)
            if isinstance(problems, reviewer.output_type):
                run.emit(PatternStepKind.REFLECTION, "output passed review", review="passed", attempt=attempt)
                return problems, True
            run.emit(PatternStepKind.REFLECTION, f"output failed review: {problems}",
                     review="failed", problems=problems, attempt=attempt)  # fmt: skip
            if attempt == reviewer.max_retries:
                break
            candidate = await run.ask(self.review_prompt(problems, as_text(candidate)), purpose="review")
        return output, False

    def review_prompt(self, problems: str, output: str) -> str:
        """The prompt asking the model to fix an output the reviewer rejected."""
        return _REVIEW_PROMPT.format(problems=problems, output=output)

    def _result(
        self, run: PatternRun, output: Any, stop_reason: str, calls_before: int, error: BaseException | None
    ) -> ReasoningResult[T]:
        calls = run.meter.calls[calls_before:]
        return ReasoningResult(
            pattern=self.name, output=output, success=stop_reason == StopReason.COMPLETED,
            steps_taken=run.steps_taken, trace=list(run.trace),
            usage=sum((c.usage for c in calls), Usage()),
            cost=sum(c.cost for c in calls), calls=list(calls), stop_reason=stop_reason, error=error,
        )  # fmt: skip


def _review_problems(reviewer: OutputReviewer, candidate: Any) -> Any:
    """The validated output when ``candidate`` passes, else a description of its problems."""
    value = candidate
    if not isinstance(value, reviewer.output_type):
        try:
            value = parse_structured(as_text(candidate), reviewer.output_type)
        except StructuredOutputError as exc:
            return str(exc)
    problem = reviewer.problem(value)
    return value if problem is None else problem


def _stop_reason(exc: PatternLimitError) -> str:
    if isinstance(exc, PatternBudgetError):
        return StopReason.BUDGET
    if isinstance(exc, PatternStepTimeoutError):
        return StopReason.TIMEOUT
    return StopReason.MAX_STEPS


def _tool_map(tools: Sequence[Tool] | Mapping[str, Tool] | None) -> dict[str, Tool]:
    if tools is None:
        return {}
    if isinstance(tools, Mapping):
        return dict(tools)
    return {tool.name: tool for tool in tools}
