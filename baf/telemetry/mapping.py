"""The one mapping from a session's records to OpenTelemetry spans (GenAI semantic conventions).

:class:`SpanMapper` folds one session's records, in seq order, into :class:`SpanAction` values: start a
span, add an event, set attributes, end it. The live hooks (:mod:`baf.telemetry.hooks`) apply the
actions to a tracer as the records are written; the offline export (``baf.replay.export``) applies them
to spans it builds from a log. Both read the same actions, with the times the records carry, so a session
traced live and exported later gives the same spans.

The spans, nested as they ran:

- ``baf.step`` per engine step (the root of a trace: one trace per step; ``gen_ai.conversation.id`` and
  ``session.id`` tie a session's traces together), with the inbound message, transitions, replies and
  errors as span events;
- ``invoke_agent {agent}`` per reasoning invocation inside the step (``gen_ai.operation.name``
  ``invoke_agent``; ``baf.reasoning.outcome``);
- ``chat {model}`` per model call (kind CLIENT; ``gen_ai.request.model``, ``gen_ai.provider.name``,
  ``gen_ai.usage.input_tokens`` / ``output_tokens``, ``gen_ai.response.finish_reasons``);
- ``execute_tool {tool}`` per tool call (``gen_ai.tool.name``, ``gen_ai.tool.call.id``), from the
  response that asked for it to its ``tool_result``.

Content (prompts, completions, tool arguments and results, message and reply texts) is added only with
``capture_content=True``, and always through the secret redactor given (records are redacted when
written; this also covers secrets marked later). Without it, spans carry names, models, token counts,
timings, outcomes and error types only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from baf.log.record import Record, RecordKind
from baf.reasoning.effects import rebuild_requests
from baf.reasoning.step import ReasoningStepKind

__all__ = ["SCOPE_NAME", "SpanAction", "SpanMapper", "nanos"]

#: The instrumentation scope of baf's spans, live and exported.
SCOPE_NAME = "baf"

#: ``reasoning_finished`` outcomes of a run that succeeded (a reasoning loop's, a pattern's).
_SUCCESS_OUTCOMES = frozenset({"answered", "completed"})

SpanKindName = Literal["internal", "client"]


@dataclass(slots=True)
class SpanAction:
    """One thing to do to a span: ``start``, ``event``, ``set`` (attributes) or ``end``.

    ``key`` names the span within its session (stable: derived from the seq of the record that opened
    it); ``parent`` is the key of its parent (``None`` for a step, the root of its trace). ``error``
    (on ``end`` or ``set``) marks the span's status as ERROR with that description; ``attributes`` on
    ``end`` are set before the span ends.
    """

    op: Literal["start", "event", "set", "end"]
    key: str
    time_ns: int
    name: str = ""
    parent: str | None = None
    kind: SpanKindName = "internal"
    attributes: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    #: On ``start``: the span never has children (a model or tool call), so an applier may wait for its
    #: ``end`` and make it in one go.
    leaf: bool = False


def nanos(ts: float) -> int:
    """A record time stamp (seconds) as OpenTelemetry's nanoseconds."""
    return round(ts * 1_000_000_000)


