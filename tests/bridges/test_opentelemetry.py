"""Live OpenTelemetry spans (OpenTelemetryHooks) and the offline export: one mapping, GenAI conventions,
exported to the SDK's in-memory exporter and over OTLP/HTTP to a collector stand-in on loopback."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import threading
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from baf import Agent
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm.base import Usage
from baf.log.record import Record
from baf.replay.export import export_otel
from baf.telemetry import OpenTelemetryHooks, otlp_tracer_provider, spans_from_records
from baf.testing.llms import LLMResponse, ScriptedLLM

from .otlp_collector import collector, from_otlp_json

SECRET = "sk-live-0123456789abcdef"


def script() -> ScriptedLLM:
    """Two turns: a call of ``add`` (with token counts), a failing call of ``boom``, then the answer."""
    first = dataclasses.replace(ScriptedLLM.tool_call("add", {"a": 2, "b": 3}), usage=Usage(11, 7))
    return ScriptedLLM([first, ScriptedLLM.tool_call("boom", {}),
                        LLMResponse(text=f"It is 5 (key {SECRET}).", usage=Usage(30, 5))])  # fmt: skip


def traced_agent(
    tracer_provider: Any, capture_content: bool = False, llm: ScriptedLLM | None = None
) -> tuple[Agent, OpenTelemetryHooks]:
    agent = Agent("otel-agent", log="memory://")
    state = new_reasoning_state(agent, llm or script(), enable_task_planning=False)
    state.when_event().go_to(state)

    @agent.tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @agent.tool
    def boom() -> str:
        """Always fails."""
        raise RuntimeError("it broke")

    agent.mark_secret(SECRET)
    hooks = OpenTelemetryHooks(tracer_provider=tracer_provider, capture_content=capture_content)
    agent.add_hook(hooks)
    return agent, hooks


def in_memory() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


async def run(agent: Agent, hooks: OpenTelemetryHooks, text: str = "What is 2 + 3?") -> list[Record]:
    async with agent:
        await asyncio.wait_for(agent.receive_message("s", text), 30)
        assert hooks.flush()
        return await agent.log.read("s")


def by_name(spans: Any) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        found.setdefault(span.name, []).append(span)
    return found


def shape(spans: Any) -> list[dict[str, Any]]:
    """What a span says, ids left out (live ids are random): parent by name, in start order."""
    names = {span.context.span_id: span.name for span in spans}
    return [{
        "name": s.name, "kind": s.kind, "parent": names.get(s.parent.span_id) if s.parent else None,
        "start": s.start_time, "end": s.end_time, "attributes": dict(s.attributes or {}),
        "status": (s.status.status_code, s.status.description),
        "events": [(e.name, e.timestamp, dict(e.attributes or {})) for e in s.events],
    } for s in sorted(spans, key=lambda s: (s.start_time or 0, s.name))]  # fmt: skip


async def test_live_spans_nest_as_they_ran_and_follow_the_genai_conventions() -> None:
    provider, exporter = in_memory()
    agent, hooks = traced_agent(provider)
    await run(agent, hooks)
    spans = exporter.get_finished_spans()
    named = by_name(spans)
    [step] = [s for s in named["baf.step"] if s.attributes.get("baf.event_seq") is not None]
    [invoke] = named["invoke_agent otel-agent"]
    chats = named["chat scripted"]
    [add] = named["execute_tool add"]
    [boom] = named["execute_tool boom"]
    # Nested as they ran: step > invoke_agent > chat / execute_tool, one trace per step.
    assert step.parent is None and invoke.parent.span_id == step.context.span_id
    assert all(s.parent.span_id == invoke.context.span_id for s in [*chats, add, boom])
    assert {s.context.trace_id for s in [step, invoke, *chats, add, boom]} == {step.context.trace_id}
    assert step.start_time <= invoke.start_time <= chats[0].start_time <= chats[0].end_time <= add.start_time
    assert add.end_time <= chats[1].start_time and invoke.end_time <= step.end_time

    assert invoke.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert invoke.attributes["gen_ai.conversation.id"] == "s" == step.attributes["gen_ai.conversation.id"]
    assert invoke.attributes["baf.reasoning.outcome"] == "answered"
    first = chats[0]
    assert first.kind == SpanKind.CLIENT
    assert {k: first.attributes[k] for k in ("gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model",
                                             "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")} == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "baf.testing", "gen_ai.request.model": "scripted",
        "gen_ai.usage.input_tokens": 11, "gen_ai.usage.output_tokens": 7,
    }  # fmt: skip
    assert first.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert add.attributes["gen_ai.tool.name"] == "add" and add.attributes["gen_ai.operation.name"] == "execute_tool"
    assert add.status.status_code == StatusCode.UNSET
    assert boom.status.status_code == StatusCode.ERROR and boom.attributes["error.type"] == "tool_error"
    assert [e.name for e in boom.events] == ["exception"]  # the tool's own exception, recorded as an error
    assert [e.name for e in step.events] == ["baf.message_received", "baf.transition"]

    # Content capture is off: no prompt, completion, argument, result or message text anywhere (an
    # exception keeps its type and message, not its traceback).
    everything = repr([(dict(s.attributes), [dict(e.attributes) for e in s.events]) for s in spans])
    for content in ("What is 2 + 3", "It is 5", '"a": 2', "Traceback", "gen_ai.input.messages", "baf.text"):
        assert content not in everything


async def test_content_is_captured_only_when_asked_and_always_redacted() -> None:
    provider, exporter = in_memory()
    agent, hooks = traced_agent(provider, capture_content=True)
    await run(agent, hooks, f"What is 2 + 3? My key is {SECRET}")
    named = by_name(exporter.get_finished_spans())
    chats = named["chat scripted"]
    inputs = chats[0].attributes["gen_ai.input.messages"]
    assert "What is 2 + 3? My key is [REDACTED]" in inputs
    assert '"role": "user"' in inputs and "gen_ai.system_instructions" in chats[0].attributes
    assert "It is 5 (key [REDACTED])." in chats[-1].attributes["gen_ai.output.messages"]
    [add] = named["execute_tool add"]
    assert add.attributes["gen_ai.tool.call.arguments"] == '{"a": 2, "b": 3}'
    assert add.attributes["gen_ai.tool.call.result"] == "5"
    spans_text = repr([(dict(s.attributes), [dict(e.attributes) for e in s.events]) for s in named["baf.step"]])
    assert SECRET not in repr([dict(s.attributes) for s in exporter.get_finished_spans()]) + spans_text
    assert "[REDACTED]" in spans_text  # the message and the reply, as events, redacted


@pytest.mark.parametrize("capture_content", [False, True])
async def test_live_spans_and_the_offline_export_agree(capture_content: bool) -> None:
    provider, exporter = in_memory()
    agent, hooks = traced_agent(provider, capture_content)
    records = await run(agent, hooks)
    live = shape(exporter.get_finished_spans())
    exported = shape(spans_from_records(records, capture_content=capture_content,
                                        redact=agent.redactor.redact_text))  # fmt: skip
    assert len(live) == 8  # the start step; the message's step, its run, 3 model calls and 2 tool calls
    assert exported == live


async def test_spans_reach_an_otlp_http_collector_live_and_as_an_exported_file() -> None:
    with collector() as stand_in:
        provider = otlp_tracer_provider(stand_in.url, service_name="bridges-test")
        agent, hooks = traced_agent(provider)
        records = await run(agent, hooks)
        provider.shutdown()
        received = stand_in.spans()
        assert all(kind == "application/x-protobuf" for kind, _ in stand_in.requests)
        assert sorted(span.name for span in received) == sorted([
            "baf.step", "baf.step", "invoke_agent otel-agent", "chat scripted", "chat scripted", "chat scripted",
            "execute_tool add", "execute_tool boom",
        ])  # fmt: skip
        resource = stand_in.requests[0][1].resource_spans[0].resource
        assert {a.key: a.value.string_value for a in resource.attributes}["service.name"] == "bridges-test"

        # The offline export of the same session, posted as OTLP/JSON, decodes to the same spans.
        document = export_otel(records, capture_content=False)
        exported = from_otlp_json(document)
        exported_spans = [s for rs in exported.resource_spans for ss in rs.scope_spans for s in ss.spans]

        def summary(spans: Any) -> list[tuple[Any, ...]]:
            return sorted((s.name, s.start_time_unix_nano, s.end_time_unix_nano, s.status.code,
                           tuple(sorted((a.key, str(a.value)) for a in s.attributes))) for s in spans)  # fmt: skip

        assert summary(exported_spans) == summary(received)


async def test_an_otlp_endpoint_that_is_down_drops_spans_with_one_warning_and_the_agent_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A port that accepts connections and never answers: an export waits out its timeout.
    silent = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        silent.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(silent.accept()[0])
            except TimeoutError:
                continue

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}/v1/traces"
    provider = otlp_tracer_provider(endpoint, timeout=2, retry_after=60, batch_delay=0.05)
    exported_from: set[str] = set()
    processor = provider._active_span_processor._span_processors[0]
    guarded = processor._batch_processor._exporter
    inner_export = guarded.inner.export

    def watch(spans: Any) -> Any:
        exported_from.add(threading.current_thread().name)
        return inner_export(spans)

    guarded.inner.export = watch
    agent, _ = traced_agent(provider, llm=ScriptedLLM(["five"] * 3))
    agent_thread = threading.current_thread().name
    try:
        with caplog.at_level(logging.DEBUG):
            async with agent:
                for index in range(3):
                    await asyncio.wait_for(agent.receive_message(f"s{index}", "What is 2 + 3?"), 10)
                for _ in range(200):  # the batch thread exports on its own schedule
                    if guarded.dropped:
                        break
                    await asyncio.sleep(0.05)
                replies = [r for r in await agent.log.read("s2") if r.kind == "reply"]
            provider.shutdown()
    finally:
        stop.set()
        acceptor.join(5)
        silent.close()
        for connection in held:
            connection.close()
    assert replies  # the agent answered
    assert exported_from and agent_thread not in exported_from  # exports never ran on the agent's thread
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.name for r in warnings] == ["baf.telemetry"], [r.getMessage() for r in warnings]
    assert "cannot export spans to " + endpoint in warnings[0].getMessage()
    assert guarded.dropped > 0


def test_an_exporter_result_is_what_the_guard_reports() -> None:
    # The guard passes success through and counts what a failed export dropped.
    from baf.telemetry.otlp import _GuardedExporter

    class Flaky:
        def __init__(self) -> None:
            self.results = [SpanExportResult.FAILURE, SpanExportResult.SUCCESS]

        def export(self, spans: Any) -> SpanExportResult:
            return self.results.pop(0)

    guard = _GuardedExporter(Flaky(), "http://example.invalid/v1/traces", retry_after=0)
    assert guard.export([1, 2]) == SpanExportResult.FAILURE and guard.dropped == 2
    assert guard.export([3]) == SpanExportResult.SUCCESS and guard.dropped == 0


async def test_on_record_sees_every_record_in_order_and_a_failing_one_is_contained(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from baf.core.hooks import StepHooks

    seen: list[tuple[str, int]] = []

    class Watch(StepHooks):
        def on_record(self, session: Any, record: Record) -> None:
            seen.append((record.session_id, record.seq))

    class Broken(StepHooks):
        def on_record(self, session: Any, record: Record) -> None:
            raise RuntimeError("hook bug")

    agent = Agent("watched", log="memory://")
    state = new_reasoning_state(agent, ScriptedLLM(["hello"]), enable_task_planning=False)
    state.when_event().go_to(state)
    agent.add_hook(Broken())
    agent.add_hook(Watch())
    with caplog.at_level(logging.ERROR, logger="baf.hooks"):
        async with agent:
            await asyncio.wait_for(agent.receive_message("s", "hi"), 30)
            records = await agent.log.read("s")
    assert seen == [("s", r.seq) for r in records]  # every record, in seq order, the broken hook notwithstanding
    assert any(r.kind == "reply" for r in records)
    assert "hook bug" in caplog.text
