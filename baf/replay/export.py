"""Export a session: its records as JSON lines, or its trace as OpenTelemetry spans (OTLP/JSON).

The spans are those of :mod:`baf.telemetry` (one mapping, shared with the live
:class:`~baf.telemetry.OpenTelemetryHooks`, so an exported session shows as it did live): one trace per
engine step (``baf.step``), with ``invoke_agent``, ``chat`` and ``execute_tool`` spans nested in it,
following the OpenTelemetry GenAI semantic conventions. They are encoded by the OpenTelemetry packages
(the ``otel`` extra): the OTLP protobuf encoder, then protobuf's JSON form with the one change OTLP/JSON
makes to it (trace and span ids in hex, not base64). The output is one ``ExportTraceServiceRequest``
document, which an OTLP/HTTP collector accepts on ``/v1/traces`` with ``Content-Type: application/json``
and which Jaeger and similar tools import as a file.

Ids are derived from the session id and seqs, so exporting the same session twice gives the same traces.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from typing import IO, Any

from baf.errors import MissingExtraError
from baf.log.record import Record
from baf.log.redaction import Redactor
from baf.replay.render import visible_json
from baf.telemetry.mapping import SCOPE_NAME
from baf.telemetry.spans import spans_from_records

__all__ = ["SCOPE_NAME", "export_jsonl", "export_otel", "otlp_json", "record_to_json"]


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


def export_otel(
    records: list[Record], redactor: Redactor | None = None, service_name: str = "baf", capture_content: bool = True
) -> dict[str, Any]:
    """The session's trace as an OTLP/JSON ``ExportTraceServiceRequest`` (a dict, ready for ``json.dump``).

    ``capture_content`` (on by default: the log is yours) adds prompts, completions, tool arguments and
    results, and message texts; ``redactor`` is applied to the records and to that content.

    Raises:
        ValueError: no records.
        MissingExtraError: the ``otel`` extra is not installed (a ``ConfigurationError``).
    """
    if redactor is not None:
        records = [redactor.redact_record(r) for r in records]
    if not records:
        raise ValueError("no records to export")
    spans = spans_from_records(records, capture_content=capture_content,
                               redact=redactor.redact_text if redactor is not None else None,
                               resource_attributes={"service.name": service_name})  # fmt: skip
    return otlp_json(spans)


def otlp_json(spans: list[Any]) -> dict[str, Any]:
    """SDK spans as an OTLP/JSON ``ExportTraceServiceRequest``: encoded by the OTLP protobuf encoder, in
    protobuf's JSON form, with ids in hex as OTLP/JSON wants them (protobuf's JSON has them in base64)."""
    try:
        from google.protobuf.json_format import MessageToDict
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    except ImportError as exc:
        raise MissingExtraError("OTLP/JSON export", "otel") from exc

    document = MessageToDict(
        encode_spans(spans), use_integers_for_enums=True, always_print_fields_with_no_presence=True
    )
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64decode(span[key]).hex()
                for link in span.get("links", []):
                    for key in ("traceId", "spanId"):
                        if link.get(key):
                            link[key] = base64.b64decode(link[key]).hex()
    return document
