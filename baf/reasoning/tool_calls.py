"""The tool-call runner: the one way every reasoning loop runs the tool calls a model asked for.

For each call::

    find the tool → refuse arguments over the size limit → validate them (the tool's own validator)
      → the result from the effect source (resume, re-run), or run the tool under the concurrency bound
        and the timeout → every failure becomes an error text for the model (a tool's own exception also
        an ``error`` record with its traceback) → cut the text at ``max_output`` → record ``tool_result``

The response that asked for the calls is committed before any tool runs. With ``max_parallel=1`` the
calls run one after the other, each result recorded as it comes; otherwise they run together (at most
``max_parallel`` at once) and the results are recorded in the order the calls were made, whatever
order they finished in. Nothing a model sends crashes the loop.

A ``tool_result`` record is ``{"step", "call_id", "name", "content", "is_error", "original_size"}``:
``content`` is exactly what the model reads; ``original_size`` its length before the cut.

Before any of a response's calls runs, the calls of tools that need a human's approval are held
(:mod:`baf.reasoning.approval`): each gets an ``approval_requested`` record and the runner raises
:class:`~baf.errors.ApprovalPending`, so none of the response's calls runs until every held one is
decided; then they run as above, a denied one answered with the denial instead of running.
"""

from __future__ import annotations

import asyncio
import inspect
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from baf.errors import ApprovalPending, ToolError, ToolExecutionError, ToolNotFoundError
from baf.llm.base import LLMResponse, ToolCall
from baf.log.record import RecordKind
from baf.log.redaction import REDACTED
from baf.reasoning.approval import (
    ANSWERED,
    REDACTED_ARGUMENTS_MESSAGE,
    ApprovalRequest,
    KnownApproval,
    denial_message,
)
from baf.reasoning.awaiting import in_own_context, time_limited
from baf.reasoning.effects import ReplayGuardError
from baf.reasoning.tool import Tool

if TYPE_CHECKING:
    from baf.reasoning.recorder import Recorder

__all__ = [
    "DEFAULT_MAX_TOOL_ARGUMENTS",
    "STEP_PAYLOAD_LIMIT",
    "ToolOutcome",
    "ToolRunner",
    "assistant_message",
    "find_tool",
    "schema_of",
    "shorten",
    "step_arguments",
]

#: Characters of a call's arguments a tool accepts; longer arguments are refused back to the model.
DEFAULT_MAX_TOOL_ARGUMENTS = 1_000_000
#: Characters of arguments and results a step (and the scratchpad built from steps) keeps.
STEP_PAYLOAD_LIMIT = 4000


@dataclass(slots=True)
class ToolOutcome:
    """One call's outcome: what the model reads, whether it is an error, the size before any cut, and
    whatever the runner's ``prepare`` hook returned for the call."""

    call: ToolCall
    content: str
    is_error: bool
    original_size: int
    context: Any = None


