"""An agent traced live with OpenTelemetry: one span per engine step, model call and tool call.

``python examples/opentelemetry_agent.py`` runs offline (a scripted model plays the assistant) and prints
the spans it emitted, nested as they ran, with their GenAI attributes. With a collector running (Jaeger,
Phoenix, Langfuse, an OpenTelemetry Collector...), ``--otlp http://localhost:4318/v1/traces`` sends them
there instead; ``--content`` adds prompts, completions and tool results (redacted). Needs the otel extra:
``pip install -e ".[otel]"`` (in a clone of baf).
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from baf import Agent
from baf.errors import MissingExtraError
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.telemetry import OpenTelemetryHooks, otlp_tracer_provider
from baf.testing import ScriptedLLM

try:  # the SDK's in-memory exporter shows the spans here; without the extra, say which one to install
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
except ImportError as exc:
    raise MissingExtraError("Printing the spans (opentelemetry-sdk)", "otel") from exc

SHOWN = (
    "gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model", "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens", "gen_ai.tool.name", "baf.reasoning.outcome", "gen_ai.input.messages",
)  # fmt: skip


def build(tracer_provider: Any, capture_content: bool) -> Agent:
    model = ScriptedLLM([
        ScriptedLLM.tool_call("convert", {"amount": 120, "rate": 0.92}),
        "120 USD is about 110.40 EUR.",
    ])  # fmt: skip
    agent = Agent("traced_agent", log="memory://")
    state = new_reasoning_state(agent, model, enable_task_planning=False)
    state.when_event().go_to(state)

    @agent.tool
    def convert(amount: float, rate: float) -> float:
        """Convert an amount at an exchange rate."""
        return round(amount * rate, 2)

    agent.add_hook(OpenTelemetryHooks(tracer_provider=tracer_provider, capture_content=capture_content))
    return agent


def print_tree(spans: Any) -> None:
    children: dict[int | None, list[Any]] = {}
    for span in sorted(spans, key=lambda s: s.start_time):
        children.setdefault(span.parent.span_id if span.parent else None, []).append(span)

    def show(span: Any, depth: int) -> None:
        took = (span.end_time - span.start_time) / 1e6
        attributes = {k: span.attributes[k] for k in SHOWN if k in span.attributes}
        print(f"{'  ' * depth}{span.name}  ({took:.2f} ms)  {attributes}")
        for child in children.get(span.context.span_id, []):
            show(child, depth + 1)

    for root in children.get(None, []):
        show(root, 0)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--otlp", metavar="URL", help="send the spans to this OTLP/HTTP traces endpoint")
    parser.add_argument("--content", action="store_true", help="capture prompts, completions and tool results")
    args = parser.parse_args()
    exporter = InMemorySpanExporter()
    if args.otlp:
        provider = otlp_tracer_provider(args.otlp, service_name="baf-example")
    else:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = build(provider, args.content)
    async with agent:
        await agent.receive_message("demo", "How much is 120 USD in EUR?")
        hooks = agent.hooks.hooks[-1]
        assert isinstance(hooks, OpenTelemetryHooks)
        hooks.flush()
    provider.shutdown()
    if args.otlp:
        print(f"spans sent to {args.otlp}")
    else:
        print_tree(exporter.get_finished_spans())


if __name__ == "__main__":
    asyncio.run(main())
