"""What a loop resumed after a crash is served: the model responses and tool results it had recorded.

A resumed loop runs again from its start (see :mod:`baf.reasoning.recorder`). :class:`ResumeEffects`
answers its model turns with the recorded responses, in the order they were recorded, and its tool
calls with the recorded results. A tool call of a recorded response whose result was not recorded may
have been running at the crash: an idempotent tool runs again; any other is reported to the model as
interrupted (:data:`INTERRUPTED_TOOL_MESSAGE`), since it may or may not have taken effect. Past the
recorded responses everything is live again (or goes to the source installed around the resume, a
re-run's).
"""

from __future__ import annotations

from collections.abc import Sequence

from baf.errors import InvariantError
from baf.llm.base import LLMResponse, ToolCall
from baf.log.record import Record, RecordKind
from baf.reasoning.effects import EffectSource, FullRequest, RecordedToolResult
from baf.reasoning.tool import Tool

__all__ = ["INTERRUPTED_TOOL_MESSAGE", "ResumeEffects"]

INTERRUPTED_TOOL_MESSAGE = (
    "Error: this call was interrupted by a restart of the agent before its result was recorded. It may or "
    "may not have taken effect; check before calling it again."
)


class ResumeEffects:
    """An :class:`~baf.reasoning.effects.EffectSource` over the records a loop wrote before a crash.

    Raises:
        InvariantError: the records are in an order baf never writes (a tool result before any model
            response): the log was changed by hand, or baf has a bug. Serving them would answer calls
            the model never made.
    """

    def __init__(self, records: Sequence[Record], then: EffectSource | None = None) -> None:
        self.responses: list[LLMResponse] = []
        self.results: dict[tuple[int, str], RecordedToolResult] = {}
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
        self.then = then
        self._served = 0

    def llm_response(self, request: FullRequest) -> LLMResponse | None:
        """The next recorded response; past them, the next source's (or ``None``: live)."""
        if self._served < len(self.responses):
            self._served += 1
            return self.responses[self._served - 1]
        self._served = len(self.responses) + 1  # later tool calls belong to live responses
        return self.then.llm_response(request) if self.then is not None else None

    def tool_result(self, step: int, call: ToolCall, tool: Tool) -> RecordedToolResult | None:
        """The recorded result of ``call``; for a call of a recorded response without one, ``None``
        (run it again) if the tool is idempotent, else the interruption notice."""
        index = self._served - 1
        if 0 <= index < len(self.responses):
            recorded = self.results.get((index, call.id))
            if recorded is not None:
                return recorded
            if tool.idempotent:
                return None
            return RecordedToolResult(INTERRUPTED_TOOL_MESSAGE, True, len(INTERRUPTED_TOOL_MESSAGE))
        return self.then.tool_result(step, call, tool) if self.then is not None else None
