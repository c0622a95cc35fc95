"""Reasoning states: a state body that runs an LLM-driven plan → act → observe loop with tools.

Each turn the model may call tools (the agent's, its workspaces', and the planning tools ``add_tasks``,
``complete_task`` and ``skip_task`` that act on a request-scoped :class:`TaskList`), or answer. An answer
is accepted only when every task is completed or skipped; otherwise the loop pushes back and goes on.
Every turn is recorded before it is acted on (``llm_request``, ``llm_response``, ``tool_result``,
``reasoning_step``, ``task_list`` records) and every step streams to the platform after it is durable.

``_run_reasoning_loop`` is the loop, top to bottom; :class:`_ReasoningRun` holds the helpers it calls.

The body is resumable (``reasoning_body(...).resume``, see ``baf.core.engine``): after a crash, an
invocation that was in flight is rebuilt from its records by :meth:`_ReasoningRun.resume_from` and continues
from its last commit point. Model responses and tool results go through an optional
:class:`~baf.reasoning.effects.EffectSource`, which is how a resume reuses a recorded response and how a
deterministic re-run (``baf.replay.rerun``) serves everything from the log.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from baf.core.session import runtime_side
from baf.errors import ConfigurationError, ToolError, ToolExecutionError
from baf.library.state.planning_tools import PLANNING_TOOLS, PlanningCall, planning_call
from baf.library.state.reasoning_prompt import (
    build_pushback_message,
    build_static_prompt,
    build_system_prompt,
    memory_messages,
)
from baf.library.state.tasks import Task, TaskList
from baf.llm.base import LLM, LLMResponse, ToolCall
from baf.log.record import Record, RecordKind
from baf.reasoning.effects import (
    EffectSource,
    FullRequest,
    RecordedToolResult,
    ReplayGuardError,
    current_effect_source,
    rebuild_requests,
)
from baf.reasoning.step import ReasoningStep, ReasoningStepKind
from baf.reasoning.tool import Tool
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
INTERRUPTED_TOOL_MESSAGE = (
    "Error: this call was interrupted by a restart of the agent before its result was recorded. It may or "
    "may not have taken effect; check before calling it again."
)
_PAYLOAD_LIMIT = 4000


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
    """
    for label, value in (("max_steps", max_steps), ("max_parallel_tools", max_parallel_tools),
                         ("max_tool_output", max_tool_output)):  # fmt: skip
        if value < 1:  # max_parallel_tools=0 would wait forever on the first tool call
            raise ValueError(f"{label} must be at least 1, got {value}")
    if not tool_timeout > 0:
        raise ValueError(f"tool_timeout must be a positive number of seconds, got {tool_timeout}")
    if memory is not None and memory < 0:
        raise ValueError(f"memory must be a number of exchanges (0 for none) or None for all, got {memory}")
    config = ReasoningConfig(
        llm, max_steps, system_prompt, fallback_message, enable_task_planning, stream_steps,
        memory, tool_timeout, max_parallel_tools, max_tool_output, parameters,
    )  # fmt: skip

    async def reasoning(session: Session) -> None:
        event = session.event
        request = event.text if event is not None else None
        if request is None:
            return  # entered without a user message (e.g. at session start): nothing to answer
        await _run_reasoning_loop(_ReasoningRun(session, config, request))

    async def resume(session: Session, records: Sequence[Record]) -> None:
        """Continue the invocation a crash interrupted; ``records`` are those this body had written."""
        run = _ReasoningRun.resume_from(session, config, records)
        if run is None:
            await reasoning(session)  # nothing of it was durable: run it from the start
        elif not run.finished:
            await _run_reasoning_loop(run)

    def check_agent(agent: Agent) -> None:
        """Refuse to start an agent whose tools clash with this state's built-in ones (see ``Runtime.start``)."""
        _tool_set(agent, enable_task_planning)

    reasoning.__name__ = "reasoning_body"
    reasoning.resume = resume  # type: ignore[attr-defined]  # the engine's resume hook
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
    ``max_parallel_tools``, ``max_tool_output``, ``parameters``), are those of :func:`reasoning_body`.
    No transitions are added: wire them yourself, typically ``state.when_event().go_to(state)``.
    """
    body = reasoning_body(
        llm, max_steps, system_prompt, fallback_message, enable_task_planning, stream_steps, **options
    )
    state = agent.new_state(name, initial=initial)
    state.set_body(body)
    return state


async def _run_reasoning_loop(run: _ReasoningRun) -> None:
    """Plan → act → observe until an answer is accepted, the model fails, or the step budget runs out.
    A resumed run starts at its first step without a recorded response (see :meth:`_ReasoningRun.resume_from`)."""
    if not run.resumed:
        run.emit(ReasoningStepKind.REASONING_STARTED, 0, f"reasoning about: {_summary(run.redact(run.request), 80)}",
                 {"request": run.request, "planning": run.task_list is not None})  # fmt: skip
    step, outcome = run.first_step, "error"
    try:
        for step in range(run.first_step, run.config.max_steps):
            response = await run.call_llm(step)
            if response is None:
                outcome = "llm_error"
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
            run.answer(step, text)
            outcome = "answered"
            return
        run.emit(ReasoningStepKind.MAX_STEPS, step, f"no answer after {run.config.max_steps} steps",
                 {"max_steps": run.config.max_steps})  # fmt: skip
        run.session.reply(run.config.fallback_message)
        outcome = "max_steps"
    finally:
        run.finish(step, outcome)


@dataclass(slots=True)
class _CallOutcome:
    content: str
    is_error: bool
    original_size: int
    planning: PlanningCall | None = None  # set when a planning tool succeeded


class _ReasoningRun:
    """The state of one reasoning invocation and the helpers the loop calls."""

    def __init__(
        self, session: Session, config: ReasoningConfig, request: str, source: EffectSource | None = None
    ) -> None:
        self.session = session
        # The runtime's side: the loop commits before each model call and tool run, and streams steps.
        self.live = runtime_side(session)
        self.config = config
        self.request = request
        #: Answers model and tool calls instead of the live model and tools (resume, re-run), if set.
        self.source = source if source is not None else current_effect_source()
        #: Where the loop starts; after a resume, the step whose response was not yet acted on.
        self.first_step = 0
        self.resumed = False
        self.finished = False
        # After a resume: records the log already holds, which the loop must not write again.
        self._written: set[tuple[str, int]] = set()
        self._pending_request: FullRequest | None = None
        self.task_list = TaskList() if config.enable_task_planning else None
        # current_tools() and system_prompt() are rebuilt only when what they are made of changes.
        self._tools_key: tuple[tuple[Tool, ...], tuple[Workspace, ...]] | None = None
        self._tools: dict[str, Tool] = {}
        self._schemas: list[dict[str, Any]] = []
        self._prompt_key: tuple[Skill, ...] | None = None
        self._static_prompt = ""
        live = self.live
        before = live.event_seq if live.event_seq is not None else live.projection.last_seq + 1
        self.messages: list[dict[str, Any]] = memory_messages(session, before, config.memory)
        self.messages.append({"role": "user", "content": request})
        self.trace: list[dict[str, Any]] = []
        self._semaphore = asyncio.Semaphore(config.max_parallel_tools)
        self._recorded_messages = 0
        self._recorded_system: str | None = None
        self._recorded_tools: list[Tool] | None = None

    @classmethod
    def resume_from(cls, session: Session, config: ReasoningConfig, records: Sequence[Record]) -> _ReasoningRun | None:
        """Rebuild the invocation a crash interrupted from the records it wrote (``None`` if it wrote none).

        Records are durable at the loop's commit points only: after an ``llm_request`` (the model call
        was in flight) and after the ``llm_tool_calls`` step (the tools were running; each tool's own
        records may follow). Tool results of a turn are recorded with the next request, so the last
        recorded request is the step to continue: its response is used if recorded, else the recorded
        request is sent again; its tool calls run again only when idempotent.
        """
        starts = [i for i, r in enumerate(records) if _step_kind(r) == ReasoningStepKind.REASONING_STARTED]
        if not starts:
            return None
        invocation = list(records[starts[-1]:])
        run = cls(session, config, str(invocation[0].data["details"]["request"]))
        run.resumed = True
        run.trace = [dict(r.data) for r in invocation if r.kind == RecordKind.REASONING_STEP]
        run.finished = any(_step_kind(r) == ReasoningStepKind.REASONING_FINISHED for r in invocation)
        snapshots = [r.data["tasks"] for r in invocation if r.kind == RecordKind.TASK_LIST]
        if run.task_list is not None and snapshots:
            run.task_list = TaskList.from_snapshot(snapshots[-1])
        requests = rebuild_requests(invocation)
        if run.finished or not requests:
            return run
        last = requests[-1]
        after = [r for r in invocation if last.seq is not None and r.seq > last.seq and r.data.get("step") == last.step]
        if any(r.kind == RecordKind.TOOL_RESULT for r in after):
            raise RuntimeError(f"cannot resume: tool results of step {last.step} were recorded before its next request")
        response = next((r for r in after if r.kind == RecordKind.LLM_RESPONSE), None)
        run.source = _ResumeSource(last.step, LLMResponse.from_dict(response.data) if response else None, run.source)
        run._written.add((RecordKind.LLM_REQUEST, last.step))
        if response is not None:
            run._written.add((RecordKind.LLM_RESPONSE, last.step))
        if any(_step_kind(r) == ReasoningStepKind.LLM_TOOL_CALLS for r in after):
            run._written.add((ReasoningStepKind.LLM_TOOL_CALLS, last.step))
        run.first_step, run._pending_request = last.step, last
        run.messages = list(last.messages)
        run._recorded_messages, run._recorded_system = len(last.messages), last.system
        tools = list(run.current_tools().values())
        if [_schema_of(tool) for tool in tools] == last.tools:  # unchanged: the next request need not repeat them
            run._recorded_tools = tools
        return run

    def redact(self, text: str) -> str:
        """``text`` with the agent's secrets replaced: for text about to be shortened, since a secret
        cut in half is no longer recognised when the record is written."""
        return self.session.agent.redactor.redact_text(text)

    # -- the model ------------------------------------------------------------------------------

    def current_tools(self) -> dict[str, Tool]:
        """The tools of this turn: the agent's and its workspaces' (read now), and the planning tools.
        The same dict (do not change it) until a tool or workspace is added; :attr:`_schemas` follows it."""
        agent = self.session.agent
        key = (tuple(agent.tools.values()), tuple(agent.workspaces.values()))
        if key != self._tools_key:
            self._tools_key, self._tools = key, _tool_set(agent, self.task_list is not None)
            self._schemas = [_schema_of(tool) for tool in self._tools.values()]
        return self._tools

    def system_prompt(self) -> str:
        """The system prompt of this turn: skills and workspace previews as they are now, the task list."""
        agent = self.session.agent
        skills = tuple(agent.skills.values())
        if agent.workspaces or skills != self._prompt_key:  # previews are read live: never kept
            self._static_prompt = build_static_prompt(
                self.config.system_prompt, skills, agent.workspaces.values(), self.task_list is not None
            )
            self._prompt_key = None if agent.workspaces else skills
        return build_system_prompt(self._static_prompt, self.task_list)

    async def call_llm(self, step: int) -> LLMResponse | None:
        """Record the request, commit, get the response (from the effect source if it has one, else from
        the model) and record it. ``None`` if the model failed (the user is told, an error is recorded)."""
        request = self.record_request(step)
        await self.live.commit()  # tool results are durable before the model sees them
        started = time.perf_counter()
        response = self.source.llm_response(request) if self.source is not None else None
        if response is None:
            try:
                response = await self.config.llm.predict_with_tools(
                    request.messages, request.tools, parameters=request.parameters or None,
                    system_message=request.system,
                )  # fmt: skip
            except AssertionError:
                raise  # a failed assertion (e.g. a test model's script ran out) is a bug, not an outage
            except Exception as exc:
                self.session.record_error("llm", exc, step=step, model=self.config.llm.name)
                self.session.reply(
                    f"Sorry, I could not get an answer from the language model ({type(exc).__name__}: {exc}). "
                    "Please try again in a moment."
                )
                return None
        latency_ms = round((time.perf_counter() - started) * 1000, 3)
        if (RecordKind.LLM_RESPONSE, step) not in self._written:
            self.session.record(
                RecordKind.LLM_RESPONSE,
                {"step": step, "model": self.config.llm.name, "provider": self.config.llm.provider,
                 "latency_ms": latency_ms, **response.to_dict()},
            )
        return response

    def record_request(self, step: int) -> FullRequest:
        """Build this turn's request and record what changed since the previous one. A resumed run sends
        its recorded request again as it was recorded."""
        if self._pending_request is not None and self._pending_request.step == step:
            return self._pending_request
        system = self.system_prompt()
        tools = self.current_tools()
        schemas = self._schemas
        data: dict[str, Any] = {"step": step, "model": self.config.llm.name,
                                "messages": self.messages[self._recorded_messages:]}  # fmt: skip
        if system != self._recorded_system:
            data["system"] = self._recorded_system = system
        offered = list(tools.values())
        if offered != self._recorded_tools:  # Tool objects compare by identity: a same-named new tool counts
            data["tools"] = schemas
            self._recorded_tools = offered
        if self.config.parameters:
            data["parameters"] = self.config.parameters
        self._recorded_messages = len(self.messages)
        record = self.session.record(RecordKind.LLM_REQUEST, data)
        return FullRequest(step, list(self.messages), system, list(schemas), dict(self.config.parameters or {}),
                           self.config.llm.name, record.seq)  # fmt: skip

    # -- tools ----------------------------------------------------------------------------------

    async def execute_tool_calls(self, step: int, response: LLMResponse) -> None:
        """Run the turn's tool calls (concurrently, bounded) and feed their results back in call order."""
        calls = response.tool_calls
        self.messages.append(_assistant_tool_call_message(response))
        if (ReasoningStepKind.LLM_TOOL_CALLS, step) not in self._written:
            self.emit(ReasoningStepKind.LLM_TOOL_CALLS, step, "calling " + ", ".join(c.name for c in calls),
                      {"tool_calls": [c.to_dict() for c in calls], "text": response.text})  # fmt: skip
        await self.live.commit()  # the response is durable before any tool runs
        tools = self.current_tools()
        if len(calls) == 1:  # the usual turn: one task of its own (context as with gather), no gather future
            outcomes = [await asyncio.create_task(self._run_call(calls[0], tools, step))]
        else:
            outcomes = await asyncio.gather(*(self._run_call(call, tools, step) for call in calls))
        for call, outcome in zip(calls, outcomes, strict=True):
            self.session.record(RecordKind.TOOL_RESULT, {
                "step": step, "call_id": call.id, "name": call.name, "content": outcome.content,
                "is_error": outcome.is_error, "original_size": outcome.original_size,
            })  # fmt: skip
            self.messages.append({"role": "tool", "tool_call_id": call.id, "content": outcome.content})
            if outcome.planning is not None:
                for kind, summary, details in outcome.planning.events:
                    self.emit(kind, step, summary, details)
                self.emit_task_list(outcome.planning.snapshot)
            else:
                status = "failed" if outcome.is_error else "returned"
                self.emit(ReasoningStepKind.TOOL_RESULT, step, f"{call.name} {status}", {
                    "call_id": call.id, "name": call.name, "arguments": call.arguments,
                    "result": _shorten(self.redact(outcome.content), _PAYLOAD_LIMIT), "is_error": outcome.is_error,
                })  # fmt: skip

    async def _run_call(self, call: ToolCall, tools: dict[str, Tool], step: int) -> _CallOutcome:
        """Run one call. Every failure becomes an error message for the model; the loop goes on.

        The arguments are always validated by the tool as it is now; the effect source (resume, re-run)
        may then answer instead of the tool. Planning tools always run: they only touch the task list."""
        tool = tools.get(call.name)
        if tool is None:
            content = f"Error: there is no tool named '{call.name}'. Available tools: {', '.join(tools)}."
            return _CallOutcome(content, True, len(content))
        planning = PlanningCall(self.task_list) if self.task_list is not None and call.name in PLANNING_TOOLS else None
        if planning is not None:
            planning_call.set(planning)  # this call runs in its own task, so the variable is call-local
        timeout = None if tool.timeout is not None else self.config.tool_timeout
        try:
            args = tool.validate_args(call.arguments)
            served = self.source.tool_result(step, call, tool) if self.source and planning is None else None
            if served is not None:
                return _CallOutcome(served.content, served.is_error, served.original_size)
            async with self._semaphore:
                async with asyncio.timeout(timeout):  # the clock starts when the call may run, not before
                    content, is_error = tool.render_result(await tool.call(args, session=self.session)), False
        except ReplayGuardError:
            raise  # a re-run asked for a result the log lacks: never turn that into a tool error
        except ToolError as exc:
            content, is_error = f"Error: {exc}", True
            if isinstance(exc, ToolExecutionError):  # the tool's own code raised: keep its traceback
                self.session.record_error("tool", exc.__cause__ or exc, tool=call.name, call_id=call.id, step=step)
        except TimeoutError:
            content, is_error = f"Error: tool '{call.name}' did not finish within {timeout:g} seconds.", True
        except Exception as exc:  # a bug below the tool: still an answer for the model, never a dead loop
            self.session.record_error("tool", exc, tool=call.name, call_id=call.id, step=step)
            content, is_error = f"Error: tool '{call.name}' failed: {type(exc).__name__}: {exc}", True
        size = len(content)
        limit = self.config.max_tool_output
        if size > limit:
            # Redact before cutting: a secret cut in half would no longer be recognised at write time.
            kept = self.redact(content)[:limit]
            content = f"{kept}\n[output truncated: {size} characters in all, the first {limit} shown]"
        return _CallOutcome(content, is_error, size, None if is_error else planning)

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

    def answer(self, step: int, text: str) -> None:
        """Accept the final answer: it is a step of its own, then the reply."""
        self.emit(ReasoningStepKind.LLM_TEXT, step, _summary(self.redact(text), 120), {"text": text, "final": True})
        self.session.reply(text)

    def finish(self, step: int, outcome: str) -> None:
        """Store the scratchpad and close the trace group."""
        tasks = self.task_list.snapshot() if self.task_list is not None else []
        self.emit(ReasoningStepKind.REASONING_FINISHED, step, f"finished: {outcome}",
                  {"outcome": outcome, "steps": step + 1})  # fmt: skip
        self.session.set(SCRATCHPAD_KEY, {"request": self.request, "outcome": outcome, "tasks": tasks,
                                          "trace": self.trace})  # fmt: skip

    # -- the step stream ------------------------------------------------------------------------

    def emit(self, kind: str, step: int, summary: str, details: dict[str, Any] | None = None) -> None:
        """Record a step and, when streaming, send it to the platform once it is durable."""
        reasoning_step = ReasoningStep(kind, step, summary, details or {})
        data = reasoning_step.to_dict()
        self.session.record(RecordKind.REASONING_STEP, data)
        self.trace.append(data)
        self._stream("reply_reasoning_step", reasoning_step)

    def emit_task_list(self, snapshot: list[dict[str, Any]]) -> None:
        """Record a task-list snapshot and, when streaming, send it once durable."""
        self.session.record(RecordKind.TASK_LIST, {"tasks": snapshot})
        self._stream("reply_task_list_update", snapshot)

    def _stream(self, method: str, payload: Any) -> None:
        if self.config.stream_steps:  # queued, not awaited: delivered in order right after the next commit
            self.live.queue_platform_call(method, payload)


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


