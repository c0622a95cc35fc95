"""A recorded session as OpenTelemetry SDK spans, through the one mapping (:mod:`baf.telemetry.mapping`).

:func:`spans_from_records` folds the records with :class:`~baf.telemetry.mapping.SpanMapper` and
builds finished ``ReadableSpan`` objects from its actions, the form exporters take. Ids are derived
from the session id and the seqs, so exporting a session twice gives the same traces.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from baf.errors import MissingExtraError
from baf.log.record import Record, RecordKind
from baf.telemetry.mapping import SCOPE_NAME, SpanAction, SpanMapper, nanos

__all__ = ["spans_from_records"]


@dataclass(slots=True)
class _Draft:
    name: str
    key: str
    parent: str | None
    kind: str
    start: int
    attributes: dict[str, Any]
    events: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    error: str | None = None
    end: int | None = None


def spans_from_records(
    records: Iterable[Record],
    *,
    agent: str | None = None,
    capture_content: bool = True,
    redact: Callable[[str], str] | None = None,
    resource_attributes: Mapping[str, Any] | None = None,
) -> list[Any]:
    """The spans of one session's records (``ReadableSpan`` objects, in the order they started).

    ``agent`` defaults to the name in the session's ``session_started`` record. Spans still open after
    the last record (a step a crash interrupted) end there, marked as errors.

    Raises:
        MissingExtraError: the ``otel`` extra is not installed (a ``ConfigurationError``).
    """
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
    except ImportError as exc:
        raise MissingExtraError("OpenTelemetry spans", "otel") from exc

    records = list(records)
    if not records:
        return []
    session_id = records[0].session_id
    if agent is None:
        started = next((r for r in records if r.kind == RecordKind.SESSION_STARTED), None)
        agent = str(started.data.get("agent") or "agent") if started is not None else "agent"
    mapper = SpanMapper(session_id, agent, capture_content, redact)
    drafts: dict[str, _Draft] = {}
    order: list[_Draft] = []

    def apply(action: SpanAction) -> None:
        if action.op == "start":
            draft = _Draft(action.name, action.key, action.parent, action.kind, action.time_ns, dict(action.attributes))
            drafts[action.key] = draft
            order.append(draft)
            return
        draft = drafts[action.key]
        if action.op == "event":
            draft.events.append((action.name, action.time_ns, dict(action.attributes)))
            return
        draft.attributes.update(action.attributes)
        if action.error is not None:
            draft.error = action.error
        if action.op == "end":
            draft.end = max(action.time_ns, draft.start)

    for record in records:
        for action in mapper.feed(record):
            apply(action)
    for action in mapper.finish(records[-1].ts):
        apply(action)

    resource = Resource.create({"service.name": "baf", "baf.agent": agent, **(resource_attributes or {})})
    scope = InstrumentationScope(SCOPE_NAME)
    traces: dict[str, int] = {}
    contexts: dict[str, SpanContext] = {}
    spans = []
    for draft in order:
        trace_id = traces[draft.parent] if draft.parent is not None else _id(f"{session_id}/trace/{draft.key}", 16)
        traces[draft.key] = trace_id
        context = SpanContext(trace_id, _id(f"{session_id}/{draft.key}", 8), False, TraceFlags(TraceFlags.SAMPLED))
        contexts[draft.key] = context
        status = Status(StatusCode.ERROR, draft.error) if draft.error is not None else Status(StatusCode.UNSET)
        spans.append(ReadableSpan(
            name=draft.name, context=context,
            parent=contexts[draft.parent] if draft.parent is not None else None,
            resource=resource, attributes=_attributes(draft.attributes),
            events=[Event(name, _attributes(attributes), timestamp) for name, timestamp, attributes in draft.events],
            kind=SpanKind.CLIENT if draft.kind == "client" else SpanKind.INTERNAL,
            status=status, start_time=draft.start,
            end_time=draft.end if draft.end is not None else max(draft.start, nanos(records[-1].ts)),
            instrumentation_scope=scope,
        ))  # fmt: skip
    return spans


def _attributes(values: dict[str, Any]) -> dict[str, Any]:
    """Sequences as tuples, as a live span stores them (so live and exported spans compare equal)."""
    return {key: tuple(value) if isinstance(value, list) else value for key, value in values.items()}


def _id(text: str, size: int) -> int:
    """A stable id of ``size`` bytes; never 0, which OpenTelemetry reads as "no id"."""
    value = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:size], "big")
    return value or 1
