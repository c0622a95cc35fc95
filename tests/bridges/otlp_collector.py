"""A stand-in for an OTLP/HTTP collector on loopback: it decodes what it receives on ``/v1/traces``.

Protobuf bodies (``application/x-protobuf``) are parsed as ``ExportTraceServiceRequest``; JSON bodies
(``application/json``) are read by the OTLP/JSON rules (ids in hex) into the same message. Received
spans are kept, flattened, for the test to look at.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


@dataclass
class Collector:
    url: str
    requests: list[tuple[str, ExportTraceServiceRequest]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def spans(self) -> list[Any]:
        """Every span received, in arrival order."""
        with self.lock:
            return [span for _, request in self.requests for rs in request.resource_spans
                    for ss in rs.scope_spans for span in ss.spans]  # fmt: skip


def from_otlp_json(document: dict[str, Any]) -> ExportTraceServiceRequest:
    """An OTLP/JSON document as the protobuf message (protobuf's JSON reader wants ids in base64)."""
    document = json.loads(json.dumps(document))
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    message = ExportTraceServiceRequest()
    ParseDict(document, message)
    return message


@contextmanager
def collector() -> Iterator[Collector]:
    state: Collector

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            kind = self.headers.get("Content-Type", "")
            if self.path != "/v1/traces":
                self.send_response(404)
                self.end_headers()
                return
            if kind.startswith("application/json"):
                message = from_otlp_json(json.loads(body))
            else:
                message = ExportTraceServiceRequest()
                message.ParseFromString(body)
            with state.lock:
                state.requests.append((kind, message))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state = Collector(f"http://127.0.0.1:{server.server_address[1]}/v1/traces")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
