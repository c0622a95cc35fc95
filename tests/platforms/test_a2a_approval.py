"""A2A and human approval: a tool call waiting for a decision puts the task in ``input-required``, and a
data part ``{"approval": {...}}`` sent to it decides the call (real HTTP, the a2a-sdk client)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import Message, Part, Role, SendMessageRequest, TaskState
from google.protobuf.json_format import MessageToDict

from baf import Agent
from baf.library.state.reasoning_state_library import reasoning_body
from baf.llm.base import LLMResponse, ToolCall
from baf.log.record import RecordKind
from baf.platforms.a2a import A2APlatform
from baf.testing import FunctionLLM


def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> Any:
    """``pay`` asks for one payment; ``pay twice`` for two in one response; then the results are told."""
    if messages[-1]["role"] == "tool":
        results = [m["content"] for m in messages if m["role"] == "tool"]
        return "Done: " + "; ".join(results)
    names = ["bob", "carol"] if messages[-1]["content"] == "pay twice" else ["bob"]
    return LLMResponse(None, [ToolCall(f"pay-{name}", "pay", json.dumps({"to": name})) for name in names])


@dataclass
class Outcome:
    """What one streamed task showed: its states, its artifacts' texts, its last status message."""

    task_id: str = ""
    states: list[str] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    text: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@pytest.fixture
async def served() -> AsyncIterator[tuple[Agent, Any, list[str]]]:
    ran: list[str] = []
    agent = Agent("a2a-approvals", log="memory://")
    state = agent.new_state("main", initial=True)
    state.set_body(reasoning_body(FunctionLLM(model), enable_task_planning=False))
    state.when_event().go_to(state)

    def pay(to: str) -> str:
        """Pay someone."""
        ran.append(to)
        return f"paid {to}"

    agent.new_tool(pay, requires_approval=True)
    platform = agent.use_a2a_platform("127.0.0.1", 0)
    assert isinstance(platform, A2APlatform)
    async with agent, httpx.AsyncClient(timeout=10) as http:
        client = await create_client(platform.url, ClientConfig(streaming=True, httpx_client=http))
        yield agent, client, ran


def decision(call_id: str, approved: bool, **extra: Any) -> Part:
    part = Part()
    part.data.struct_value.update({"approval": {"call_id": call_id, "approved": approved, **extra}})
    return part


async def send(client: Any, context_id: str, part: Part, task_id: str = "") -> Outcome:
    message = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, context_id=context_id, task_id=task_id,
                      parts=[part])  # fmt: skip
    outcome = Outcome()
    async for response in client.send_message(SendMessageRequest(message=message)):
        if response.HasField("status_update"):
            update = response.status_update
            outcome.task_id = update.task_id
            outcome.states.append(TaskState.Name(update.status.state))
            parts = update.status.message.parts
            outcome.text = "\n".join(p.text for p in parts if p.HasField("text"))
            outcome.data = next((MessageToDict(p.data) for p in parts if p.HasField("data")), {})
        elif response.HasField("artifact_update"):
            outcome.replies.append("".join(p.text for p in response.artifact_update.artifact.parts))
    return outcome


async def test_a_waiting_call_makes_the_task_input_required_and_a_decision_continues_it(
    served: tuple[Agent, Any, list[str]],
) -> None:
    agent, client, ran = served
    asked = await send(client, "c1", Part(text="pay"))
    assert asked.states[-1] == "TASK_STATE_INPUT_REQUIRED" and asked.replies == [] and ran == []
    assert asked.data == {"approval_requests": [{"call_id": "pay-bob", "tool": "pay", "arguments": '{"to": "bob"}',
                                                 "step": 0}]}  # fmt: skip
    assert "`pay` waits for approval (call `pay-bob`)" in asked.text and '{"approval":' in asked.text
    # The decision, in the same task: it goes on and completes with what the agent says next.
    answered = await send(client, "c1", decision("pay-bob", True, approver="ops"), task_id=asked.task_id)
    assert answered.task_id == asked.task_id
    assert answered.states[-1] == "TASK_STATE_COMPLETED" and answered.replies == ["Done: paid bob"]
    assert ran == ["bob"]
    (decided,) = [r for r in await agent.log.read("a2a-c1") if r.kind == RecordKind.APPROVAL_DECIDED]
    assert decided.data["approved"] is True and decided.data["by"] == "a2a client ops"


async def test_a_denial_is_told_to_the_model_and_the_call_does_not_run(served: tuple[Agent, Any, list[str]]) -> None:
    _, client, ran = served
    asked = await send(client, "c2", Part(text="pay"))
    answered = await send(client, "c2", decision("pay-bob", False, reason="not today"), task_id=asked.task_id)
    assert answered.states[-1] == "TASK_STATE_COMPLETED" and ran == []
    (reply,) = answered.replies
    assert "denied by a2a client" in reply and "not today" in reply


async def test_calls_held_together_keep_the_task_input_required_until_each_is_decided(
    served: tuple[Agent, Any, list[str]],
) -> None:
    _, client, ran = served
    asked = await send(client, "c3", Part(text="pay twice"))
    assert [r["call_id"] for r in asked.data["approval_requests"]] == ["pay-bob", "pay-carol"]
    first = await send(client, "c3", decision("pay-bob", True), task_id=asked.task_id)
    assert first.states[-1] == "TASK_STATE_INPUT_REQUIRED" and first.replies == [] and ran == []
    assert [r["call_id"] for r in first.data["approval_requests"]] == ["pay-carol"]
    second = await send(client, "c3", decision("pay-carol", True), task_id=asked.task_id)
    assert second.states[-1] == "TASK_STATE_COMPLETED" and second.replies == ["Done: paid bob; paid carol"]
    assert ran == ["bob", "carol"]


async def test_a_malformed_or_unknown_decision_is_refused_clearly_and_runs_nothing(
    served: tuple[Agent, Any, list[str]],
) -> None:
    _, client, ran = served
    asked = await send(client, "c4", Part(text="pay"))
    malformed = await send(client, "c4", decision("pay-bob", "yes"))  # type: ignore[arg-type]
    assert malformed.states[-1] == "TASK_STATE_REJECTED"
    assert "'approved' a boolean" in malformed.text
    unknown = await send(client, "c4", decision("pay-nobody", True))  # a new task of the context
    assert unknown.states[-1] == "TASK_STATE_FAILED"
    assert unknown.text.startswith("Approval refused: no tool call 'pay-nobody' is waiting")
    assert ran == []
    # The real call still waits, and its task can still decide it.
    answered = await send(client, "c4", decision("pay-bob", True), task_id=asked.task_id)
    assert answered.replies == ["Done: paid bob"] and ran == ["bob"]
