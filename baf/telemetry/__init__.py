"""OpenTelemetry for baf (the ``otel`` extra: ``pip install -e ".[otel]"`` in a clone of baf).

One mapping from records to spans following the GenAI semantic conventions
(:mod:`baf.telemetry.mapping`), used two ways:

- live: ``agent.add_hook(OpenTelemetryHooks(tracer_provider=...))`` emits spans while sessions run;
- offline: :func:`spans_from_records` (``baf export --otel``) turns a recorded session into the same spans.

See ``docs/opentelemetry.md``. The OpenTelemetry packages are imported only when spans are made, so this
module imports without them.
"""

from baf.telemetry.hooks import OpenTelemetryHooks
from baf.telemetry.mapping import SCOPE_NAME, SpanAction, SpanMapper
from baf.telemetry.otlp import otlp_tracer_provider
from baf.telemetry.spans import spans_from_records

__all__ = ["SCOPE_NAME", "OpenTelemetryHooks", "SpanAction", "SpanMapper", "otlp_tracer_provider", "spans_from_records"]
