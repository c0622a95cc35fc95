"""Reasoning states: a state body that runs an LLM-driven plan → act → observe loop with tools.

Each turn the model may call tools (the agent's, its workspaces', and the planning tools ``add_tasks``,
``complete_task`` and ``skip_task`` that act on a request-scoped :class:`TaskList`), or answer. An answer
is accepted only when every task is completed or skipped; otherwise the loop pushes back and goes on.
Every turn is recorded before it is acted on (``llm_request``, ``llm_response``, ``tool_result``,
``reasoning_step``, ``task_list`` records) and every step streams to the platform after it is durable.

``_run_reasoning_loop`` is the loop, top to bottom; :class:`_ReasoningRun` holds the helpers it calls.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from baf.errors import ToolError
from baf.library.state.planning_tools import PLANNING_TOOLS, PlanningCall, planning_call
from baf.library.state.reasoning_prompt import (
    build_pushback_message,
    build_static_prompt,
    build_system_prompt,
    memory_messages,
)
from baf.library.state.reasoning_step import ReasoningStep, ReasoningStepKind
from baf.library.state.tasks import Task, TaskList
from baf.llm.base import LLM, LLMResponse, ToolCall
from baf.log.record import RecordKind
from baf.reasoning.tool import Tool
from baf.reasoning.workspace import workspace_tools

if TYPE_CHECKING:
    from baf.core.agent import Agent
    from baf.core.session import Session
    from baf.core.state import State

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
    if max_steps < 1:
        raise ValueError("max_steps must be at least 1")
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

    reasoning.__name__ = "reasoning_body"
    return reasoning


def new_reasoning_state(
    agent: Agent, llm: LLM, name: str = "reasoning_state", initial: bool = True, **options: Any
) -> State:
    """Create a state on ``agent`` whose body is :func:`reasoning_body` and return it.

    ``options`` are passed to :func:`reasoning_body`. No transitions are added: wire them yourself,
    typically ``state.when_event().go_to(state)``.
    """
    state = agent.new_state(name, initial=initial)
    state.set_body(reasoning_body(llm, **options))
    return state


async def _run_reasoning_loop(run: _ReasoningRun) -> None:
    """Plan → act → observe until an answer is accepted, the model fails, or the step budget runs out."""
    run.emit(ReasoningStepKind.REASONING_STARTED, 0, f"reasoning about: {_shorten(run.request, 80)}",
             {"request": run.request, "planning": run.task_list is not None})  # fmt: skip
    step, outcome = 0, "error"
    try:
        for step in range(run.config.max_steps):
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
    task_events: list[tuple[str, str, dict[str, Any]]] | None = None


class _ReasoningRun:
    """The state of one reasoning invocation and the helpers the loop calls."""

    def __init__(self, session: Session, config: ReasoningConfig, request: str) -> None:
        self.session = session
        self.config = config
        self.request = request
        self.task_list = TaskList() if config.enable_task_planning else None
        agent = session.agent
        workspaces = list(agent.workspaces.values())
        self.static_prompt = build_static_prompt(
            config.system_prompt, agent.skills.values(), workspaces, config.enable_task_planning
        )
        self.workspace_tools = {t.name: t for t in workspace_tools(workspaces)} if workspaces else {}
        before = session.event_seq if session.event_seq is not None else session.projection.last_seq + 1
        self.messages: list[dict[str, Any]] = memory_messages(session, before, config.memory)
        self.messages.append({"role": "user", "content": request})
        self.trace: list[dict[str, Any]] = []
        self._semaphore = asyncio.Semaphore(config.max_parallel_tools)
        self._recorded_messages = 0
        self._recorded_system: str | None = None
        self._recorded_tools: list[str] | None = None

    # -- the model ------------------------------------------------------------------------------

    def current_tools(self) -> dict[str, Tool]:
        """The tools of this turn: the agent's (read now), its workspaces', and the planning tools."""
        tools = {**self.session.agent.tools, **self.workspace_tools}
        if self.task_list is not None:
            tools.update(PLANNING_TOOLS)
        return tools

    async def call_llm(self, step: int) -> LLMResponse | None:
        """Record the request, commit, call the model, record its response. ``None`` if the model failed
        (the user is told and an error is recorded)."""
        system = build_system_prompt(self.static_prompt, self.task_list)
        tools = self.current_tools()
        schemas = [tool.schema for tool in tools.values()]
        request: dict[str, Any] = {"step": step, "model": self.config.llm.name,
                                   "messages": self.messages[self._recorded_messages:]}  # fmt: skip
        if system != self._recorded_system:
            request["system"] = self._recorded_system = system
        if list(tools) != self._recorded_tools:
            request["tools"] = schemas
            self._recorded_tools = list(tools)
        if self.config.parameters:
            request["parameters"] = self.config.parameters
        self._recorded_messages = len(self.messages)
        self.session.record(RecordKind.LLM_REQUEST, request)
        await self.session.commit()  # tool results are durable before the model sees them
        started = time.perf_counter()
        try:
            response = await self.config.llm.predict_with_tools(
                list(self.messages), schemas, parameters=self.config.parameters, system_message=system
            )
        except Exception as exc:
            self.session.record_error("llm", exc, step=step, model=self.config.llm.name)
            self.session.reply(
                f"Sorry, I could not get an answer from the language model ({type(exc).__name__}: {exc}). "
                "Please try again in a moment."
            )
            return None
        latency_ms = round((time.perf_counter() - started) * 1000, 3)
        self.session.record(
            RecordKind.LLM_RESPONSE,
            {"step": step, "model": self.config.llm.name, "latency_ms": latency_ms, **response.to_dict()},
        )
        return response

    # -- tools ----------------------------------------------------------------------------------

    async def execute_tool_calls(self, step: int, response: LLMResponse) -> None:
        """Run the turn's tool calls (concurrently, bounded) and feed their results back in call order."""
        calls = response.tool_calls
        self.messages.append(_assistant_tool_call_message(response))
        self.emit(ReasoningStepKind.LLM_TOOL_CALLS, step, "calling " + ", ".join(c.name for c in calls),
                  {"tool_calls": [c.to_dict() for c in calls], "text": response.text})  # fmt: skip
        await self.session.commit()  # the response is durable before any tool runs
        tools = self.current_tools()
        outcomes = await asyncio.gather(*(self._run_call(call, tools) for call in calls))
        for call, outcome in zip(calls, outcomes, strict=True):
            self.session.record(RecordKind.TOOL_RESULT, {
                "step": step, "call_id": call.id, "name": call.name, "content": outcome.content,
                "is_error": outcome.is_error, "original_size": outcome.original_size,
            })  # fmt: skip
            self.messages.append({"role": "tool", "tool_call_id": call.id, "content": outcome.content})
            if outcome.task_events:
                for kind, summary, details in outcome.task_events:
                    self.emit(kind, step, summary, details)
                self.emit_task_list()
            else:
                status = "failed" if outcome.is_error else "returned"
                self.emit(ReasoningStepKind.TOOL_RESULT, step, f"{call.name} {status}", {
                    "call_id": call.id, "name": call.name, "arguments": call.arguments,
                    "result": _shorten(outcome.content, _PAYLOAD_LIMIT), "is_error": outcome.is_error,
                })  # fmt: skip

    async def _run_call(self, call: ToolCall, tools: dict[str, Tool]) -> _CallOutcome:
        tool = tools.get(call.name)
        if tool is None:
            return _CallOutcome(
                f"Error: there is no tool named '{call.name}'. Available tools: {', '.join(tools)}.",
                True, 0,
            )
        planning = PlanningCall(self.task_list) if self.task_list is not None and call.name in PLANNING_TOOLS else None
        if planning is not None:
            planning_call.set(planning)  # this call runs in its own task, so the variable is call-local
        timeout = None if tool.timeout is not None else self.config.tool_timeout
        try:
            async with self._semaphore, asyncio.timeout(timeout):
                content, is_error = await tool.run(call.arguments, session=self.session), False
        except ToolError as exc:
            content, is_error = f"Error: {exc}", True
        except TimeoutError:
            content, is_error = f"Error: tool '{call.name}' did not finish within {timeout:g} seconds.", True
        size = len(content)
        limit = self.config.max_tool_output
        if size > limit:
            content = f"{content[:limit]}\n[output truncated: {size} characters in all, the first {limit} shown]"
        events = planning.events if planning is not None and not is_error else None
        return _CallOutcome(content, is_error, size, events)

    # -- answers --------------------------------------------------------------------------------

    def nudge_empty(self, step: int) -> None:
        """The model returned neither text nor tool calls: tell it so and go on."""
        self.emit(ReasoningStepKind.LLM_TEXT, step, "empty response", {"text": "", "final": False})
        self.messages.append({"role": "system", "content": "Your last reply was empty. Answer the user, or call a tool."})

    def push_back(self, step: int, text: str) -> None:
        """The model answered while tasks are open: refuse the answer and list them."""
        assert self.task_list is not None
        pending = self.task_list.pending()
        message = build_pushback_message(pending)
        self.messages.append({"role": "assistant", "content": text})
        self.messages.append({"role": "system", "content": message})
        self.emit(ReasoningStepKind.LLM_TEXT, step, _shorten(text, 120), {"text": text, "final": False})
        self.emit(ReasoningStepKind.PUSHBACK, step, f"{len(pending)} task(s) still open",
                  {"pending": [t.to_dict() for t in pending], "message": message})  # fmt: skip

    def answer(self, step: int, text: str) -> None:
        """Accept the final answer: it is a step of its own, then the reply."""
        self.emit(ReasoningStepKind.LLM_TEXT, step, _shorten(text, 120), {"text": text, "final": True})
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

    def emit_task_list(self) -> None:
        """Record a task-list snapshot and, when streaming, send it once durable."""
        assert self.task_list is not None
        snapshot = self.task_list.snapshot()
        self.session.record(RecordKind.TASK_LIST, {"tasks": snapshot})
        self._stream("reply_task_list_update", snapshot)

    def _stream(self, method: str, payload: Any) -> None:
        if not self.config.stream_steps:
            return
        send = getattr(self.session.platform, method, None)
        if send is None:
            return  # a platform without streaming support simply does not see the steps
        session = self.session

        async def deliver() -> None:
            await send(session, payload)

        # Queued, not awaited: delivered in order right after the next commit.
        session.queue_after_commit(deliver)


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


def _shorten(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[: limit - 1]}… [{len(text)} characters]"