class ToolRunner:
    """Runs tool calls for a loop (see the module docstring).

    Args:
        recorder: Where results (and tool tracebacks) are recorded; its effect source serves results.
        session: Passed to tools that take a session.
        max_parallel: Calls of one response running at once; 1 runs them in order, one at a time.
        timeout: Seconds for a call of a tool without its own timeout (``None``: no limit).
        max_output: Characters of a result the model reads; longer ones are cut with a marker.
        max_arguments: Characters of arguments accepted; longer ones are refused with the reason.
    """

    def __init__(
        self,
        recorder: Recorder,
        *,
        session: Any = None,
        max_parallel: int = 8,
        timeout: float | None = 60.0,
        max_output: int = 20_000,
        max_arguments: int = DEFAULT_MAX_TOOL_ARGUMENTS,
    ) -> None:
        self.recorder = recorder
        self.session = session
        self.max_parallel = max_parallel
        self.timeout = timeout
        self.max_output = max_output
        self.max_arguments = max_arguments
        self._semaphore = asyncio.Semaphore(max_parallel)

    async def run(
        self,
        step: int,
        calls: Sequence[ToolCall],
        tools: Mapping[str, Tool],
        *,
        before_call: Callable[[ToolCall], Any] | None = None,
        after_call: Callable[[ToolOutcome], Any] | None = None,
        prepare: Callable[[ToolCall, Tool], Any] | None = None,
        always_live: Callable[[Tool], bool] | None = None,
    ) -> list[ToolOutcome]:
        """Run ``calls`` against ``tools`` and record each result; the outcomes in call order.

        ``before_call(call)`` (sync or async) runs just before a call may start (a loop records its "calling" step
        there); ``after_call(outcome)`` right after its result is recorded. Every call runs in a copy of
        the loop's context (its own task when calls run together, :func:`in_own_context` otherwise), and
        ``prepare(call, tool)`` runs there too: context variables either sets are the call's, gone for
        the next call, the rest of the loop and the session's later messages. ``prepare``'s return value is
        kept as ``outcome.context``; calls of tools for which ``always_live(tool)`` is true always run,
        even while resuming or re-running (tools that only change the loop's own state).
        """

        decided = self._hold(step, calls, tools) if _any_gated(calls, tools) else None

        def start(call: ToolCall) -> asyncio.Task[ToolOutcome]:
            approval = decided.get(call.id) if decided else None
            return asyncio.create_task(self._bounded(self._one(call, tools, step, prepare, always_live, approval)))

        outcomes: list[ToolOutcome] = []
        # One call at a time needs no task of its own: it runs in the loop's task, in a copy of its context
        # (in_own_context says what a task would cost), nor the bound: nothing else of this response runs.
        if self.max_parallel == 1 or len(calls) == 1:
            for call in calls:
                if before_call is not None:
                    await _maybe_await(before_call(call))
                await self.recorder.commit()  # the response and this step are durable before the tool runs
                approval = decided.get(call.id) if decided else None
                outcome = await in_own_context(self._one(call, tools, step, prepare, always_live, approval))
                self._record(step, outcome, after_call)
                outcomes.append(outcome)
            return outcomes
        if before_call is not None:
            for call in calls:
                await _maybe_await(before_call(call))
        await self.recorder.commit()  # the response is durable before any tool runs
        outcomes = list(await asyncio.gather(*(start(call) for call in calls)))
        for outcome in outcomes:
            self._record(step, outcome, after_call)
        return outcomes

    async def _bounded(self, call: Awaitable[ToolOutcome]) -> ToolOutcome:
        """``call`` once fewer than ``max_parallel`` calls run: the clock of its time limit starts then."""
        async with self._semaphore:
            return await call

    def _hold(self, step: int, calls: Sequence[ToolCall], tools: Mapping[str, Tool]) -> dict[str, KnownApproval]:
        """The decisions on this response's calls that needed approval, by call id. Calls that need one
        and have none are recorded (``approval_requested``), shown to the platform once durable, and
        :class:`~baf.errors.ApprovalPending` is raised: nothing of this response runs yet."""
        source = self.recorder.source
        known_of = getattr(source, "approval", None)  # what the log says, while resuming
        held: list[ToolCall] = []
        decided: dict[str, KnownApproval] = {}
        for call in calls:
            tool = tools.get(call.name)
            if (
                tool is None
                or not getattr(tool, "requires_approval", False)
                or len(call.arguments) > self.max_arguments
            ):
                continue  # refused anyway (no such tool, arguments too long): nothing to approve
            known = known_of(call) if known_of is not None else None
            if known is ANSWERED:
                continue  # its result is recorded: it ran (or was refused) before the restart
            if known is not None:
                if known.approved is None:
                    held.append(call)  # asked before, still undecided
                else:
                    decided[call.id] = known
                continue
            if not self._needs_approval(tool, call, step):
                continue
            if self.recorder.session is None:
                decided[call.id] = KnownApproval(False, "approval can only be asked for inside a session", "baf")
                continue
            request = ApprovalRequest(call.id, call.name, call.arguments, step)
            self.recorder.record(RecordKind.APPROVAL_REQUESTED, {"step": step, "call_id": call.id, "name": call.name,
                                                                  "arguments": call.arguments})  # fmt: skip
            self.recorder.stream("reply_approval_request", request)
            held.append(call)
        if held:
            raise ApprovalPending(held)
        return decided

    def _needs_approval(self, tool: Tool, call: ToolCall, step: int) -> bool:
        """The tool's ``requires_approval``, a policy asked for this call. A policy that raises is recorded
        and the call waits for a human: an error must not let a call through unasked."""
        policy = tool.requires_approval
        if not callable(policy):
            return bool(policy)
        try:
            return bool(policy(self.session, call))
        except Exception as exc:
            self.recorder.record_error("approval", exc, tool=call.name, call_id=call.id, step=step)
            return True

    def _record(self, step: int, outcome: ToolOutcome, after_call: Callable[[ToolOutcome], Any] | None) -> None:
        call = outcome.call
        self.recorder.record(RecordKind.TOOL_RESULT, {
            "step": step, "call_id": call.id, "name": call.name, "content": outcome.content,
            "is_error": outcome.is_error, "original_size": outcome.original_size,
        })  # fmt: skip
        if after_call is not None:
            after_call(outcome)

    async def _one(
        self,
        call: ToolCall,
        tools: Mapping[str, Tool],
        step: int,
        prepare: Callable[[ToolCall, Tool], Any] | None,
        always_live: Callable[[Tool], bool] | None,
        approval: KnownApproval | None = None,
    ) -> ToolOutcome:
        """Run one call; every failure becomes an error text for the model."""
        try:
            tool = find_tool(tools, call.name)
        except ToolNotFoundError as exc:
            content = f"Error: {exc}"
            return ToolOutcome(call, content, True, len(content))
        size = len(call.arguments)
        if size > self.max_arguments:
            content = (f"Error: the arguments for tool '{call.name}' are {size} characters long; at most "
                       f"{self.max_arguments} are accepted. The call was not run. Send less at once (for "
                       "example in several calls).")  # fmt: skip
            return ToolOutcome(call, content, True, len(content))
        if approval is not None and approval.approved is False:
            content = denial_message(call.name, approval.reason, approval.by)
            return ToolOutcome(call, content, True, len(content))
        if approval is not None and REDACTED in call.arguments:  # read back from the log: not what was sent
            content = REDACTED_ARGUMENTS_MESSAGE.format(tool=call.name)
            return ToolOutcome(call, content, True, len(content))
        context = prepare(call, tool) if prepare is not None else None
        timeout = None if tool.timeout is not None else self.timeout
        source = self.recorder.source
        try:
            args = tool.validate_args(call.arguments)
            served = None
            if source is not None and (always_live is None or not always_live(tool)):
                served = source.tool_result(step, call, tool)
            if served is not None:
                return ToolOutcome(call, served.content, served.is_error, served.original_size, context)
            result = await time_limited(tool.call(args, session=self.session), timeout)
            content, is_error = tool.render_result(result), False
        except ReplayGuardError:
            raise  # a re-run asked for a result the log lacks: never turn that into a tool error
        except ToolError as exc:
            content, is_error = f"Error: {exc}", True
            if isinstance(exc, ToolExecutionError):  # the tool's own code raised: keep its traceback
                self.recorder.record_error("tool", exc.__cause__ or exc, tool=call.name, call_id=call.id, step=step)
        except TimeoutError:
            content, is_error = f"Error: tool '{call.name}' did not finish within {timeout:g} seconds.", True
        except Exception as exc:  # a bug below the tool: still an answer for the model, never a dead loop
            self.recorder.record_error("tool", exc, tool=call.name, call_id=call.id, step=step)
            content, is_error = f"Error: tool '{call.name}' failed: {type(exc).__name__}: {exc}", True
        size = len(content)
        limit = self.max_output
        if size > limit:
            # Redact before cutting: a secret cut in half would no longer be recognised at write time.
            kept = self.recorder.redact(content)[:limit]
            content = f"{kept}\n[output truncated: {size} characters in all, the first {limit} shown]"
        return ToolOutcome(call, content, is_error, size, context)


