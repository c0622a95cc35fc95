"""Reasoning patterns as state bodies: every pattern step recorded in the session log and streamed.

``pattern_body(pattern, llm)`` answers each user message with ``pattern.execute``. Model turns and
tool calls go through the reasoning kernel, as the reasoning state's do, and write the same records
(write-ahead: each ``llm_request`` committed before the model call, the ``llm_response`` before any tool
it asks for runs, each ``tool_result`` as it comes; see ``baf.reasoning.turn``). A
:class:`SessionObserver` holds the invocation's :class:`~baf.reasoning.recorder.Recorder` and turns
every pattern step into a ``reasoning_step`` record, streamed to the platform once durable.

The body is resumable like the reasoning state's: after a crash the run goes again from its start over
the records it had written (recorded model responses and tool results served, nothing written twice,
a non-idempotent tool call without a recorded result reported to the model as interrupted), then on.

With ``memory=True`` the run gets a working memory (:mod:`baf.reasoning.patterns.memory`) backed by the
session: each scope ``reasoning:<pattern>`` is a session variable, written through the run's recorder
like its other records, so a resumed run skips what it had written and finds the memory as it was.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from baf.core.session import runtime_side
from baf.errors import ApprovalPending, LLMError, PatternError
from baf.library.state.pattern_variables import reasoning_variables
from baf.library.state.recording import session_recorder
from baf.llm.base import LLM, LLMResponse
from baf.log.record import Record, RecordKind
from baf.reasoning.effects import current_effect_source
from baf.reasoning.patterns import LLMCallInfo, PatternStep, ReasoningPattern, ReasoningResult
from baf.reasoning.patterns.memory import MemoryManager, is_scope
from baf.reasoning.recorder import Recorder
from baf.reasoning.resume import ResumeEffects
from baf.reasoning.step import ReasoningStepKind, build_step
from baf.reasoning.tool import Tool
from baf.reasoning.workspace import workspace_tools

if TYPE_CHECKING:
    from baf.core.agent import Agent
    from baf.core.session import Session
    from baf.core.state import State

__all__ = ["RESULT_VARIABLE", "SessionObserver", "new_pattern_state", "pattern_body", "session_memory"]

#: The session variable holding the last run's summary (``ReasoningResult.summary()``).
RESULT_VARIABLE = "pattern_result"
DEFAULT_FAILURE_MESSAGE = "I could not finish reasoning about that. Please try rephrasing or narrowing it down."


class SessionObserver:
    """A :class:`~baf.reasoning.patterns.PatternObserver` that writes a run into a session.

    The model turns and tool results are recorded by the kernel through :attr:`recorder`; the
    observer records and streams the steps."""

    def __init__(self, session: Session, stream_steps: bool = True, recorder: Recorder | None = None) -> None:
        self.session = session
        self.stream_steps = stream_steps
        #: Where the run's records go; a resumed run's recorder skips what was recorded before the crash.
        self.recorder = recorder if recorder is not None else session_recorder(session)

    def redact(self, text: str) -> str:
        """Redact the agent's secrets; a run calls it on a step summary before shortening it."""
        return self.recorder.redact(text)

    def emit(self, kind: str, step: int, summary: str, details: dict[str, Any]) -> None:
        """Record one step and, when streaming, queue it for the platform after the next commit."""
        reasoning_step = build_step(kind, step, summary, details)
        if self.stream_steps:
            self.recorder.record_shown(RecordKind.REASONING_STEP, reasoning_step.to_dict(), "reply_reasoning_step",
                                       reasoning_step)  # fmt: skip
        else:  # the record says so: a worker following the session does not show it either
            self.recorder.record(RecordKind.REASONING_STEP, {**reasoning_step.to_dict(), "streamed": False})

    def on_step(self, step: PatternStep) -> None:
        """Record and stream a pattern step as a ``ReasoningStep``."""
        self.emit(step.kind, step.step, step.summary, step.details)

    @property
    def observes_llm_calls(self) -> bool:
        """Whether a subclass overrides :meth:`before_llm_call` or :meth:`after_llm_call`: without one,
        runs skip both calls (``PatternObserver``)."""
        cls = type(self)
        return cls.before_llm_call is not SessionObserver.before_llm_call or (
            cls.after_llm_call is not SessionObserver.after_llm_call
        )

    async def before_llm_call(self, call: LLMCallInfo) -> None:
        """Nothing: the kernel records the request and commits before the call."""

    def after_llm_call(self, call: LLMCallInfo, response: LLMResponse, latency_ms: float) -> None:
        """Nothing: the kernel records the response."""

    def on_tool_result(self, call_id: str, name: str, content: str, is_error: bool) -> None:
        """Nothing: the kernel records the result."""


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
    memory: bool = False,
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
        memory: Run with a working memory kept in the session (:func:`session_memory`): each pattern of
            the run (each stage of a pipeline) has its scope, a session variable ``reasoning:<name>``,
            and sees the outputs the other scopes hold, from this run and earlier ones.
    """

    async def body(session: Session) -> None:
        if request is not None:
            problem = request(session)
        else:
            problem = session.event.text if session.event is not None else None
        if problem is None:
            return  # entered without a user message: nothing to reason about
        await run(session, problem, session_recorder(session))

    async def run(session: Session, problem: str, recorder: Recorder) -> None:
        observer = SessionObserver(session, stream_steps, recorder)
        shown = recorder.redact(problem)[:80]  # redact before cutting a secret in half
        observer.emit(ReasoningStepKind.REASONING_STARTED, 0, f"{pattern.name}: {shown}",
                      {"request": problem, "pattern": pattern.name})  # fmt: skip
        offered = tools if tools is not None else _agent_tools(session)
        outcome, steps, paused = "error", 0, False
        try:
            working = session_memory(session, recorder) if memory else None
            result: ReasoningResult[Any] = await pattern.execute(
                llm, problem, tools=offered, session=session, observer=observer, memory=working
            )
            steps, outcome = result.steps_taken, result.stop_reason
            recorder.set(RESULT_VARIABLE, result.summary())
            if export_variables:
                for name, value in reasoning_variables(result).items():
                    recorder.set(name, value)
            if reply:
                recorder.reply(result.text or failure_message)
        except (PatternError, LLMError) as exc:  # bad model output or an outage: told, recorded, contained
            recorder.record_error("pattern", exc, pattern=pattern.name)
            if reply:
                recorder.reply(f"{failure_message} ({type(exc).__name__}: {exc})")
        except ApprovalPending:
            paused = True  # tool calls wait for a human; the decision continues this run from its records
        finally:
            if not paused:
                observer.emit(ReasoningStepKind.REASONING_FINISHED, steps, f"finished: {outcome}",
                              {"outcome": outcome, "steps": steps, "pattern": pattern.name})  # fmt: skip

    async def resume(session: Session, records: Sequence[Record], decided: Collection[str] = ()) -> None:
        """Continue the run a crash interrupted, or one that paused for approval once its calls are
        ``decided``; ``records`` are those this body had written."""
        starts = [i for i, r in enumerate(records) if r.kind == RecordKind.REASONING_STEP
                  and r.data.get("kind") == ReasoningStepKind.REASONING_STARTED]  # fmt: skip
        if not starts:
            await body(session)  # nothing of it was durable: run it from the start
            return
        written = records[starts[0] :]
        effects = ResumeEffects(written, then=current_effect_source(), decided=decided)
        await run(session, str(written[0].data["details"]["request"]), session_recorder(session, written, effects))

    body.__name__ = "pattern_body"
    body.resume = resume  # type: ignore[attr-defined]  # the engine's resume hook
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


def session_memory(session: Session, recorder: Recorder | None = None) -> MemoryManager:
    """A working memory (:class:`~baf.reasoning.patterns.memory.MemoryManager`) over ``session``'s
    variables: it starts with the scopes the session holds (variables ``reasoning:<name>`` whose value
    is an object) and writes every change of a scope as that variable, through ``recorder`` (default:
    straight into the session). Pass it to ``pattern.execute(..., session=session, memory=...)``.
    """
    writer = recorder if recorder is not None else session_recorder(session)
    variables = runtime_side(session).projection.variables
    scopes = {name: value for name, value in variables.items() if is_scope(name, value)}
    return MemoryManager(scopes, write=writer.set)


def _agent_tools(session: Session) -> list[Tool]:
    agent = session.agent
    workspaces = list(agent.workspaces.values())
    return [*agent.tools.values(), *(workspace_tools(workspaces) if workspaces else [])]
