"""Helpers shared by the reasoning-state tests."""

from __future__ import annotations

import copy
from typing import Any

from baf import Agent
from baf.core.state import State
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.llm.base import LLM
from baf.log.record import Record
from baf.testing import RecordingPlatform
from baf.testing.llms import LLMRequest


def reasoning_agent(llm: LLM, log: str = "memory://", **options: Any) -> tuple[Agent, State]:
    """An agent whose only state is a self-looping reasoning state."""
    agent = Agent("assistant", log=log)
    state = new_reasoning_state(agent, llm, **options)
    state.when_event().go_to(state)
    return agent, state


async def records_of(agent: Agent, session_id: str, kind: str | None = None) -> list[Record]:
    """The session's records (of one kind if given), as the log holds them."""
    return [r for r in await agent.log.read(session_id) if kind is None or r.kind == kind]


def streamed_kinds(platform: RecordingPlatform, session_id: str) -> list[str]:
    """The kinds of the reasoning steps the platform received, in order."""
    return [step.kind for step in platform.steps[session_id]]


def tool_messages(request: LLMRequest) -> list[dict[str, Any]]:
    """The tool-result messages of a request, in order."""
    return [m for m in request.messages if m["role"] == "tool"]


def rebuild_requests(records: list[Record]) -> list[LLMRequest]:
    """Every model request of the reasoning loop, rebuilt from ``llm_request`` records alone.

    A record carries the messages added since the previous request of the same invocation, and
    ``system`` / ``tools`` only when they changed; ``step`` 0 starts a new invocation.
    """
    rebuilt: list[LLMRequest] = []
    messages: list[dict[str, Any]] = []
    system: str | None = None
    tools: list[dict[str, Any]] = []
    for record in records:
        if record.kind != "llm_request":
            continue
        data = record.data
        if data["step"] == 0:
            messages, system, tools = [], None, []
        messages = messages + copy.deepcopy(data["messages"])
        if "system" in data:
            system = data["system"]
        if "tools" in data:
            tools = copy.deepcopy(data["tools"])
        rebuilt.append(LLMRequest(list(messages), tools, dict(data.get("parameters") or {}), system))
    return rebuilt


def trail(records: list[Record]) -> list[str]:
    """Record kinds, with reasoning steps spelled ``step:<kind>``: the order of the loop in one list.

    The session-start step's bookkeeping (``event_seq`` None) is left out: the first message can be
    recorded while that step is still finishing, so where its records land is not the loop's order.
    """
    return [
        f"step:{r.data['kind']}" if r.kind == "reasoning_step" else r.kind
        for r in records
        if not (r.kind in ("step_started", "step_finished") and r.data.get("event_seq") is None)
    ]


def normalized_events(platform: RecordingPlatform, session_id: str) -> list[tuple[Any, ...]]:
    """What the platform received, in arrival order, reduced to comparable tuples."""
    out: list[tuple[Any, ...]] = []
    for sid, kind, payload in platform.events:
        if sid != session_id:
            continue
        if kind == "step":
            out.append(("step", payload.kind, payload.step))
        elif kind == "tasks":
            out.append(("tasks", [(t["id"], t["status"]) for t in payload]))
        else:
            out.append((kind, payload))
    return out