def _any_gated(calls: Sequence[ToolCall], tools: Mapping[str, Tool]) -> bool:
    """Whether a call of this response is for a tool that may need approval (most responses: none)."""
    for call in calls:
        tool = tools.get(call.name)
        if tool is not None and getattr(tool, "requires_approval", False):
            return True
    return False


def find_tool(tools: Mapping[str, Tool], name: str) -> Tool:
    """The tool the model called by ``name``.

    Raises:
        ToolNotFoundError: no such tool; the message lists the ones there are, for the model.
    """
    tool = tools.get(name)
    if tool is None:
        raise ToolNotFoundError(f"there is no tool named '{name}'. Available tools: {', '.join(tools) or 'none'}.")
    return tool


async def _maybe_await(value: Any) -> None:
    if inspect.isawaitable(value):
        await value


def assistant_message(response: LLMResponse, max_arguments: int = DEFAULT_MAX_TOOL_ARGUMENTS) -> dict[str, Any]:
    """The assistant message announcing ``response``'s tool calls; the results that follow refer to
    its call ids. Arguments over ``max_arguments`` (refused, never run) are replaced by a note of their
    size: the model gets the refusal, and the ``llm_response`` record stays their one full copy."""
    return {
        "role": "assistant",
        "content": response.text,
        "tool_calls": [
            {
                "id": c.id,
                "type": "function",
                "function": {
                    "name": c.name,
                    "arguments": (c.arguments if len(c.arguments) <= max_arguments else _refused_arguments(c)),
                },
            }
            for c in response.tool_calls
        ],
    }


def _refused_arguments(call: ToolCall) -> str:
    return f"[{len(call.arguments)} characters of arguments, refused as too long]"


def step_arguments(call: ToolCall) -> dict[str, Any]:
    """A call as a step shows it: ``{id, name, arguments}``, the arguments shortened past
    :data:`STEP_PAYLOAD_LIMIT` characters, with ``arguments_size`` (their full length) when they were."""
    arguments = call.arguments
    if len(arguments) <= STEP_PAYLOAD_LIMIT:
        return {"id": call.id, "name": call.name, "arguments": arguments}
    return {"id": call.id, "name": call.name, "arguments": shorten(arguments, STEP_PAYLOAD_LIMIT),
            "arguments_size": len(arguments)}  # fmt: skip


def shorten(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ending with its full length when cut."""
    if len(text) <= limit:
        return text
    return f"{text[: limit - 1]}… [{len(text)} characters]"


_SCHEMAS: weakref.WeakKeyDictionary[Tool, dict[str, Any]] = weakref.WeakKeyDictionary()


def schema_of(tool: Tool) -> dict[str, Any]:
    """The tool's schema, built once per tool: ``Tool.schema`` hands out a fresh copy on every access,
    which cost more than the rest of a turn (and a request repeats the tools only when they are not the
    same schema objects). Models receive this shared dict and must not mutate it."""
    schema = _SCHEMAS.get(tool)
    if schema is None:
        schema = _SCHEMAS[tool] = tool.schema
    return schema