_SCHEMAS: weakref.WeakKeyDictionary[Tool, dict[str, Any]] = weakref.WeakKeyDictionary()


class _ResumeSource:
    """Effects of a resumed invocation: the recorded response of its last step (if any), and what to do
    with that step's tool calls, whose results were not recorded: run idempotent tools again, tell the
    model the others were interrupted. Later steps are live (or go to ``then``, a re-run's source)."""

    def __init__(self, step: int, response: LLMResponse | None, then: EffectSource | None) -> None:
        self.step = step
        self.response = response
        self.then = then

    def llm_response(self, request: FullRequest) -> LLMResponse | None:
        if request.step == self.step and self.response is not None:
            return self.response
        return self.then.llm_response(request) if self.then is not None else None

    def tool_result(self, step: int, call: ToolCall, tool: Tool) -> RecordedToolResult | None:
        if step != self.step or self.response is None:
            # Another step, or the model was asked again (its response was never recorded): these calls
            # are new, nothing of them can have run before the crash.
            return self.then.tool_result(step, call, tool) if self.then is not None else None
        if tool.idempotent:
            return None
        return RecordedToolResult(INTERRUPTED_TOOL_MESSAGE, True, len(INTERRUPTED_TOOL_MESSAGE))


def _step_kind(record: Record) -> str | None:
    """The reasoning-step kind of a ``reasoning_step`` record, else ``None``."""
    return str(record.data.get("kind")) if record.kind == RecordKind.REASONING_STEP else None


def _schema_of(tool: Tool) -> dict[str, Any]:
    """The tool's schema, built once per tool: ``Tool.schema`` hands out a fresh copy on every access,
    which cost more than the rest of a turn. Models receive this shared dict and must not mutate it."""
    schema = _SCHEMAS.get(tool)
    if schema is None:
        schema = _SCHEMAS[tool] = tool.schema
    return schema


def _assistant_tool_call_message(response: LLMResponse) -> dict[str, Any]:
    """The assistant message announcing tool calls; the results that follow refer to its call ids."""
    return {
        "role": "assistant",
        "content": response.text,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in response.tool_calls
        ],
    }


def _summary(text: str, limit: int) -> str:
    """One line for a step summary: white space folded, then shortened."""
    return _shorten(" ".join(text.split()), limit)


def _shorten(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[: limit - 1]}… [{len(text)} characters]"
