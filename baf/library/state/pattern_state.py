"""Reasoning patterns as state bodies: every pattern step recorded in the session log and streamed.

``pattern_body(pattern, llm)`` answers each user message with ``pattern.execute``. A
:class:`SessionObserver` turns what the run reports into records, write-ahead like the reasoning state:
each model call is recorded (``llm_request``) and committed before it is made, its answer
(``llm_response``) is committed before any tool it asks for runs, tool results (``tool_result``) are
recorded as they come, and every step is a
``reasoning_step`` record streamed to the platform once durable. Pattern ``llm_request`` records carry
the full message list of that call and a ``pattern`` field (pattern calls are independent, not one
growing conversation).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from baf.core.session import runtime_side
from baf.errors import LLMError, PatternError
from baf.library.state.pattern_variables import reasoning_variables
from baf.llm.base import LLM, LLMResponse
from baf.log.record import RecordKind
from baf.reasoning.patterns import LLMCallInfo, PatternStep, ReasoningPattern, ReasoningResult
from baf.reasoning.step import ReasoningStep, ReasoningStepKind
from baf.reasoning.tool import Tool
from baf.reasoning.workspace import workspace_tools

if TYPE_CHECKING:
    from baf.core.agent import Agent
    from baf.core.session import Session
    from baf.core.state import State

__all__ = ["RESULT_VARIABLE", "SessionObserver", "new_pattern_state", "pattern_body"]

#: The session variable holding the last run's summary (``ReasoningResult.summary()``).
RESULT_VARIABLE = "pattern_result"
DEFAULT_FAILURE_MESSAGE = "I could not finish reasoning about that. Please try rephrasing or narrowing it down."


class SessionObserver:
    """A :class:`~baf.reasoning.patterns.PatternObserver` that writes a run into a session."""

    def __init__(self, session: Session, stream_steps: bool = True) -> None:
        self.session = session
        self._live = runtime_side(session)  # commits before each model call, streams steps
        self.stream_steps = stream_steps

    def redact(self, text: str) -> str:
        """Redact the agent's secrets; a run calls it on a step summary before shortening it."""
        return self.session.agent.redactor.redact_text(text)

    def emit(self, kind: str, step: int, summary: str, details: dict[str, Any]) -> None:
        """Record one step and, when streaming, queue it for the platform after the next commit."""
        reasoning_step = ReasoningStep(kind, step, summary, details)
        self.session.record(RecordKind.REASONING_STEP, reasoning_step.to_dict())
        if self.stream_steps:
            self._live.queue_platform_call("reply_reasoning_step", reasoning_step)

    def on_step(self, step: PatternStep) -> None:
        """Record and stream a pattern step as a ``ReasoningStep``."""
        self.emit(step.kind, step.step, step.summary, step.details)

    async def before_llm_call(self, call: LLMCallInfo) -> None:
        """Record the request and commit: what the model is shown is durable before it is sent."""
        self.session.record(RecordKind.LLM_REQUEST, call.to_dict())
        await self._live.commit()

    def after_llm_call(self, call: LLMCallInfo, response: LLMResponse, latency_ms: float) -> None:
        """Record the model's answer."""
        self.session.record(RecordKind.LLM_RESPONSE, {"pattern": call.pattern, "call": call.call, "model": call.model,
                                                      "latency_ms": latency_ms, **response.to_dict()})  # fmt: skip

    async def before_tool_call(self, call_id: str, name: str) -> None:
        """Commit before a tool runs: the ``llm_response`` that asked for the call is durable first, so a
        crash in the tool never leaves a side effect the log cannot explain."""
        await self._live.commit()

    def on_tool_result(self, call_id: str, name: str, content: str, is_error: bool) -> None:
        """Record a tool result."""
        self.session.record(RecordKind.TOOL_RESULT,
                            {"call_id": call_id, "name": name, "content": content, "is_error": is_error})  # fmt: skip


def pattern_body(
    pattern: ReasoningPattern[Any],
    llm: LLM,
    *,
    tools: list[Tool] | None = None,
    stream_steps: bool = True,
    failure_message: str = DEFAULT_FAILURE_MESSAGE,
    request: Callable[[Session], str | None] | None = None,
    reply: bool = True,
    export_variables: bool = False,
) -> Callable[[Session], Awaitable[None]]:
    """Build a state body that answers each user message by running ``pattern``.

    Args:
        pattern: Any :class:`~baf.reasoning.patterns.ReasoningPattern` (a pipeline too).
        llm: The model.
        tools: Tools offered to the pattern; default: the agent's tools and its workspaces' tools.
        stream_steps: Send each step to the platform (steps are recorded either way).
        failure_message: The reply when the run ends without any output. A partial output is replied
            as is; the summary in the ``pattern_result`` variable says whether the run succeeded.
        request: What to reason about, read from the session when the state is entered; default: the
            text of the message being handled. ``None`` (no message) skips the run.
        reply: Reply with the answer (or the failure message); ``False`` leaves replying to later states.
        export_variables: Also set the variables of
            :func:`~baf.library.state.pattern_variables.reasoning_variables` (``reasoning_answer``, ...).
    """

    async def body(session: Session) -> None:
        if request is not None:
            problem = request(session)
        else:
            problem = session.event.text if session.event is not None else None
        if problem is None:
            return  # entered without a user message: nothing to reason about
        observer = SessionObserver(session, stream_steps)
        shown = session.agent.redactor.redact_text(problem)[:80]  # redact before cutting a secret in half
        observer.emit(ReasoningStepKind.REASONING_STARTED, 0, f"{pattern.name}: {shown}",
                      {"request": problem, "pattern": pattern.name})  # fmt: skip
        offered = tools if tools is not None else _agent_tools(session)
        outcome, steps = "error", 0
        try:
            result: ReasoningResult[Any] = await pattern.execute(
                llm, problem, tools=offered, session=session, observer=observer
            )
            steps, outcome = result.steps_taken, result.stop_reason
            session.set(RESULT_VARIABLE, result.summary())
            if export_variables:
                for name, value in reasoning_variables(result).items():
                    session.set(name, value)
            if reply:
                session.reply(result.text or failure_message)
        except (PatternError, LLMError) as exc:  # bad model output or an outage: told, recorded, contained
            session.record_error("pattern", exc, pattern=pattern.name)
            if reply:
                session.reply(f"{failure_message} ({type(exc).__name__}: {exc})")
        finally:
            observer.emit(ReasoningStepKind.REASONING_FINISHED, steps, f"finished: {outcome}",
                          {"outcome": outcome, "steps": steps, "pattern": pattern.name})  # fmt: skip

    body.__name__ = "pattern_body"
    return body


def new_pattern_state(
    agent: Agent,
    llm: LLM,
    pattern: ReasoningPattern[Any],
    name: str = "pattern_state",
    initial: bool = True,
    **options: Any,
) -> State:
    """Create a state on ``agent`` whose body is :func:`pattern_body` and return it.

    ``options`` are those of :func:`pattern_body`. No transitions are added; typically
    ``state.when_event().go_to(state)``.
    """
    state = agent.new_state(name, initial=initial)
    state.set_body(pattern_body(pattern, llm, **options))
    return state


def _agent_tools(session: Session) -> list[Tool]:
    agent = session.agent
    workspaces = list(agent.workspaces.values())
    return [*agent.tools.values(), *(workspace_tools(workspaces) if workspaces else [])]