class SpanMapper:
    """Folds one session's records into span actions (see the module docstring).

    Args:
        session_id: The session; every span carries it as ``gen_ai.conversation.id``.
        agent: The agent's name (``gen_ai.agent.name``).
        capture_content: Add prompts, completions, tool arguments and results, and message texts.
        redact: Applied to every piece of content before it is added.
    """

    def __init__(
        self,
        session_id: str,
        agent: str,
        capture_content: bool = False,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self.session_id = session_id
        self.agent = agent
        self.capture_content = capture_content
        self._redact = redact or (lambda text: text)
        self._open: list[str] = []  # keys of open spans, outermost first
        self._step: str | None = None
        self._reasoning: str | None = None
        self._chat: str | None = None
        self._tools: dict[str, str] = {}  # call id -> key of its open execute_tool span
        self._messages: dict[int, Record] = {}  # inbound messages waiting for their step
        self._requests: list[Record] = []  # the step's llm_request records (for content)
        self._errors: set[str] = set()  # keys already marked ERROR

    @property
    def idle(self) -> bool:
        """Whether no span is open."""
        return not self._open

    @property
    def waiting(self) -> bool:
        """Whether inbound messages wait for the step that will handle them."""
        return bool(self._messages)

    def feed(self, record: Record) -> list[SpanAction]:
        """The actions ``record`` causes (often none)."""
        handler = _HANDLERS.get(record.kind)
        return handler(self, record) if handler is not None else []

    @staticmethod
    def ignores(record: Record) -> bool:
        """Whether ``record`` causes no action and changes no mapper (a variable set, a reasoning step
        other than a run's start or end: about half of a reasoning session's records), so an applier
        may skip it without looking up the session's mapper."""
        if record.kind == RecordKind.REASONING_STEP:
            return record.data.get("kind") not in _RUN_BOUNDS
        return record.kind not in _HANDLERS

    def finish(self, ts: float, reason: str = "not finished when the log ends") -> list[SpanAction]:
        """End every open span at ``ts``, marked as errors with ``reason`` (a step a crash left open)."""
        return self._close_all(nanos(ts), reason)

    # -- engine -----------------------------------------------------------------------------------

    def _step_started(self, record: Record) -> list[SpanAction]:
        actions = self._close_all(nanos(record.ts), "the step did not finish (the process stopped)")
        key = f"step/{record.seq}"
        event_seq = record.data.get("event_seq")
        attributes: dict[str, Any] = {
            "gen_ai.conversation.id": self.session_id, "session.id": self.session_id,
            "gen_ai.agent.name": self.agent, "baf.seq": record.seq, "baf.event_seq": event_seq,
            "baf.resumed": record.kind == RecordKind.STEP_RESUMED,
        }  # fmt: skip
        actions.append(self._start(key, None, "baf.step", record, attributes))
        self._step = key
        message = self._messages.pop(event_seq, None) if isinstance(event_seq, int) else None
        if message is not None:
            event = message.data.get("event") or {}
            shown = {"baf.seq": message.seq, "baf.event.type": event.get("type") if isinstance(event, dict) else None}
            if self.capture_content:
                shown["baf.text"] = self._content(message.data.get("text"))
            actions.append(SpanAction("event", key, nanos(message.ts), "baf.message_received", attributes=shown))
        return actions

    def _step_finished(self, record: Record) -> list[SpanAction]:
        if self._step is None:
            return []
        error = None
        if record.data.get("interrupted"):
            error = f"interrupted by {record.data.get('interrupted_by') or 'the runtime'}"
        actions = self._close_all(nanos(record.ts), "the step ended first", keep=self._step)
        actions.append(self._end(self._step, record, error))
        self._step = None
        self._requests = []
        return actions

    def _message(self, record: Record) -> list[SpanAction]:
        # Recorded when it arrives; it belongs to the step that will handle it (its event_seq).
        self._messages[record.seq] = record
        if len(self._messages) > 1000:  # messages no step ever handled (a log cut short): keep the latest
            del self._messages[min(self._messages)]
        return []

    def _transition(self, record: Record) -> list[SpanAction]:
        data = record.data
        attributes = {"baf.seq": record.seq, "baf.transition.source": data.get("source"),
                      "baf.transition.dest": data.get("dest")}  # fmt: skip
        return self._event("baf.transition", record, attributes)

    def _reply(self, record: Record) -> list[SpanAction]:
        attributes: dict[str, Any] = {"baf.seq": record.seq}
        if self.capture_content:
            attributes["baf.text"] = self._content(record.data.get("text"))
        return self._event("baf.reply", record, attributes)

    def _error(self, record: Record) -> list[SpanAction]:
        data = record.data
        attributes: dict[str, Any] = {
            "baf.seq": record.seq, "baf.error.source": data.get("source"),
            "exception.type": data.get("type"), "exception.message": data.get("message"),
        }  # fmt: skip
        if self.capture_content:
            attributes["exception.stacktrace"] = self._content(data.get("traceback"))
        # The error belongs to the innermost span: a tool's to its call, a model's to the open chat span.
        call = self._tools.get(str(data.get("call_id"))) if data.get("source") == "tool" else None
        target = call or (self._chat if data.get("source") == "llm" else None) or self._innermost()
        if target is None:
            return []
        actions = [SpanAction("event", target, nanos(record.ts), "exception", attributes=attributes)]
        if target == self._chat:  # the model call failed: no response will come
            actions.append(self._end(target, record, f"{data.get('type')}: model call failed"))
            self._chat = None
        elif target not in self._errors:
            self._errors.add(target)
            actions.append(SpanAction("set", target, nanos(record.ts), error=str(data.get("type") or "error")))
        return actions

    # -- reasoning --------------------------------------------------------------------------------

    def _reasoning_step(self, record: Record) -> list[SpanAction]:
        data = record.data
        kind = data.get("kind")
        details = data.get("details") or {}
        if kind == ReasoningStepKind.REASONING_STARTED:
            actions = self._close_reasoning(record, "a new reasoning run started first")
            key = f"reasoning/{record.seq}"
            attributes: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": self.agent,
                                          "gen_ai.conversation.id": self.session_id, "baf.seq": record.seq}  # fmt: skip
            if self.capture_content:
                attributes["baf.reasoning.request"] = self._content(details.get("request"))
            actions.append(self._start(key, self._step, f"invoke_agent {self.agent}", record, attributes))
            self._reasoning = key
            return actions
        if kind == ReasoningStepKind.REASONING_FINISHED and self._reasoning is not None:
            key, outcome = self._reasoning, details.get("outcome")
            actions = self._close_all(nanos(record.ts), "the reasoning run ended first", keep=key)
            attributes = {"baf.reasoning.outcome": outcome, "baf.reasoning.steps": details.get("steps")}
            error = None if outcome in _SUCCESS_OUTCOMES else f"outcome: {outcome}"
            actions.append(self._end(key, record, error, attributes))
            self._reasoning = None
            return actions
        return []

    def _llm_request(self, record: Record) -> list[SpanAction]:
        data = record.data
        actions: list[SpanAction] = []
        if self._chat is not None:  # a request whose response never came (an error not recorded)
            actions.append(self._end(self._chat, record, "no response recorded"))
        model = str(data.get("model") or "unknown")
        key = f"chat/{record.seq}"
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": model, "gen_ai.conversation.id": self.session_id,
            "baf.seq": record.seq, "baf.reasoning.step": data.get("step"),
            "baf.loop": data.get("loop"),
        }  # fmt: skip
        if self.capture_content:
            self._requests.append(record)
            attributes.update(self._request_content(record))
        actions.append(self._start(key, self._reasoning or self._step, f"chat {model}", record, attributes, "client"))
        self._chat = key
        return actions

    def _llm_response(self, record: Record) -> list[SpanAction]:
        data = record.data
        actions: list[SpanAction] = []
        key = self._chat
        if key is None:  # a response without its request (a log that starts mid-call)
            key = f"chat/{record.seq}"
            model = str(data.get("model") or "unknown")
            attributes = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                          "gen_ai.conversation.id": self.session_id, "baf.seq": record.seq}  # fmt: skip
            actions.append(self._start(key, self._reasoning or self._step, f"chat {model}", record, attributes,
                                       "client"))  # fmt: skip
        self._chat = None
        usage = data.get("usage") or {}
        calls = [c for c in data.get("tool_calls") or [] if isinstance(c, dict)]
        attributes = {
            "gen_ai.provider.name": data.get("provider"), "gen_ai.response.model": data.get("model"),
            "gen_ai.usage.input_tokens": _int(usage.get("prompt_tokens")),
            "gen_ai.usage.output_tokens": _int(usage.get("completion_tokens")),
            "gen_ai.response.finish_reasons": ["tool_calls" if calls else "stop"],
            "baf.latency_ms": data.get("latency_ms"),
        }  # fmt: skip
        if self.capture_content:
            attributes["gen_ai.output.messages"] = self._json(_output_messages(data, calls))
        actions.append(self._end(key, record, None, attributes))
        for call in calls:
            call_id = str(call.get("id"))
            tool = f"tool/{record.seq}/{call_id}"
            name = str(call.get("name"))
            attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                          "gen_ai.tool.type": "function", "gen_ai.tool.call.id": call_id,
                          "gen_ai.conversation.id": self.session_id, "baf.seq": record.seq}  # fmt: skip
            if self.capture_content:
                attributes["gen_ai.tool.call.arguments"] = self._content(_text(call.get("arguments")))
            actions.append(self._start(tool, self._reasoning or self._step, f"execute_tool {name}", record, attributes))
            self._tools[call_id] = tool
        return actions

    def _tool_result(self, record: Record) -> list[SpanAction]:
        data = record.data
        call_id = str(data.get("call_id"))
        actions: list[SpanAction] = []
        key = self._tools.pop(call_id, None)
        if key is None:  # a result without its call (a pattern's, or a log that starts mid-call)
            key = f"tool/{record.seq}/{call_id}"
            name = str(data.get("name"))
            attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                          "gen_ai.tool.type": "function", "gen_ai.tool.call.id": call_id,
                          "gen_ai.conversation.id": self.session_id, "baf.seq": record.seq}  # fmt: skip
            actions.append(self._start(key, self._reasoning or self._step, f"execute_tool {name}", record, attributes))
        attributes = {"baf.tool.result_size": data.get("original_size")}
        if self.capture_content:
            attributes["gen_ai.tool.call.result"] = self._content(_text(data.get("content")))
        if data.get("is_error"):
            attributes["error.type"] = "tool_error"
        actions.append(self._end(key, record, "the tool call failed" if data.get("is_error") else None, attributes))
        return actions

    # -- helpers ----------------------------------------------------------------------------------

    def _start(self, key: str, parent: str | None, name: str, record: Record, attributes: dict[str, Any],
               kind: SpanKindName = "internal") -> SpanAction:  # fmt: skip
        self._open.append(key)
        leaf = key.startswith(("chat/", "tool/"))
        return SpanAction("start", key, nanos(record.ts), name, parent, kind, _present(attributes), leaf=leaf)

    def _end(self, key: str, record: Record, error: str | None, attributes: dict[str, Any] | None = None) -> SpanAction:
        return self._end_at(key, nanos(record.ts), error, attributes)

    def _end_at(
        self, key: str, time_ns: int, error: str | None, attributes: dict[str, Any] | None = None
    ) -> SpanAction:
        if key in self._open:
            self._open.remove(key)
        self._errors.discard(key)
        # An end sets its span's last attributes too: one action, not a "set" and an "end".
        return SpanAction("end", key, time_ns, attributes=attributes if attributes is not None else {}, error=error)

    def _event(self, name: str, record: Record, attributes: dict[str, Any]) -> list[SpanAction]:
        target = self._innermost()
        if target is None:
            return []
        return [SpanAction("event", target, nanos(record.ts), name, attributes=_present(attributes))]

    def _innermost(self) -> str | None:
        """The span events go to: the reasoning run, else the step (a tool or chat span is too narrow)."""
        return self._reasoning or self._step

    def _close_reasoning(self, record: Record, reason: str) -> list[SpanAction]:
        if self._reasoning is None:
            return []
        actions = self._close_all(nanos(record.ts), reason, keep=self._reasoning)
        actions.append(self._end(self._reasoning, record, reason))
        self._reasoning = None
        return actions

    def _close_all(self, time_ns: int, reason: str, keep: str | None = None) -> list[SpanAction]:
        """End the open spans inside ``keep`` (every open span without it), innermost first."""
        start = self._open.index(keep) + 1 if keep is not None and keep in self._open else 0
        actions = [self._end_at(key, time_ns, reason) for key in reversed(self._open[start:])]
        if keep is None:
            self._step = None
        if self._reasoning not in self._open:
            self._reasoning = None
        if self._chat not in self._open:
            self._chat = None
        self._tools = {call: key for call, key in self._tools.items() if key in self._open}
        return actions

    def _content(self, value: Any) -> str | None:
        return None if value is None else self._redact(str(value))

    def _json(self, value: Any) -> str:
        return self._redact(json.dumps(value, ensure_ascii=False, default=str))

    def _request_content(self, record: Record) -> dict[str, Any]:
        """The request in full (a reasoning loop records what changed since its previous request)."""
        rebuilt = next((r for r in reversed(rebuild_requests(self._requests)) if r.seq == record.seq), None)
        if rebuilt is None:
            return {}
        content: dict[str, Any] = {"gen_ai.input.messages": self._json(_input_messages(rebuilt.messages))}
        if rebuilt.system:
            content["gen_ai.system_instructions"] = self._json([{"type": "text", "content": rebuilt.system}])
        if rebuilt.tools:
            content["gen_ai.tool.definitions"] = self._json(rebuilt.tools)
        return content


