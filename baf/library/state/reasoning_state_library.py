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
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from baf.errors import ToolError, ToolExecutionError
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

    reasoning.__name__ = "reasoning_body"
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
    """Plan → act → observe until an answer is accepted, the model fails, or the step budget runs out."""
    run.emit(ReasoningStepKind.REASONING_STARTED, 0, f"reasoning about: {_summary(run.request, 80)}",
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
    planning: PlanningCall | None = None  # set when a planning tool succeeded


class _ReasoningRun:
    """The state of one reasoning invocation and the helpers the loop calls."""

    def __init__(self, session: Session, config: ReasoningConfig, request: str) -> None:
        self.session = session
        self.config = config
        self.request = request
        self.task_list = TaskList() if config.enable_task_planning else None
        self._workspaces: list[Workspace] = []
        self._workspace_tools: dict[str, Tool] = {}
        before = session.event_seq if session.event_seq is not None else session.projection.last_seq + 1
        self.messages: list[dict[str, Any]] = memory_messages(session, before, config.memory)
        self.messages.append({"role": "user", "content": request})
        self.trace: list[dict[str, Any]] = []
        self._semaphore = asyncio.Semaphore(config.max_parallel_tools)
        self._recorded_messages = 0
        self._recorded_system: str | None = None
        self._recorded_tools: list[Tool] | None = None

    # -- the model ------------------------------------------------------------------------------

    def current_tools(self) -> dict[str, Tool]:
        """The tools of this turn: the agent's and its workspaces' (read now), and the planning tools."""
        workspaces = list(self.session.agent.workspaces.values())
        if workspaces != self._workspaces:  # built again only when a workspace was added
            self._workspaces = workspaces
            self._workspace_tools = {t.name: t for t in workspace_tools(workspaces)} if workspaces else {}
        tools = {**self.session.agent.tools, **self._workspace_tools}
        if self.task_list is not None:
            tools.update(PLANNING_TOOLS)
        return tools

    def system_prompt(self) -> str:
        """The system prompt of this turn: skills and workspace previews as they are now, the task list."""
        agent = self.session.agent
        static = build_static_prompt(
            self.config.system_prompt, agent.skills.values(), agent.workspaces.values(), self.task_list is not None
        )
        return build_system_prompt(static, self.task_list)

    async def call_llm(self, step: int) -> LLMResponse | None:
        """Record the request, commit, call the model, record its response. ``None`` if the model failed
        (the user is told and an error is recorded)."""
        system = self.system_prompt()
        tools = self.current_tools()
        schemas = [_schema_of(tool) for tool in tools.values()]
        request: dict[str, Any] = {"step": step, "model": self.config.llm.name,
                                   "messages": self.messages[self._recorded_messages:]}  # fmt: skip
        if system != self._recorded_system:
            request["system"] = self._recorded_system = system
        offered = list(tools.values())
        if offered != self._recorded_tools:  # Tool objects compare by identity: a same-named new tool counts
            request["tools"] = schemas
            self._recorded_tools = offered
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
                    "result": _shorten(outcome.content, _PAYLOAD_LIMIT), "is_error": outcome.is_error,
                })  # fmt: skip

    async def _run_call(self, call: ToolCall, tools: dict[str, Tool], step: int) -> _CallOutcome:
        """Run one call. Every failure becomes an error message for the model; the loop goes on."""
        tool = tools.get(call.name)
        if tool is None:
            content = f"Error: there is no tool named '{call.name}'. Available tools: {', '.join(tools)}."
            return _CallOutcome(content, True, len(content))
        planning = PlanningCall(self.task_list) if self.task_list is not None and call.name in PLANNING_TOOLS else None
        if planning is not None:
            planning_call.set(planning)  # this call runs in its own task, so the variable is call-local
        timeout = None if tool.timeout is not None else self.config.tool_timeout
        try:
            async with self._semaphore:
                async with asyncio.timeout(timeout):  # the clock starts when the call may run, not before
                    content, is_error = await tool.run(call.arguments, session=self.session), False
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
            content = f"{content[:limit]}\n[output truncated: {size} characters in all, the first {limit} shown]"
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
        self.emit(ReasoningStepKind.LLM_TEXT, step, _summary(text, 120), {"text": text, "final": False})
        self.emit(ReasoningStepKind.PUSHBACK, step, f"{len(pending)} task(s) still open",
                  {"pending": [t.to_dict() for t in pending], "message": message})  # fmt: skip

    def answer(self, step: int, text: str) -> None:
        """Accept the final answer: it is a step of its own, then the reply."""
        self.emit(ReasoningStepKind.LLM_TEXT, step, _summary(text, 120), {"text": text, "final": True})
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


_SCHEMAS: weakref.WeakKeyDictionary[Tool, dict[str, Any]] = weakref.WeakKeyDictionary()


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
