"""Export a session: its records as JSON lines, or its trace as OpenTelemetry spans (OTLP/JSON).

The OTLP/JSON encoding is written here by hand (it is a small, stable format: the protobuf messages of
``opentelemetry/proto/trace/v1`` in JSON, with trace and span ids as hex and 64-bit integers as
strings), so exporting needs no OpenTelemetry dependency. The output is one ``ExportTraceServiceRequest``
document, which an OTLP/HTTP collector accepts on ``/v1/traces`` with ``Content-Type: application/json``
and which Jaeger and similar tools import as a file.

Spans follow the OpenTelemetry GenAI semantic conventions:

- a root span for the session (``baf.session``), with the inbound messages, replies, transitions and
  errors outside reasoning as span events;
- ``invoke_agent {agent}`` per reasoning invocation (``gen_ai.operation.name = invoke_agent``);
- ``chat {model}`` per LLM call (kind CLIENT; ``gen_ai.request.model``, ``gen_ai.usage.input_tokens``,
  ``gen_ai.usage.output_tokens``, ``gen_ai.response.finish_reasons``);
- ``execute_tool {tool}`` per tool call (``gen_ai.tool.name``, ``gen_ai.tool.call.id``).

Ids are derived from the session id and seqs, so exporting the same session twice gives the same trace.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import IO, Any, Final

from baf.log.record import Record
from baf.log.redaction import Redactor
from baf.replay.render import visible_json
from baf.replay.timeline import Entry, EntryKind, build_timeline

__all__ = ["SCOPE_NAME", "export_jsonl", "export_otel", "record_to_json"]

#: The instrumentation scope of exported spans.
SCOPE_NAME: Final = "baf.replay"

# OTLP enum values (opentelemetry/proto/trace/v1/trace.proto).
_SPAN_KIND_INTERNAL: Final = 1
_SPAN_KIND_CLIENT: Final = 3
_STATUS_UNSET: Final = 0
_STATUS_ERROR: Final = 2


def record_to_json(record: Record) -> dict[str, Any]:
    """The JSON form of a record used by ``--json`` and the jsonl export."""
    return {"session_id": record.session_id, "seq": record.seq, "ts": record.ts, "kind": record.kind,
            "version": record.version, "data": record.data}  # fmt: skip


def export_jsonl(records: Iterable[Record], out: IO[str], redactor: Redactor | None = None) -> int:
    """Write one JSON object per record to ``out``; return how many were written.

    ``redactor`` re-applies redaction on the way out: records are redacted when written, this also
    covers logs written before a secret was known.
    """
    count = 0
    for record in records:
        if redactor is not None:
            record = redactor.redact_record(record)
        out.write(visible_json(json.dumps(record_to_json(record), ensure_ascii=False)) + "\n")
        count += 1
    return count


def export_otel(records: list[Record], redactor: Redactor | None = None, service_name: str = "baf") -> dict[str, Any]:
    """The session's trace as an OTLP/JSON ``ExportTraceServiceRequest`` (a dict, ready for ``json.dump``)."""
    if redactor is not None:
        records = [redactor.redact_record(r) for r in records]
    if not records:
        raise ValueError("no records to export")
    session_id = records[0].session_id
    agent = next((r.data.get("agent") for r in records if r.kind == "session_started"), None) or "agent"
    trace_id = _hex_id(session_id, 16)
    root_id = _hex_id(f"{session_id}/session", 8)
    root: dict[str, Any] = {
        "traceId": trace_id, "spanId": root_id, "name": "baf.session", "kind": _SPAN_KIND_INTERNAL,
        "startTimeUnixNano": _nanos(records[0].ts), "endTimeUnixNano": _nanos(records[-1].ts),
        "attributes": _attributes({"session.id": session_id, "gen_ai.conversation.id": session_id,
                                   "gen_ai.agent.name": agent, "baf.records": len(records)}),
        "events": [], "status": {"code": _STATUS_UNSET},
    }  # fmt: skip
    spans = [root]
    for entry in build_timeline(records):
        if entry.kind == EntryKind.REASONING:
            spans += _reasoning_spans(entry, trace_id, root_id, session_id, agent)
        elif entry.kind in (EntryKind.LLM_CALL, EntryKind.TOOL_CALL):
            spans.append(_leaf_span(entry, trace_id, root_id, session_id))
        else:
            root["events"].append(_event(entry))
            if entry.status == "error":
                root["status"] = {"code": _STATUS_ERROR, "message": entry.title}
    return {
        "resourceSpans": [{
            "resource": {"attributes": _attributes({"service.name": service_name, "baf.agent": agent})},
            "scopeSpans": [{"scope": {"name": SCOPE_NAME}, "spans": spans}],
        }]
    }  # fmt: skip