def _present(attributes: dict[str, Any]) -> dict[str, Any]:
    """OpenTelemetry attributes have no null: leave out what is not there."""
    return {key: value for key, value in attributes.items() if value is not None}


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _input_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI-shaped messages in the GenAI conventions' form: ``{"role", "parts": [...]}``."""
    shaped = []
    for message in messages:
        parts: list[dict[str, Any]] = []
        role = message.get("role")
        if role == "tool":
            parts.append({"type": "tool_call_response", "id": message.get("tool_call_id"),
                          "response": message.get("content")})  # fmt: skip
        elif message.get("content"):
            parts.append({"type": "text", "content": message.get("content")})
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            parts.append({"type": "tool_call", "id": call.get("id"), "name": function.get("name"),
                          "arguments": function.get("arguments")})  # fmt: skip
        shaped.append({"role": role, "parts": parts})
    return shaped


def _output_messages(data: dict[str, Any], calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if data.get("text"):
        parts.append({"type": "text", "content": data.get("text")})
    parts += [{"type": "tool_call", "id": c.get("id"), "name": c.get("name"), "arguments": c.get("arguments")}
              for c in calls]  # fmt: skip
    return [{"role": "assistant", "parts": parts, "finish_reason": "tool_calls" if calls else "stop"}]


#: The reasoning steps that open or close a span (the others are shown by the chat and tool spans).
_RUN_BOUNDS = frozenset({ReasoningStepKind.REASONING_STARTED, ReasoningStepKind.REASONING_FINISHED})

_HANDLERS: dict[str, Callable[[SpanMapper, Record], list[SpanAction]]] = {
    RecordKind.STEP_STARTED: SpanMapper._step_started,
    RecordKind.STEP_RESUMED: SpanMapper._step_started,
    RecordKind.STEP_FINISHED: SpanMapper._step_finished,
    RecordKind.MESSAGE_RECEIVED: SpanMapper._message,
    RecordKind.TRANSITION: SpanMapper._transition,
    RecordKind.REPLY: SpanMapper._reply,
    RecordKind.ERROR: SpanMapper._error,
    RecordKind.REASONING_STEP: SpanMapper._reasoning_step,
    RecordKind.LLM_REQUEST: SpanMapper._llm_request,
    RecordKind.LLM_RESPONSE: SpanMapper._llm_response,
    RecordKind.TOOL_RESULT: SpanMapper._tool_result,
}
