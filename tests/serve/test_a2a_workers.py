"""A2A with two worker processes: a task sent to the worker that does not run its session (its context)
is carried out by the owner, and the worker the client waits on publishes it from the log: the
replies, the steps, ``input-required`` for a call waiting for approval, and the decision's outcome."""

from __future__ import annotations

import sys
import uuid
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import Message, Part, Role, SendMessageRequest, TaskState
from google.protobuf.json_format import MessageToDict

from baf.log.postgres import PostgresLog
from baf.log.record import RecordKind

from .helpers import FIXTURE, free_port, owner_of, ready, stop_processes
from .test_delivery_processes import start

A2A_FIXTURE = FIXTURE.with_name("serve_a2a_agent.py")


def worker_command(dsn: str) -> list[str]:
    return [sys.executable, "-m", "baf.serve.process", "worker", str(A2A_FIXTURE), "--log", dsn,
            "--lease-ttl", "10", "--poll-interval", "1"]  # fmt: skip


async def ask(port: int, context_id: str, part: Part, task_id: str = "") -> dict[str, Any]:
    """Send one message to the worker on ``port``, streamed; what the task showed."""
    message = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, context_id=context_id, task_id=task_id,
                      parts=[part])  # fmt: skip
    shown: dict[str, Any] = {"states": [], "replies": [], "steps": [], "data": {}}
    async with httpx.AsyncClient(timeout=30) as http:
        client = await create_client(f"http://127.0.0.1:{port}/", ClientConfig(streaming=True, httpx_client=http))
        async for response in client.send_message(SendMessageRequest(message=message)):
            if response.HasField("status_update"):
                update = response.status_update
                shown["task_id"] = update.task_id
                shown["states"].append(TaskState.Name(update.status.state))
                for item in update.status.message.parts:
                    if item.HasField("data"):
                        data = MessageToDict(item.data)
                        if "reasoning_step" in data:
                            shown["steps"].append(data["reasoning_step"]["kind"])
                        else:
                            shown["data"] = data
            elif response.HasField("artifact_update"):
                shown["replies"].append("".join(p.text for p in response.artifact_update.artifact.parts))
    return shown


def decision(call_id: str, approved: bool) -> Part:
    part = Part()
    part.data.struct_value.update({"approval": {"call_id": call_id, "approved": approved}})
    return part


@pytest.mark.slow
async def test_a_task_sent_to_the_other_worker_is_answered_there_from_the_owners_log(postgres_dsn: str) -> None:
    port_a, port_b = free_port(), free_port()
    a, b = start(worker_command(postgres_dsn), port_a), start(worker_command(postgres_dsn), port_b)
    try:
        id_a, id_b = await ready(a), await ready(b)
        for context in ("c1", "c2"):  # a runs both contexts' sessions
            first = await ask(port_a, context, Part(text="q1"))
            assert first["replies"] == ["answer to q1"] and first["states"][-1] == "TASK_STATE_COMPLETED"
            assert await owner_of(postgres_dsn, f"a2a-{context}") == id_a
        # The same context on b: b forwards the message to a and publishes what a records, until handled.
        second = await ask(port_b, "c1", Part(text="q2"))
        assert second["replies"] == ["answer to q2"] and second["states"][-1] == "TASK_STATE_COMPLETED"
        assert second["steps"][0] == "reasoning_started" and second["steps"][-1] == "reasoning_finished"
        # A call waiting for approval, asked for through b while a runs the session: input-required on b.
        asked = await ask(port_b, "c2", Part(text="pay bob"))
        assert asked["states"][-1] == "TASK_STATE_INPUT_REQUIRED" and asked["replies"] == []
        assert [r["call_id"] for r in asked["data"]["approval_requests"]] == ["pay-bob"]
        # The decision in that task (whichever worker runs the session by now: a gives a session up once
        # its client is elsewhere) goes on to the answer.
        answered = await ask(port_b, "c2", decision("pay-bob", True), task_id=asked["task_id"])
        assert answered["task_id"] == asked["task_id"]
        assert answered["replies"] == ["Done: paid bob"] and answered["states"][-1] == "TASK_STATE_COMPLETED"
        assert id_a != id_b
        async with PostgresLog(postgres_dsn, read_only=True) as log:
            c1, c2 = await log.read("a2a-c1"), await log.read("a2a-c2")
        # q2 and "pay bob" went through the inbox to a (b only followed): their records carry the mark.
        forwarded = [r.data["text"] for r in c1 + c2 if r.kind == RecordKind.MESSAGE_RECEIVED and "forwarded" in r.data]
        assert forwarded == ["q2", "pay bob"]
        assert [r.data["text"] for r in c1 if r.kind == RecordKind.REPLY] == ["answer to q1", "answer to q2"]
        assert [r.data["text"] for r in c2 if r.kind == RecordKind.REPLY] == ["answer to q1", "Done: paid bob"]
        assert [r.data["by"] for r in c2 if r.kind == RecordKind.APPROVAL_DECIDED] == ["a2a client"]
    finally:
        await stop_processes([a, b])
