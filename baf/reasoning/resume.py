"""What a loop resumed after a crash is served: the model responses and tool results it had recorded.

A resumed loop runs again from its start (see :mod:`baf.reasoning.recorder`). :class:`ResumeEffects`
answers its model turns with the recorded responses, in the order they were recorded, and its tool
calls with the recorded results. A tool call of a recorded response whose result was not recorded may
have been running at the crash: an idempotent tool runs again; any other is reported to the model as
interrupted (:data:`INTERRUPTED_TOOL_MESSAGE`), since it may or may not have taken effect. Past the
recorded responses everything is live again (or goes to the source installed around the resume, a
re-run's).

A call held for a human's approval (:mod:`baf.reasoning.approval`) is known here by its
``approval_requested`` and ``approval_decided`` records (:meth:`ResumeEffects.approval`). An approved
call without a result runs when its decision is one the engine has just taken (``decided``: the call
cannot have started); otherwise it was approved before the crash and may have been running, so it is
treated like any call that was cut off.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from baf.errors import InvariantError
from baf.llm.base import LLMResponse, ToolCall
from baf.log.record import Record, RecordKind
from baf.reasoning.approval import ANSWERED, KnownApproval
from baf.reasoning.effects import EffectSource, FullRequest, RecordedToolResult
from baf.reasoning.tool import Tool

__all__ = ["INTERRUPTED_TOOL_MESSAGE", "ResumeEffects"]

INTERRUPTED_TOOL_MESSAGE = (
    "Error: this call was interrupted (the agent restarted, or could not reach its log) before its result was "
    "recorded. It may or may not have taken effect; check before calling it again."
)


class ResumeEffects:
    """An :class:`~baf.reasoning.effects.EffectSource` over the records a loop wrote before a crash (or
    before it paused for approval). ``decided``: the call ids whose decisions the event being handled
    now completed (see the module docstring).

    Raises:
        InvariantError: the records are in an order baf never writes (a tool result before any model
            response): the log was changed by hand, or baf has a bug. Serving them would answer calls
            the model never made.
    """

    def __init__(
        self, records: Sequence[Record], then: EffectSource | None = None, decided: Collection[str] = ()
    ) -> None:
        self.responses: list[LLMResponse] = []
        self.results: dict[tuple[int, str], RecordedToolResult] = {}
        self.approvals: dict[tuple[int, str], KnownApproval] = {}
        requested: dict[str, tuple[int, str]] = {}  # call id -> its latest request, for the decision
        for record in records:
            if record.kind == RecordKind.LLM_RESPONSE:
                self.responses.append(LLMResponse.from_dict(record.data))
            elif record.kind == RecordKind.TOOL_RESULT:
                if not self.responses:  # a result always follows the response that asked for its call
                    raise InvariantError(
                        f"session {record.session_id!r}, seq {record.seq}: a tool_result record comes before "
                        "any llm_response of the loop being resumed; baf never writes that order"
                    )
                data = record.data
                content = str(data["content"])
                self.results[(len(self.responses) - 1, str(data["call_id"]))] = RecordedToolResult(
                    content, bool(data["is_error"]), int(data["original_size"])
                )
            elif record.kind == RecordKind.APPROVAL_REQUESTED and self.responses:
                call_id = str(record.data["call_id"])
                requested[call_id] = (len(self.responses) - 1, call_id)
                self.approvals[requested[call_id]] = KnownApproval()
            elif record.kind == RecordKind.APPROVAL_DECIDED:
                data = record.data
                held = requested.get(str(data.get("call_id")))
                if held is not None:
                    self.approvals[held] = KnownApproval(bool(data.get("approved")), str(data.get("reason") or ""),
                                                         str(data.get("by") or ""), held[1] in decided)  # fmt: skip
        self.then = then
        self._served = 0

    def llm_response(self, request: FullRequest) -> LLMResponse | None:
        """The next recorded response; past them, the next source's (or ``None``: live)."""
        if self._served < len(self.responses):
            self._served += 1
            return self.responses[self._served - 1]
        self._served = len(self.responses) + 1  # later tool calls belong to live responses
        return self.then.llm_response(request) if self.then is not None else None

    def approval(self, call: ToolCall) -> KnownApproval | None:
        """What the records say of ``call`` (of the response served last) and approval: :data:`ANSWERED`
        when its result is recorded, its request and decision if it was held, else ``None`` (never asked;
        for a live response, the next source's answer)."""
        index = self._served - 1
        if 0 <= index < len(self.responses):
            if (index, call.id) in self.results:
                return ANSWERED
            return self.approvals.get((index, call.id))
        approval = getattr(self.then, "approval", None)
        return approval(call) if approval is not None else None

    def tool_result(self, step: int, call: ToolCall, tool: Tool) -> RecordedToolResult | None:
        """The recorded result of ``call``; for a call of a recorded response without one, ``None``
        (run it again) if the tool is idempotent or the call was approved just now, else the
        interruption notice."""
        index = self._served - 1
        if 0 <= index < len(self.responses):
            recorded = self.results.get((index, call.id))
            if recorded is not None:
                return recorded
            known = self.approvals.get((index, call.id))
            if known is not None and known.fresh:  # decided by the event handled now: it never started
                return self.then.tool_result(step, call, tool) if self.then is not None else None
            if tool.idempotent:
                return None
            return RecordedToolResult(INTERRUPTED_TOOL_MESSAGE, True, len(INTERRUPTED_TOOL_MESSAGE))
        return self.then.tool_result(step, call, tool) if self.then is not None else None