def _reasoning_spans(entry: Entry, trace_id: str, parent: str, session_id: str, agent: str) -> list[dict[str, Any]]:
    span_id = _hex_id(f"{session_id}/{entry.seq}", 8)
    finished = (entry.data.get("finished") or {}).get("details") or {}
    end = entry.end_ts if entry.data.get("finished") else max([entry.ts, *(c.end_ts or c.ts for c in entry.children)])
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
                  "gen_ai.conversation.id": session_id, "baf.seq": entry.seq,
                  "baf.reasoning.request": entry.title, "baf.reasoning.outcome": finished.get("outcome", "in_flight"),
                  "baf.reasoning.steps": finished.get("steps")}  # fmt: skip
    span = _span(trace_id, span_id, parent, f"invoke_agent {agent}", _SPAN_KIND_INTERNAL, entry.ts, end, attributes)
    if entry.status == "error":
        span["status"] = {"code": _STATUS_ERROR, "message": f"outcome: {finished.get('outcome', 'unfinished')}"}
    spans = [span]
    for child in entry.children:
        if child.kind in (EntryKind.LLM_CALL, EntryKind.TOOL_CALL):
            spans.append(_leaf_span(child, trace_id, span_id, session_id))
        else:
            span["events"].append(_event(child))
    return spans


def _leaf_span(entry: Entry, trace_id: str, parent: str, session_id: str) -> dict[str, Any]:
    """A ``chat`` span for an LLM call, an ``execute_tool`` span for a tool call."""
    end = entry.end_ts if entry.end_ts is not None else entry.ts
    if entry.kind == EntryKind.LLM_CALL:
        request = entry.data.get("request") or {}
        response = entry.data.get("response") or {}
        model = response.get("model") or request.get("model") or "unknown"
        usage = response.get("usage") or {}
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": model, "gen_ai.conversation.id": session_id,
            "baf.seq": entry.seq, "baf.reasoning.step": request.get("step", response.get("step")),
        }  # fmt: skip
        if response:
            attributes.update({
                "gen_ai.response.model": model,
                "gen_ai.usage.input_tokens": int(usage.get("prompt_tokens", 0)),
                "gen_ai.usage.output_tokens": int(usage.get("completion_tokens", 0)),
                "gen_ai.response.finish_reasons": ["tool_calls" if response.get("tool_calls") else "stop"],
                "baf.latency_ms": response.get("latency_ms"),
            })  # fmt: skip
        span_id = _hex_id(f"{session_id}/{entry.seq}", 8)
        span = _span(trace_id, span_id, parent, f"chat {model}", _SPAN_KIND_CLIENT, entry.ts, end, attributes)
        if not response:
            span["status"] = {"code": _STATUS_ERROR, "message": "no response recorded"}
        return span
    call = entry.data.get("call") or {}
    result = entry.data.get("result") or {}
    name = call.get("name") or result.get("name") or "tool"
    call_id = call.get("id") or result.get("call_id") or ""
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.type": "function",
                  "gen_ai.tool.call.id": call_id, "gen_ai.tool.call.arguments": call.get("arguments"),
                  "gen_ai.tool.call.result": result.get("content"), "baf.seq": entry.seq}  # fmt: skip
    span_id = _hex_id(f"{session_id}/{entry.seq}/{call_id}", 8)
    span = _span(trace_id, span_id, parent, f"execute_tool {name}", _SPAN_KIND_INTERNAL, entry.ts, end, attributes)
    if result.get("is_error") or not result:
        span["status"] = {"code": _STATUS_ERROR, "message": "tool failed" if result else "no result recorded"}
        span["attributes"] += _attributes({"error.type": "tool_error" if result else "interrupted"})
    return span


def _span(trace_id: str, span_id: str, parent: str, name: str, kind: int, start: float, end: float | None,
          attributes: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    return {"traceId": trace_id, "spanId": span_id, "parentSpanId": parent, "name": name, "kind": kind,
            "startTimeUnixNano": _nanos(start), "endTimeUnixNano": _nanos(max(start, end or start)),
            "attributes": _attributes(attributes), "events": [], "status": {"code": _STATUS_UNSET}}  # fmt: skip


def _event(entry: Entry) -> dict[str, Any]:
    """A span event for an entry that is not a span (message, reply, transition, error, step ...)."""
    attributes: dict[str, Any] = {"baf.seq": entry.seq, "baf.text": entry.title}
    name = f"baf.{entry.kind}"
    if entry.kind == EntryKind.ERROR:
        name = "exception"  # the semantic-conventions name, so tools show it as an error
        attributes.update({"exception.type": entry.data.get("type"), "exception.message": entry.data.get("message"),
                           "exception.stacktrace": entry.data.get("traceback")})  # fmt: skip
    return {"timeUnixNano": _nanos(entry.ts), "name": name, "attributes": _attributes(attributes)}


def _attributes(values: dict[str, Any]) -> list[dict[str, Any]]:
    """OTLP ``KeyValue`` list; ``None`` values are left out (OTLP has no null)."""
    return [{"key": key, "value": _any_value(value)} for key, value in values.items() if value is not None]


def _any_value(value: Any) -> dict[str, Any]:
    """OTLP ``AnyValue``: in JSON, 64-bit integers are strings."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list | tuple):
        return {"arrayValue": {"values": [_any_value(v) for v in value]}}
    if isinstance(value, str):
        return {"stringValue": value}
    return {"stringValue": json.dumps(value, ensure_ascii=False, default=str)}


def _nanos(ts: float) -> str:
    return str(round(ts * 1_000_000_000))


def _hex_id(text: str, size: int) -> str:
    """A stable id of ``size`` bytes (hex); never all zeros, which OTLP reads as "no id"."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[: size * 2]
    return digest if digest.strip("0") else "1".rjust(size * 2, "0")
