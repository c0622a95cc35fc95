"""Reasoning states: a state body that runs an LLM-driven plan → act → observe loop with tools.

Each turn the model may call tools (the agent's, its workspaces', and the planning tools ``add_tasks``,
``complete_task`` and ``skip_task`` that act on a request-scoped :class:`TaskList`), or answer. An answer
is accepted only when every task is completed or skipped; otherwise the loop pushes back and goes on.
Every turn is recorded before it is acted on (``llm_request``, ``llm_response``, ``tool_result``,
``reasoning_step``, ``task_list`` records) and every step streams to the platform after it is durable.

``_run_reasoning_loop`` is the loop, top to bottom; :class:`_ReasoningRun` holds the helpers it calls.
Model turns and tool calls go through the reasoning kernel (``baf.reasoning.turn``,
``baf.reasoning.tool_calls``), the same as every pattern's.

The body is resumable (``reasoning_body(...).resume``, see ``baf.core.engine``): after a crash, an
invocation that was in flight runs again from its start over the records it had written (see
``baf.reasoning.recorder``): recorded model responses and tool results are served, nothing recorded is
written twice, and a non-idempotent tool call whose result was not recorded is reported to the model as
interrupted. The same effect sources serve a deterministic re-run (``baf.replay.rerun``) from the log.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pydantic

from baf.core.session import runtime_side
from baf.errors import ApprovalPending, ConfigurationError, LeaseLostError, StructuredOutputError
from baf.library.state.planning_tools import PLANNING_TOOLS, PlanningCall, planning_call
from baf.library.state.reasoning_guards import (
    COMPACTION_PROMPT,
    TOOL_MEMORY_KEY,
    budget_message,
    compaction_details,
    plan_compaction,
    repair_message,
    tool_exchange,
)
from baf.library.state.reasoning_prompt import (
    build_pushback_message,
    build_static_prompt,
    build_system_prompt,
    memory_messages,
)
from baf.library.state.recording import session_recorder
from baf.library.state.tasks import Task, TaskList
from baf.llm.base import LLM, LLMResponse, ToolCall
from baf.log.record import Record, RecordKind
from baf.reasoning.effects import current_effect_source
from baf.reasoning.patterns.accounting import Budget, Meter, PriceTable
from baf.reasoning.patterns.compaction import ContextCompactor
from baf.reasoning.patterns.structured import parse_structured, schema_instructions
from baf.reasoning.recorder import Recorder
from baf.reasoning.resume import INTERRUPTED_TOOL_MESSAGE as INTERRUPTED_TOOL_MESSAGE  # importable from here too
from baf.reasoning.resume import ResumeEffects
from baf.reasoning.step import ReasoningStep, ReasoningStepKind, build_step
from baf.reasoning.tool import Tool
from baf.reasoning.tool_calls import (
    DEFAULT_MAX_TOOL_ARGUMENTS,
    STEP_PAYLOAD_LIMIT,
    ToolOutcome,
    ToolRunner,
    assistant_message,
    schema_of,
    shorten,
    step_arguments,
)
from baf.reasoning.turn import ModelTurns
from baf.reasoning.workspace import workspace_tools

if TYPE_CHECKING:
    from baf.core.agent import Agent
    from baf.core.session import Session
    from baf.core.state import State
    from baf.reasoning.skill import Skill
    from baf.reasoning.workspace import Workspace

__all__ = [
    "DEFAULT_FALLBACK_MESSAGE",
    "DEFAULT_SYSTEM_PROMPT",
    "ReasoningConfig",
    "ReasoningStep",
    "ReasoningStepKind",
    "Task",
    "TaskList",
    "new_reasoning_state",
    "reasoning_body",
]

DEFAULT_SYSTEM_PROMPT = (
    "You are a careful assistant that works with tools. When a question could be answered from a "
    "registered workspace, look there first (`list_directory`, then `read_file`) rather than answering from "
    "memory. Use a tool whenever its description fits what the user wants. Base your answers on what the "
    "tools returned and keep them short. Plan with `add_tasks` whenever a request needs more than one tool "
    "call or more than one piece of information; answer trivial one-step questions directly."
)
DEFAULT_FALLBACK_MESSAGE = (
    "I could not finish within my step budget. Please try rephrasing the question or narrowing it down."
)
SCRATCHPAD_KEY = "reasoning_scratchpad"


@dataclass(frozen=True, slots=True)
class ReasoningConfig:
    """The settings of one reasoning body (see :func:`reasoning_body` for their meaning)."""

    llm: LLM
    max_steps: int
    system_prompt: str
    fallback_message: str
    enable_task_planning: bool
    stream_steps: bool
    memory: int | None
    tool_timeout: float
    max_parallel_tools: int
    max_tool_output: int
    parameters: dict[str, Any] | None
    max_tool_arguments: int = DEFAULT_MAX_TOOL_ARGUMENTS
    budget: Budget | None = None
    prices: PriceTable | None = None
    compactor: ContextCompactor | None = None
    output_type: type[pydantic.BaseModel] | None = None
    reviewer: Callable[[Any], str | None] | None = None
    review_retries: int = 2
    memory_tool_results: bool = False


def reasoning_body(
    llm: LLM,
    max_steps: int = 8,
    system_prompt: str = DEFAULT_SYSTEM_PROMPT,
    fallback_message: str = DEFAULT_FALLBACK_MESSAGE,
    enable_task_planning: bool = True,
    stream_steps: bool = True,
    *,
    memory: int | None = 10,
    tool_timeout: float = 60.0,
    max_parallel_tools: int = 8,
    max_tool_output: int = 20_000,
    parameters: dict[str, Any] | None = None,
    max_tool_arguments: int = DEFAULT_MAX_TOOL_ARGUMENTS,
    budget: Budget | None = None,
    prices: PriceTable | None = None,
    compactor: ContextCompactor | None = None,
    output_type: type[pydantic.BaseModel] | None = None,
    reviewer: Callable[[Any], str | None] | None = None,
    review_retries: int = 2,
    memory_tool_results: bool = False,
) -> Callable[[Session], Awaitable[None]]:
    """Build a state body that answers the user's message with an LLM-driven tool loop.

    Args:
        llm: The model; it must implement ``predict_with_tools``.
        max_steps: Model turns allowed per user message; past it the user gets ``fallback_message``.
        system_prompt: The base system prompt; skills, workspace previews, planning guidance and the live
            task list are appended to it on every turn.
        fallback_message: What the user is told when ``max_steps`` runs out.
        enable_task_planning: False gives a pure ReAct loop: no planning tools, no push-back, and the
            first text answer wins.
        stream_steps: Send each step to ``session.platform.reply_reasoning_step`` and task-list snapshots
            to ``reply_task_list_update`` (steps are recorded either way).
        memory: How many earlier user/assistant exchanges of the session the model sees (read from the
            log); ``0`` for none, ``None`` for all.
        tool_timeout: Seconds a tool call may take when the tool sets no timeout of its own.
        max_parallel_tools: How many tool calls of one turn run at once.
        max_tool_output: Characters of a tool result the model sees; longer output is cut with a marker.
        parameters: Model parameters (temperature, ...) for every call.
        max_tool_arguments: Characters of one call's arguments a tool accepts; a longer call is not run
            and the model is told why.
        budget: Token and cost limits per user message (``Budget(max_tokens=..., max_cost=...)``),
            checked after every model call: the call that crosses it is kept, its tool calls are not
            run, and the user is told the budget ended the work.
        prices: The price table that turns usage into cost (the patterns' ``PriceTable``); with it each
            ``llm_response`` records its ``cost``, and the invocation's total is in ``reasoning_finished``.
        compactor: Keeps the conversation under a token limit (the patterns' ``ContextCompactor``): past
            its threshold, older messages are dropped or summarised by the model (``mode``), never
            separating a tool result from its call; each compaction is a ``compaction`` step.
        output_type: A pydantic model the final answer must be (JSON, validated strictly). An answer
            that does not fit is sent back once with the reason; a second one ends the invocation with
            an error. The value is in the scratchpad as ``output``.
        reviewer: Called with the final answer (the ``output_type`` value, or the text): ``None``
            accepts it, a string says what is wrong, and the model is asked to fix it, up to
            ``review_retries`` times; then the last answer is kept (outcome ``review_failed``).
        review_retries: How often a rejected answer goes back to the model.
        memory_tool_results: Also show the model the tool calls and results of the earlier exchanges it
            remembers (``memory``), not only the messages and replies; they are kept in the session
            variable ``reasoning_tool_memory``.
    """
    for label, value in (("max_steps", max_steps), ("max_parallel_tools", max_parallel_tools),
                         ("max_tool_output", max_tool_output), ("max_tool_arguments", max_tool_arguments)):  # fmt: skip
        if value < 1:  # max_parallel_tools=0 would wait forever on the first tool call
            raise ValueError(f"{label} must be at least 1, got {value}")
    if not tool_timeout > 0:
        raise ValueError(f"tool_timeout must be a positive number of seconds, got {tool_timeout}")
    if review_retries < 0:
        raise ValueError(f"review_retries cannot be negative, got {review_retries}")
    if memory is not None and memory < 0:
        raise ValueError(f"memory must be a number of exchanges (0 for none) or None for all, got {memory}")
    config = ReasoningConfig(
        llm, max_steps, system_prompt, fallback_message, enable_task_planning, stream_steps,
        memory, tool_timeout, max_parallel_tools, max_tool_output, parameters, max_tool_arguments,
        budget, prices, compactor, output_type, reviewer, review_retries, memory_tool_results,
    )  # fmt: skip

    async def reasoning(session: Session) -> None:
        event = session.event
        request = event.text if event is not None else None
        if request is None:
            return  # entered without a user message (e.g. at session start): nothing to answer
        await _run_reasoning_loop(_ReasoningRun(session, config, request))

    async def resume(session: Session, records: Sequence[Record], decided: Collection[str] = ()) -> None:
        """Continue the invocation a crash interrupted, or one that paused for approval once its calls
        are ``decided``; ``records`` are those this body had written."""
        starts = [i for i, r in enumerate(records) if _step_kind(r) == ReasoningStepKind.REASONING_STARTED]
        if not starts:
            await reasoning(session)  # nothing of it was durable: run it from the start
            return
        written = records[starts[0] :]
        effects = ResumeEffects(written, then=current_effect_source(), decided=decided)
        recorder = session_recorder(session, written, effects)
        request = str(written[0].data["details"]["request"])
        await _run_reasoning_loop(_ReasoningRun(session, config, request, recorder))

    def check_agent(agent: Agent) -> None:
        """Refuse to start an agent whose tools clash with this state's built-in ones (see ``Runtime.start``)."""
        _tool_set(agent, enable_task_planning)

    reasoning.__name__ = "reasoning_body"
    reasoning.resume = resume  # type: ignore[attr-defined]  # the engine's resume hook
    # Nothing leaves the process before the loop's first commit (the request, before the model call; a
    # step shown on the platform waits for a commit too): the engine need not commit the step's start.
    reasoning.commits_before_acting = True  # type: ignore[attr-defined]
    reasoning.check_agent = check_agent  # type: ignore[attr-defined]  # the runtime's start-up check
    return reasoning


def new_reasoning_state(
    agent: Agent,
    llm: LLM,
    name: str = "reasoning_state",
    initial: bool = True,
    max_steps: int = 8,
    system_prompt: str = DEFAULT_SYSTEM_PROMPT,
    fallback_message: str = DEFAULT_FALLBACK_MESSAGE,
    enable_task_planning: bool = True,
    stream_steps: bool = True,
    **options: Any,
) -> State:
    """Create a state on ``agent`` whose body is :func:`reasoning_body` and return it.

    Equivalent to ``agent.new_state(name, initial=initial).set_body(reasoning_body(llm, ...))``; the
    other arguments, and the keyword-only ``options`` (``memory``, ``tool_timeout``,
    ``max_parallel_tools``, ``max_tool_output``, ``parameters``, ``max_tool_arguments``, ...), are those
    of :func:`reasoning_body`.
    No transitions are added: wire them yourself, typically ``state.when_event().go_to(state)``.
    """
    body = reasoning_body(
        llm, max_steps, system_prompt, fallback_message, enable_task_planning, stream_steps, **options
    )
    state = agent.new_state(name, initial=initial)
    state.set_body(body)
    return state


async def _run_reasoning_loop(run: _ReasoningRun) -> None:
    """Plan → act → observe until an answer is accepted, the model fails, the budget is spent or the step
    budget runs out. A resumed run goes through the same loop from the start, served what it had
    recorded (see :mod:`baf.reasoning.recorder`)."""
    run.emit(ReasoningStepKind.REASONING_STARTED, 0, f"reasoning about: {_summary(run.redact(run.request), 80)}",
             {"request": run.request, "planning": run.task_list is not None})  # fmt: skip
    step, outcome = 0, "error"
    try:
        for step in range(run.config.max_steps):
            response = await run.call_llm(step)
            if response is None:
                outcome = "llm_error"
                return
            spent = run.budget_spent() if run.config.budget is not None else None
            if spent is not None:
                run.stop_for_budget(step, response, spent)
                outcome = "budget"
                return
            if response.tool_calls:
                await run.execute_tool_calls(step, response)
                continue
            text = (response.text or "").strip()
            if not text:
                run.nudge_empty(step)
                continue
            if run.task_list is not None and not run.task_list.all_resolved():
                run.push_back(step, text)
                continue
            verdict = run.check_answer(step, text)
            if verdict is None:
                continue  # sent back to the model: a repair or a review
            run.answer(step, text)
            outcome = verdict
            return
        run.emit(ReasoningStepKind.MAX_STEPS, step, f"no answer after {run.config.max_steps} steps",
                 {"max_steps": run.config.max_steps})  # fmt: skip
        run.recorder.reply(run.config.fallback_message)
        outcome = "max_steps"
    except _AnswerError as exc:
        outcome = exc.outcome
    except ApprovalPending:
        # Tool calls wait for a human: the step ends here, unfinished on purpose. The decision continues
        # this invocation from its records (``baf.reasoning.approval``), which must not hold an end yet.
        outcome = _AWAITING_APPROVAL
    finally:
        if outcome != _AWAITING_APPROVAL:
            run.finish(step, outcome)


_AWAITING_APPROVAL = "awaiting_approval"


class _AnswerError(Exception):
    """The final answer could not be made to fit ``output_type`` (recorded, and the user told)."""

    def __init__(self, outcome: str) -> None:
        super().__init__(outcome)
        self.outcome = outcome


class _ReasoningRun:
    """The state of one reasoning invocation and the helpers the loop calls. Model turns and tool calls
    go through the reasoning kernel (:class:`~baf.reasoning.turn.ModelTurns`,
    :class:`~baf.reasoning.tool_calls.ToolRunner`); every record goes through its :class:`Recorder`."""

    def __init__(
        self, session: Session, config: ReasoningConfig, request: str, recorder: Recorder | None = None
    ) -> None:
        self.session = session
        self.config = config
        self.request = request
        self.recorder = recorder if recorder is not None else session_recorder(session)
        self.turns = ModelTurns(self.recorder, config.llm, loop="reasoning", prices=config.prices)
        # Usage and cost of this invocation, against the budget (the patterns' meter).
        self.meter = Meter(config.prices or PriceTable(), config.budget or Budget())
        self._counting = config.budget is not None or config.prices is not None
        self.output: Any = None  # the typed answer, with output_type
        self._repairs = 0
        self._reviews = 0
        self.runner = ToolRunner(self.recorder, session=session, max_parallel=config.max_parallel_tools,
                                 timeout=config.tool_timeout, max_output=config.max_tool_output,
                                 max_arguments=config.max_tool_arguments)  # fmt: skip
        self.task_list = TaskList() if config.enable_task_planning else None
        # current_tools() and system_prompt() are rebuilt only when what they are made of changes.
        self._tools_key: tuple[tuple[Tool, ...], tuple[Workspace, ...]] | None = None
        self._tools: dict[str, Tool] = {}
        self._schemas: list[dict[str, Any]] = []
        self._prompt_key: tuple[Skill, ...] | None = None
        self._static_prompt = ""
        live = runtime_side(session)
        before = live.event_seq if live.event_seq is not None else live.projection.last_seq + 1
        #: The seq of the message this invocation answers (where its tool memory is filed).
        self.request_seq = before
        tool_memory = None
        if config.memory_tool_results:
            tool_memory = {int(seq): list(messages) for seq, messages in session.get(TOOL_MEMORY_KEY) or []}
        self.messages: list[dict[str, Any]] = memory_messages(session, before, config.memory, tool_memory)
        self._request_message: dict[str, Any] = {"role": "user", "content": request}
        self.messages.append(self._request_message)
        self.trace: list[dict[str, Any]] = []

    def redact(self, text: str) -> str:
        """``text`` with the agent's secrets replaced: for text about to be shortened, since a secret
        cut in half is no longer recognised when the record is written."""
        return self.recorder.redact(text)

    # -- the model ------------------------------------------------------------------------------

    def current_tools(self) -> dict[str, Tool]:
        """The tools of this turn: the agent's and its workspaces' (read now), and the planning tools.
        The same dict (do not change it) until a tool or workspace is added; :attr:`_schemas` follows it."""
        agent = self.session.agent
        key = (tuple(agent.tools.values()), tuple(agent.workspaces.values()))
        if key != self._tools_key:
            self._tools_key, self._tools = key, _tool_set(agent, self.task_list is not None)
            self._schemas = [schema_of(tool) for tool in self._tools.values()]
        return self._tools

    def system_prompt(self) -> str:
        """The system prompt of this turn: skills and workspace previews as they are now, the task list."""
        agent = self.session.agent
        skills = tuple(agent.skills.values())
        if agent.workspaces or skills != self._prompt_key:  # previews are read live: never kept
            self._static_prompt = build_static_prompt(
                self.config.system_prompt, skills, agent.workspaces.values(), self.task_list is not None
            )
            if self.config.output_type is not None:
                self._static_prompt += "\n\n## Your final answer\n" + schema_instructions(self.config.output_type)
            self._prompt_key = None if agent.workspaces else skills
        return build_system_prompt(self._static_prompt, self.task_list)

    async def call_llm(self, step: int) -> LLMResponse | None:
        """One model turn (recorded, committed, answered, checked, recorded). ``None`` if the model failed
        or answered with a response of the wrong shape: the user is told, an ``error`` is recorded."""
        system = self.system_prompt()
        self.current_tools()
        try:
            if self.config.compactor is not None:
                await self.compact(step)
            turn = await self.turns.take(self.messages, step=step, system=system, tools=self._schemas,
                                         parameters=self.config.parameters)  # fmt: skip
        except AssertionError:
            raise  # a failed assertion (e.g. a test model's script ran out) is a bug, not an outage
        except LeaseLostError:
            raise  # the commit before the call found the session taken over: not the model's failure
        except Exception as exc:
            self.recorder.record_error("llm", exc, step=step, model=self.config.llm.name)
            self.recorder.reply(
                f"Sorry, I could not get an answer from the language model ({type(exc).__name__}: {exc}). "
                "Please try again in a moment."
            )
            return None
        if self._counting:
            self.meter.add("reasoning", "turn", self.config.llm.name, turn.response.usage)
        return turn.response

    async def compact(self, step: int) -> None:
        """Compact the conversation when it passes the compactor's threshold (see
        :func:`~baf.library.state.reasoning_guards.plan_compaction`); recorded as a ``compaction`` step."""
        compactor = self.config.compactor
        assert compactor is not None
        plan = plan_compaction(compactor, self.messages, self._request_message)
        if plan is None:
            return
        summary = None
        if compactor.mode == "summarize":
            prompt = COMPACTION_PROMPT.format(transcript=plan.transcript())
            turn = await self.turns.take([{"role": "user", "content": prompt}], step=step, purpose="compaction",
                                         parameters=self.config.parameters)  # fmt: skip
            self.meter.add("reasoning", "compaction", self.config.llm.name, turn.response.usage)
            summary = compactor.summary_message((turn.response.text or "").strip(), len(plan.old))
        compacted = plan.messages(summary)
        details = compaction_details(plan, compactor, self.messages, compacted)
        self.messages = compacted
        self.emit(ReasoningStepKind.COMPACTION, step, f"compacted {len(plan.old)} earlier messages ({compactor.mode})",
                  details)  # fmt: skip

    def budget_spent(self) -> str | None:
        """Why the budget is spent, or ``None`` (always ``None`` without a budget)."""
        return self.meter.exceeded() if self.config.budget is not None else None

    def stop_for_budget(self, step: int, response: LLMResponse, reason: str) -> None:
        """End the invocation: the budget is spent. Tool calls the last response asked for are not run;
        each gets a result saying so, so every call in the log has its result."""
        if response.tool_calls:
            self.messages.append(assistant_message(response, self.config.max_tool_arguments))
            calls = response.tool_calls
            self.emit(ReasoningStepKind.LLM_TOOL_CALLS, step, "calling " + ", ".join(c.name for c in calls),
                      {"tool_calls": [step_arguments(c) for c in calls], "text": response.text})  # fmt: skip
            content = f"Error: not run ({reason})."
            for call in response.tool_calls:
                self.recorder.record(RecordKind.TOOL_RESULT, {
                    "step": step, "call_id": call.id, "name": call.name, "content": content, "is_error": True,
                    "original_size": len(content),
                })  # fmt: skip
                self.messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        self.emit(ReasoningStepKind.BUDGET_SPENT, step, reason, {"reason": reason, **self.usage_details()})
        self.recorder.reply(budget_message(reason))

    def usage_details(self) -> dict[str, Any]:
        """The invocation's usage (and cost, with prices) so far."""
        details: dict[str, Any] = {"usage": self.meter.usage.to_dict()}
        if self.config.prices is not None:
            details["cost"] = self.meter.cost
        return details

    # -- tools ----------------------------------------------------------------------------------

    async def execute_tool_calls(self, step: int, response: LLMResponse) -> None:
        """Run the turn's tool calls (concurrently, bounded) and feed their results back in call order."""
        calls = response.tool_calls
        self.messages.append(assistant_message(response, self.config.max_tool_arguments))
        self.emit(ReasoningStepKind.LLM_TOOL_CALLS, step, "calling " + ", ".join(c.name for c in calls),
                  {"tool_calls": [step_arguments(c) for c in calls], "text": response.text})  # fmt: skip

        def after_call(outcome: ToolOutcome) -> None:
            call = outcome.call
            self.messages.append({"role": "tool", "tool_call_id": call.id, "content": outcome.content})
            planning: PlanningCall | None = outcome.context
            if planning is not None and not outcome.is_error:
                for kind, summary, details in planning.events:
                    self.emit(kind, step, summary, details)
                self.emit_task_list(planning.snapshot)
                return
            details = {"call_id": call.id, "name": call.name, "arguments": call.arguments,
                       "result": shorten(self.redact(outcome.content), STEP_PAYLOAD_LIMIT),
                       "is_error": outcome.is_error}  # fmt: skip
            if len(call.arguments) > STEP_PAYLOAD_LIMIT:  # a step keeps a shortened copy, with the size
                details["arguments"] = shorten(call.arguments, STEP_PAYLOAD_LIMIT)
                details["arguments_size"] = len(call.arguments)
            self.emit(ReasoningStepKind.TOOL_RESULT, step,
                      f"{call.name} {'failed' if outcome.is_error else 'returned'}", details)  # fmt: skip

        prepare = self._prepare if self.task_list is not None else None
        # Against the tools this turn's request offered (``call_llm`` read them): the ones the model chose
        # from.
        await self.runner.run(step, calls, self._tools, after_call=after_call, prepare=prepare,
                              always_live=_is_planning_tool)  # fmt: skip

    def _prepare(self, call: ToolCall, tool: Tool) -> PlanningCall | None:
        """A planning call gets the task list through a context variable, set in the task the call runs in."""
        if self.task_list is None or call.name not in PLANNING_TOOLS:
            return None
        planning = PlanningCall(self.task_list)
        planning_call.set(planning)
        return planning

    # -- answers --------------------------------------------------------------------------------

    def nudge_empty(self, step: int) -> None:
        """The model returned neither text nor tool calls: tell it so and go on."""
        self.emit(ReasoningStepKind.LLM_TEXT, step, "empty response", {"text": "", "final": False})
        self.messages.append(
            {"role": "system", "content": "Your last reply was empty. Answer the user, or call a tool."}
        )

    def push_back(self, step: int, text: str) -> None:
        """The model answered while tasks are open: refuse the answer and list them."""
        assert self.task_list is not None
        pending = self.task_list.pending()
        message = build_pushback_message(pending)
        self.messages.append({"role": "assistant", "content": text})
        self.messages.append({"role": "system", "content": message})
        self.emit(ReasoningStepKind.LLM_TEXT, step, _summary(self.redact(text), 120), {"text": text, "final": False})
        self.emit(ReasoningStepKind.PUSHBACK, step, f"{len(pending)} task(s) still open",
                  {"pending": [t.to_dict() for t in pending], "message": message})  # fmt: skip

    def check_answer(self, step: int, text: str) -> str | None:
        """Check a final answer against ``output_type`` and the reviewer. The outcome to end with
        (``answered`` or ``review_failed``), or ``None`` when the answer went back to the model."""
        config = self.config
        value: Any = text
        if config.output_type is not None:
            try:
                value = parse_structured(text, config.output_type)
            except StructuredOutputError as exc:
                name = config.output_type.__name__
                if self._repairs >= 1:
                    self.recorder.record_error("output", exc, step=step, output_type=name)
                    self.emit(ReasoningStepKind.LLM_TEXT, step, _summary(self.redact(text), 120),
                              {"text": text, "final": False})  # fmt: skip
                    self.recorder.reply(f"Sorry, I could not give the answer in the required form ({name}): {exc}")
                    raise _AnswerError("output_error") from None
                self._repairs += 1
                self._send_back(step, text, repair_message(name, str(exc)), ReasoningStepKind.OUTPUT_INVALID,
                                {"error": str(exc)})  # fmt: skip
                return None
            self.output = value
        if config.reviewer is not None:
            problem = config.reviewer(value)
            if problem is not None:
                if self._reviews < config.review_retries:
                    self._reviews += 1
                    message = f"Your answer was not accepted: {problem}\nFix it and give your final answer again."
                    details = {"passed": False, "problem": problem}
                    self._send_back(step, text, message, ReasoningStepKind.REVIEW, details)
                    return None
                self.emit(ReasoningStepKind.REVIEW, step, f"answer kept without passing review: {problem}",
                          {"passed": False, "problem": problem, "final": True})  # fmt: skip
                return "review_failed"
            self.emit(ReasoningStepKind.REVIEW, step, "answer passed review", {"passed": True})
        return "answered"

    def _send_back(self, step: int, text: str, message: str, kind: str, details: dict[str, Any]) -> None:
        """Refuse an answer: it and ``message`` join the conversation, and the loop takes another turn."""
        self.messages.append({"role": "assistant", "content": text})
        self.messages.append({"role": "user", "content": message})
        self.emit(ReasoningStepKind.LLM_TEXT, step, _summary(self.redact(text), 120), {"text": text, "final": False})
        self.emit(kind, step, _summary(message, 120), {**details, "message": message})

    def answer(self, step: int, text: str) -> None:
        """Accept the final answer: it is a step of its own, then the reply."""
        self.emit(ReasoningStepKind.LLM_TEXT, step, _summary(self.redact(text), 120), {"text": text, "final": True})
        self.recorder.reply(text)

    def finish(self, step: int, outcome: str) -> None:
        """Store the scratchpad and close the trace group."""
        tasks = self.task_list.snapshot() if self.task_list is not None else []
        config = self.config
        # Usage and cost are added when a budget or prices are set (records of other loops keep their shape).
        accounting = self.usage_details() if config.budget is not None or config.prices is not None else {}
        self.emit(ReasoningStepKind.REASONING_FINISHED, step, f"finished: {outcome}",
                  {"outcome": outcome, "steps": step + 1, **accounting})  # fmt: skip
        pad: dict[str, Any] = {"request": self.request, "outcome": outcome, "tasks": tasks, "trace": self.trace,
                               **accounting}  # fmt: skip
        if config.output_type is not None:
            pad["output"] = self.output.model_dump(mode="json") if self.output is not None else None
        self.recorder.set(SCRATCHPAD_KEY, pad)
        if config.memory_tool_results:
            self.remember_tool_results()

    def remember_tool_results(self) -> None:
        """Keep this invocation's tool calls and results for later ones (``memory_tool_results``), for as
        many exchanges as ``memory`` shows."""
        exchange = tool_exchange(self.messages, self._request_message)
        kept = [entry for entry in self.session.get(TOOL_MEMORY_KEY) or [] if entry[0] != self.request_seq]
        if exchange:
            kept.append([self.request_seq, exchange])
        limit = self.config.memory
        if limit is not None:
            kept = kept[-limit:] if limit else []
        self.recorder.set(TOOL_MEMORY_KEY, kept)

    # -- the step stream ------------------------------------------------------------------------

    def emit(self, kind: str, step: int, summary: str, details: dict[str, Any] | None = None) -> None:
        """Record a step and, when streaming, send it to the platform once it is durable."""
        reasoning_step = build_step(kind, step, summary, details or {})
        data = reasoning_step.to_dict()
        self.trace.append(data)
        if self.config.stream_steps:  # queued, not awaited: delivered in order right after the next commit
            self.recorder.record_shown(RecordKind.REASONING_STEP, data, "reply_reasoning_step", reasoning_step)
        else:  # the record says so: a worker following the session does not show it either
            self.recorder.record(RecordKind.REASONING_STEP, {**data, "streamed": False})

    def emit_task_list(self, snapshot: list[dict[str, Any]]) -> None:
        """Record a task-list snapshot and, when streaming, send it once durable."""
        if self.config.stream_steps:
            self.recorder.record_shown(RecordKind.TASK_LIST, {"tasks": snapshot}, "reply_task_list_update", snapshot)
        else:
            self.recorder.record(RecordKind.TASK_LIST, {"tasks": snapshot, "streamed": False})


def _is_planning_tool(tool: Tool) -> bool:
    """Planning tools only change the invocation's task list: they run again when it is resumed."""
    return PLANNING_TOOLS.get(tool.name) is tool


def _tool_set(agent: Agent, planning: bool) -> dict[str, Tool]:
    """The tools a reasoning state offers: the agent's, its workspaces', and with ``planning`` the
    planning tools. Raises ``ConfigurationError`` if one of the agent's tools takes a built-in's name:
    silently letting one win would hide a tool from the model, or hand it the wrong one."""
    tools = dict(agent.tools)
    builtin = {t.name: t for t in workspace_tools(list(agent.workspaces.values()))} if agent.workspaces else {}
    if planning:
        builtin.update(PLANNING_TOOLS)
    clashes = sorted(tools.keys() & builtin.keys())
    if clashes:
        raise ConfigurationError(
            f"agent {agent.name!r}: tool name(s) {', '.join(map(repr, clashes))} are taken by the reasoning "
            "state's workspace or planning tools; rename your tool(s)"
        )
    tools.update(builtin)
    return tools


def _step_kind(record: Record) -> str | None:
    """The reasoning-step kind of a ``reasoning_step`` record, else ``None``."""
    return str(record.data.get("kind")) if record.kind == RecordKind.REASONING_STEP else None


def _summary(text: str, limit: int) -> str:
    """One line for a step summary: white space folded, then shortened."""
    return shorten(" ".join(text.split()), limit)
