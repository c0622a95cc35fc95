"""Live OpenTelemetry spans: ``agent.add_hook(OpenTelemetryHooks())``.

The hook sees every record as it is written (``StepHooks.on_record``) and hands it to a thread of its
own, which folds it through the one mapping (:mod:`baf.telemetry.mapping`) and starts, annotates and
ends spans on the tracer, at the times the records carry. Nothing of OpenTelemetry runs on the agent's
path: writing a record costs one append to a deque, so a slow or unreachable collector can never slow a
step or fail it (a span processor that exports synchronously blocks that thread, not the agent). The
thread works in batches, every 50 ms (and at once on :meth:`OpenTelemetryHooks.flush`). It is not woken
when a step ends: a thread woken mid-turn takes the GIL from the event loop at each ``select()``, and
those hand-overs cost the process more CPU than making the spans (``bench/bench_bridges.py``). If it
falls behind by ``max_queue`` records, further records are dropped, with one warning.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from baf.core.hooks import StepHooks
from baf.errors import MissingExtraError
from baf.telemetry.mapping import SCOPE_NAME, SpanAction, SpanMapper

if TYPE_CHECKING:
    from baf.core.agent import Agent
    from baf.core.session import Session
    from baf.log.record import Record

__all__ = ["OpenTelemetryHooks"]

logger = logging.getLogger("baf.telemetry")

#: Seconds between two drains of the record queue while no step ends (how late a span may start).
_DRAIN_INTERVAL = 0.05


class OpenTelemetryHooks(StepHooks):
    """Emit OpenTelemetry spans while sessions run: one per engine step, model call and tool call.

    Args:
        tracer_provider: Where spans go; ``None`` for the global one (``opentelemetry.trace``). To send
            them to an OTLP/HTTP collector, see :func:`~baf.telemetry.otlp.otlp_tracer_provider`.
        capture_content: Add prompts, completions, tool arguments and results, and message texts, after
            the agent's secret redactor. Off by default: spans then carry no conversation content.
        max_queue: Records the span thread may fall behind by before records are dropped.

    Raises:
        MissingExtraError: the ``otel`` extra is not installed (a ``ConfigurationError``).
    """

    def __init__(self, tracer_provider: Any = None, capture_content: bool = False, max_queue: int = 100_000) -> None:
        try:
            from opentelemetry import trace
        except ImportError as exc:
            raise MissingExtraError("OpenTelemetryHooks", "otel") from exc
        self.tracer_provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        self.capture_content = capture_content
        self.max_queue = max_queue
        self._tracer = self.tracer_provider.get_tracer(SCOPE_NAME)
        self._otel = _Otel()
        # A deque, not a queue.Queue: appending takes no lock and wakes no thread. The span thread drains
        # it every 50 ms, in one batch.
        self._pending: collections.deque[tuple[Agent, Record]] = collections.deque()
        self._wake = threading.Event()
        self._busy = False
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._dropped = 0

    def __repr__(self) -> str:
        return f"OpenTelemetryHooks(capture_content={self.capture_content})"

    @property
    def dropped(self) -> int:
        """Records dropped because the span thread fell behind by ``max_queue``."""
        return self._dropped

    def on_record(self, session: Session, record: Record) -> None:
        """Queue the record for the span thread (never blocks)."""
        if self._thread is None:
            self._start()
        if len(self._pending) >= self.max_queue:
            self._dropped += 1
            if self._dropped == 1:
                logger.warning("OpenTelemetry: the span thread is %d records behind; dropping records, so some "
                               "spans will be missing or unfinished", self.max_queue)  # fmt: skip
            return
        self._pending.append((session.agent, record))

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued record is turned into spans, then flush the tracer provider; whether
        both finished within ``timeout`` seconds. It blocks (a batch processor exports in the calling
        thread when flushed): for tests and shutdown, not for the event loop of a running agent."""
        deadline = time.monotonic() + timeout
        self._wake.set()
        while self._pending or self._busy:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)
        force_flush = getattr(self.tracer_provider, "force_flush", None)
        if force_flush is None:
            return True
        return bool(force_flush(max(1, int((deadline - time.monotonic()) * 1000))))

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="baf-otel", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        mappers: dict[str, SpanMapper] = {}
        spans: dict[tuple[str, str], Any] = {}
        pending = self._pending
        while True:
            self._wake.wait(_DRAIN_INTERVAL)
            self._wake.clear()
            self._busy = True
            try:
                while pending:
                    agent, record = pending.popleft()
                    try:
                        self._feed(agent, record, mappers, spans)
                    except Exception:  # a bug here must not stop the thread: later steps still get spans
                        logger.exception("OpenTelemetry: could not turn a record into spans")
            finally:
                self._busy = False

    def _feed(
        self, agent: Agent, record: Record, mappers: dict[str, SpanMapper], spans: dict[tuple[str, str], Any]
    ) -> None:
        if SpanMapper.ignores(record):
            return
        mapper = mappers.get(record.session_id)
        if mapper is None:
            mapper = mappers[record.session_id] = SpanMapper(
                record.session_id, agent.name, self.capture_content, agent.redactor.redact_text
            )
        for action in mapper.feed(record):
            self._apply(record.session_id, action, spans)
        if mapper.idle and not mapper.waiting:
            del mappers[record.session_id]  # nothing open: a later record starts afresh

    def _apply(self, session_id: str, action: SpanAction, spans: dict[tuple[str, str], Any]) -> None:
        key = (session_id, action.key)
        if action.op == "start":
            if action.leaf:  # made at its end, with every attribute at once: half the SDK's work per span
                spans[key] = _Leaf(action)
            else:
                span = self._start_span(session_id, action, spans, action.attributes)
                # Its children start in its context: made once here, not once per child.
                spans[key] = _Open(span, self._otel.set_span_in_context(span))
            return
        entry = spans.get(key)
        if entry is None:
            return
        if isinstance(entry, _Leaf):
            if action.op == "event":
                entry.events.append(action)
            else:
                entry.start.attributes.update(action.attributes)
                entry.error = action.error if action.error is not None else entry.error
            if action.op != "end":
                return
            del spans[key]
            made = self._start_span(session_id, entry.start, spans, entry.start.attributes)
            for event in entry.events:
                made.add_event(event.name, event.attributes, event.time_ns)
            if entry.error is not None:
                made.set_status(self._status_error(entry.error))
            made.end(end_time=action.time_ns)
            return
        span = entry.span
        if action.op == "event":
            span.add_event(action.name, action.attributes, action.time_ns)
            return
        if action.attributes:
            span.set_attributes(action.attributes)
        if action.error is not None:
            span.set_status(self._status_error(action.error))
        if action.op == "end":
            del spans[key]
            span.end(end_time=action.time_ns)

    def _start_span(
        self, session_id: str, action: SpanAction, spans: dict[tuple[str, str], Any], attributes: dict[str, Any]
    ) -> Any:
        parent = spans.get((session_id, action.parent)) if action.parent is not None else None
        # A step is the root of its own trace: never the parent of whatever is current in this thread.
        parent_context = parent.context if isinstance(parent, _Open) else self._otel.root
        kind = self._otel.client if action.kind == "client" else self._otel.internal
        return self._tracer.start_span(action.name, context=parent_context, kind=kind, attributes=attributes,
                                       start_time=action.time_ns)  # fmt: skip

    def _status_error(self, description: str) -> Any:
        return self._otel.status(self._otel.error, description)


class _Open:
    """A step or reasoning span, started, with the context its children start in."""

    __slots__ = ("context", "span")

    def __init__(self, span: Any, context: Any) -> None:
        self.span = span
        self.context = context


class _Leaf:
    """A model or tool call span waiting for its end (see :meth:`OpenTelemetryHooks._apply`)."""

    __slots__ = ("error", "events", "start")

    def __init__(self, start: SpanAction) -> None:
        self.start = start
        self.events: list[SpanAction] = []
        self.error: str | None = None


class _Otel:
    """The OpenTelemetry names the span thread uses, imported once."""

    def __init__(self) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        self.set_span_in_context = trace.set_span_in_context
        self.root = context.Context()  # empty, so a step never nests in what is current (immutable: shared)
        self.client, self.internal = SpanKind.CLIENT, SpanKind.INTERNAL
        self.status, self.error = Status, StatusCode.ERROR
