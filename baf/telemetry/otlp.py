"""Sending baf's spans to an OTLP/HTTP collector without ever holding the agent up.

:func:`otlp_tracer_provider` builds a tracer provider whose spans are batched and posted to
``endpoint`` (protobuf over HTTP, the opentelemetry-exporter-otlp-proto-http exporter) from the batch
processor's thread. When the collector cannot be reached, the batch is dropped and one warning says so;
further batches are dropped without a network attempt for ``retry_after`` seconds, then tried again; when
the collector answers again, that is logged once too. The exporter's own retry warnings are kept out of
the log meanwhile (one outage, one warning).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

from baf.errors import MissingExtraError

__all__ = ["otlp_tracer_provider"]

logger = logging.getLogger("baf.telemetry")

_EXPORTER_LOGGER = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
_guarded = threading.local()


class _WhileGuarded(logging.Filter):
    """Drops the exporter's own log lines written while a :class:`_GuardedExporter` call is under way
    in the same thread (other users of the exporter in the process keep theirs)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_guarded, "active", False)


_FILTER = _WhileGuarded()


def otlp_tracer_provider(
    endpoint: str,
    *,
    headers: Mapping[str, str] | None = None,
    service_name: str = "baf",
    timeout: float = 5.0,
    retry_after: float = 30.0,
    batch_delay: float = 5.0,
) -> Any:
    """A ``TracerProvider`` exporting to the OTLP/HTTP traces endpoint ``endpoint``
    (``http://host:4318/v1/traces``), batched, for :class:`~baf.telemetry.hooks.OpenTelemetryHooks`.

    Args:
        endpoint: The full traces URL of the collector.
        headers: Sent with every export (an API key, ...).
        service_name: The ``service.name`` resource attribute.
        timeout: Seconds one export may take, retries included.
        retry_after: Seconds batches are dropped without trying after the collector failed.
        batch_delay: Seconds spans wait to be sent with others (the batch processor's schedule delay).

    Raises:
        MissingExtraError: the ``otel`` extra is not installed (a ``ConfigurationError``).
    """
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise MissingExtraError("OTLP export", "otel") from exc
    exporter = _GuardedExporter(
        OTLPSpanExporter(endpoint=endpoint, headers=dict(headers or {}), timeout=timeout), endpoint, retry_after
    )
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    processor = BatchSpanProcessor(cast(Any, exporter), schedule_delay_millis=batch_delay * 1000)  # duck-typed exporter
    provider.add_span_processor(processor)
    return provider


class _GuardedExporter:
    """A span exporter around another: one warning per outage, and no attempts for a while after one."""

    def __init__(self, inner: Any, endpoint: str, retry_after: float) -> None:
        self.inner = inner
        self.endpoint = endpoint
        self.retry_after = retry_after
        self.dropped = 0
        self._down_since: float | None = None
        self._next_try = 0.0
        exporter_logger = logging.getLogger(_EXPORTER_LOGGER)
        if _FILTER not in exporter_logger.filters:
            exporter_logger.addFilter(_FILTER)

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        if self._down_since is not None and time.monotonic() < self._next_try:
            self.dropped += len(spans)
            return SpanExportResult.FAILURE
        _guarded.active = True
        try:
            result = self.inner.export(spans)
        except Exception:  # an exporter bug must not reach the batch thread's loop
            result = SpanExportResult.FAILURE
        finally:
            _guarded.active = False
        if result == SpanExportResult.SUCCESS:
            if self._down_since is not None:
                logger.info("OpenTelemetry: %s answers again; %d spans were dropped meanwhile", self.endpoint,
                            self.dropped)  # fmt: skip
                self._down_since, self.dropped = None, 0
            return result
        self.dropped += len(spans)
        if self._down_since is None:
            self._down_since = time.monotonic()
            logger.warning("OpenTelemetry: cannot export spans to %s; dropping them (the agent is not affected) "
                           "and trying again every %g seconds", self.endpoint, self.retry_after)  # fmt: skip
        self._next_try = time.monotonic() + self.retry_after
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))
